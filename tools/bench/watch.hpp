// What ends an xport-bench run from outside its measurements: SIGINT, SIGTERM, and in local mode
// the death of the spawned peer. A thread of its own waits for them (they are blocked in every
// other thread), ends the run through the Printer (every measured row is already on stdout; the
// end names the signal or how the peer died) and exits: 128 + the signal for SIGINT and SIGTERM
// (after ending the peer), 1 when the peer died. Without it a SIGINT lost every point and a dead
// peer was found only by an operation's timeout, unnamed.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <optional>
#include <string>

namespace bench {

class Printer;

namespace watch {

// Blocks SIGINT, SIGTERM and SIGCHLD in this thread (and so in every thread started after) and
// starts the thread that waits for them. Call before any other thread starts.
void start();
// The Printer that ends the run (before it: one stderr line).
void set_printer(Printer* p);
// Local mode: the peer whose death ends the run, and who is ended on SIGINT and SIGTERM.
void set_peer(pid_t pid);
// From now on the peer's exit is expected (the run is finishing): it ends nothing.
void peer_may_exit();

// How `pid` ended ("was killed by signal 9 (SIGKILL)", "exited with status 1") if it has, within
// `grace_ms`; it stays waitable (reap_peer collects it).
std::optional<std::string> peer_ended(pid_t pid, int grace_ms);
// "SIGINT", "SIGKILL", ... or "signal N".
std::string signal_name(int sig);

}  // namespace watch
}  // namespace bench
