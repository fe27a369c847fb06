// The initiators of xport-scale: a share of the N initiator devices, in a child process (--procs)
// or a thread of the target's process, doing what the target's lines say. The lines (one each
// way per step; every answer may end with " error=<the first error>" and every step answers even
// when some of its devices failed, naming them in bad=):
//   HELLO mode=one|two peers=N first=I count=C size=S threads=T key=HEX|handle=HEX
//                          -> READY devices=K rss0=B rss1=B reg=B   (devices opened; VmRSS before
//                             and after opening them; registered bytes of the K as opened)
//   OPEN | CONNECT         -> OPENED ok=K max_us=U rss0=B rss=B reg0=B reg=B bad=LIST code=CODE
//                             (VmRSS and registered bytes before and after)
//   ROUND r                -> DONE r bad=LIST     (put_signal into its slot, +1 on its word; quiet)
//   PING i r               -> PONG i t0=NS        (one put_signal from initiator i, t0 its issue)
//   SEND size r            -> SENT size r bad=LIST (a message of `size` on every comm, completed)
//   STATS                  -> STATS held=X deferred=Y
//   BYE                    -> BYE                 (everything closed)
// A failure that ends the host is "FAIL error=...".
#pragma once

#include "bench/bootstrap.hpp"
#include "options.hpp"

namespace scale {

// Serves the target over `ch` until BYE or the channel's end. Returns the exit code.
int run_initiators(bench::LineChannel& ch, const Options& opt);

// Where initiator `peer`'s slot and signal word are in the target's one-sided region.
inline size_t slot_stride(size_t size) { return (size + 63) / 64 * 64; }
inline size_t slot_offset(size_t peer, size_t size) { return peer * slot_stride(size); }
inline size_t word_offset(size_t peer, size_t peers, size_t size) {
  return peers * slot_stride(size) + peer * 8;
}
inline size_t region_bytes(size_t peers, size_t size) {
  return (word_offset(peers, peers, size) + 4095) / 4096 * 4096;
}

}  // namespace scale
