// Concurrent streams of xport-bench (streams.hpp).
#include "streams.hpp"

namespace bench {

using namespace xport;

Result<std::vector<Point>> run_streams(const std::vector<Session*>& outs,
                                       const std::vector<Session*>& ins, const Plan& p,
                                       std::chrono::steady_clock::time_point t0) {
  auto since = [&](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(t - t0).count();
  };
  std::vector<Point> mine(outs.size());
  const size_t k = outs.size();
  Status st = in_parallel(k + ins.size(), [&](size_t i) -> Status {
    Session& s = i < k ? *outs[i] : *ins[i - k];
    Status done;
    if (i < k) {
      auto m = run_point(s, p);
      if (m.ok()) {
        mine[i] = summarize(p, *m);
        mine[i].start_s = since(m->phase_start);
        mine[i].end_s = since(m->phase_end);
      }
      done = m.status();
    } else {
      bool bye = false;
      done = serve_point(s, &bye);
    }
    if (!done.ok()) s.close_comms();
    return done;
  });
  if (!st.ok()) return st;
  return mine;
}

}  // namespace bench
