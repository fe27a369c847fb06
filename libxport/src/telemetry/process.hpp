// Process identity for the stats segment: pid + start time tell a live owner from a dead one
// whose pid was reused; the program name is the default job label.
#pragma once

#include <sys/types.h>
#include <cstdint>
#include <string>

namespace xport::telemetry {

// Field 22 of /proc/<pid>/stat (clock ticks since boot); 0 when it cannot be read.
uint64_t process_start_ticks(pid_t pid);

enum class Liveness { alive, dead };
// Dead when no such pid exists, or when it now belongs to a process started at another time.
// A pid we may not signal (another user's) still counts as alive.
Liveness process_liveness(pid_t pid, uint64_t start_ticks);

// The name of this program's executable (the last part of /proc/self/exe; /proc/self/comm when
// that cannot be read), for the program label and the job label when XPORT_JOB is unset.
std::string program_name();

}  // namespace xport::telemetry
