// xport-gin-nccl's baseline: the same ping-pong and alltoall with host-initiated ncclSend and
// ncclRecv over the same net plugin, so GIN's figures have something to stand next to.
#include <algorithm>
#include <cstdio>
#include <numeric>

#include "gin_nccl.hpp"

namespace gin_nccl {
namespace {

void check_async(Rank& r, const std::string& what) {
  ncclResult_t async = ncclSuccess;
  GIN_NCCL_CHECK(ncclCommGetAsyncError(r.comm, &async));
  if (async != ncclSuccess && async != ncclInProgress)
    die(what + ": NCCL reports " + ncclGetErrorString(async));
}

[[noreturn]] void timed_out(Rank& r, const std::string& what, double seconds) {
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(r.comm, &async);
  die(what + ": not complete within " + std::to_string(seconds) +
      " s (NCCL async state: " + ncclGetErrorString(async) + ")");
}

void enqueue_alltoall(Rank& r, size_t chunk) {
  char* send = static_cast<char*>(r.send);
  char* recv = static_cast<char*>(r.recv);
  GIN_NCCL_CHECK(ncclGroupStart());
  for (int p = 0; p < r.nranks; ++p) {
    GIN_NCCL_CHECK(ncclSend(send + p * chunk, chunk, ncclUint8, p, r.comm, r.stream));
    GIN_NCCL_CHECK(ncclRecv(recv + p * chunk, chunk, ncclUint8, p, r.comm, r.stream));
  }
  GIN_NCCL_CHECK(ncclGroupEnd());
}

// Send buffer: this rank's chunk for rank p at p*chunk; receive buffer zeroed.
void prepare_alltoall(Rank& r, size_t chunk, uint64_t round) {
  const size_t words = chunk / 8;
  for (int p = 0; p < r.nranks; ++p)
    fill_pattern(r.host, p * words, words, kPatternSendRecvA2a, r.rank, p, round);
  copy_to_device(r, r.send, r.host.data(), r.nranks * chunk);
  zero_device(r, r.recv, r.nranks * chunk);
}

size_t verify_alltoall(Rank& r, size_t chunk, uint64_t round, const std::string& what) {
  const size_t words = chunk / 8;
  copy_to_host(r, r.host.data(), r.recv, r.nranks * chunk);
  for (int p = 0; p < r.nranks; ++p) {
    const std::string bad =
        check_pattern(&r.host[p * words], 0, words, kPatternSendRecvA2a, p, r.rank, round);
    if (!bad.empty()) {
      r.failures.push_back(what + ", the chunk from rank " + std::to_string(p) + ": " + bad);
      std::printf("rank %d: FAILED: %s\n", r.rank, r.failures.back().c_str());
    }
  }
  return r.nranks * chunk;
}

}  // namespace

void sendrecv_pingpong(Rank& r, size_t size, int size_index, Latency& out) {
  const std::string what = "send/recv ping-pong " + size_text(size);
  const int iters = pingpong_iterations(r.opt, size);
  const int warmup = std::min(10, iters);
  const size_t words = size / 8;
  fill_pattern(r.host, 0, words, kPatternSendRecvPP, r.rank, r.peer, size_index);
  copy_to_device(r, r.send, r.host.data(), size);
  zero_device(r, r.recv, size);

  std::vector<double> times;
  times.reserve(iters);
  for (int k = 0; k < warmup + iters; ++k) {
    const double t0 = now_s();
    // Each operation its own group: grouped together, the send and the receive of one rank would
    // run at once, and rank 1 would answer before it had received.
    for (int step = 0; step < 2; ++step) {
      const bool sending = (step == 0) == (r.rank == 0);
      GIN_NCCL_CHECK(ncclGroupStart());
      if (sending)
        GIN_NCCL_CHECK(ncclSend(r.send, size, ncclUint8, r.peer, r.comm, r.stream));
      else
        GIN_NCCL_CHECK(ncclRecv(r.recv, size, ncclUint8, r.peer, r.comm, r.stream));
      GIN_NCCL_CHECK(ncclGroupEnd());
    }
    if (!wait_stream(r.stream, r.opt.wait_timeout_s))
      timed_out(
          r, what + ", round trip " + std::to_string(k) + " of " + std::to_string(warmup + iters),
          r.opt.wait_timeout_s);
    if (k >= warmup) times.push_back((now_s() - t0) * 1e6);
  }
  check_async(r, what);

  copy_to_host(r, r.host.data(), r.recv, size);
  const std::string bad =
      check_pattern(r.host.data(), 0, words, kPatternSendRecvPP, r.peer, r.rank, size_index);
  if (!bad.empty()) {
    r.failures.push_back(what + ": the last message: " + bad);
    std::printf("rank %d: FAILED: %s\n", r.rank, r.failures.back().c_str());
  }

  out.measured = true;
  out.iterations = iters;
  out.samples = iters;
  out.avg_us = std::accumulate(times.begin(), times.end(), 0.0) / double(times.size());
  std::sort(times.begin(), times.end());
  out.p50_us = percentile(times, 0.50);
  out.p99_us = percentile(times, 0.99);
  out.min_us = times.front();
  out.max_us = times.back();
  out.bytes_checked = size;
  std::printf("rank %d: %s: %d round trips, avg %.2f us, p50 %.2f us, p99 %.2f us\n", r.rank,
              what.c_str(), iters, out.avg_us, out.p50_us, out.p99_us);
}

void sendrecv_alltoall(Rank& r, size_t chunk, Bandwidth& out) {
  const std::string what = "send/recv alltoall " + size_text(chunk);
  const int iters = bw_iterations_for(r.opt, chunk, r.nranks);

  // One alltoall, every byte checked.
  prepare_alltoall(r, chunk, 0);
  enqueue_alltoall(r, chunk);
  if (!wait_stream(r.stream, r.opt.wait_timeout_s))
    timed_out(r, what + ", the checked alltoall", r.opt.wait_timeout_s);
  size_t checked = verify_alltoall(r, chunk, 0, what + ", the checked alltoall");

  // The timed run: new data, so what is checked after it came from it.
  prepare_alltoall(r, chunk, 1);
  allreduce(r, 0, ncclMax, (what + ", before the timed run").c_str());
  const double t0 = now_s();
  for (int it = 0; it < iters; ++it) enqueue_alltoall(r, chunk);
  const double limit = r.opt.wait_timeout_s * iters;
  if (!wait_stream(r.stream, limit))
    timed_out(r, what + ", " + std::to_string(iters) + " alltoalls", limit);
  const double mine = now_s() - t0;
  check_async(r, what);
  checked += verify_alltoall(r, chunk, 1, what + ", after the timed run");
  const double slowest = allreduce(r, mine, ncclMax, (what + ", the times").c_str());

  record_alltoall(r, chunk, iters, slowest, checked, what, out);
}

}  // namespace gin_nccl
