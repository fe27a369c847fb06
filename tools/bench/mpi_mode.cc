// MPI mode (mpi_mode.hpp): ranks exchange session hellos through MPI (one alltoall), run the
// pattern's initiator-target pairs concurrently (a thread per session, MPI only on the main
// thread), and rank 0 prints the aggregate of every stream per size as it is measured.
// The C API is all we use; Open MPI's deprecated C++ bindings do not build with -Werror.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdio>

#include "mpi_mode.hpp"
#include "ops.hpp"
#include "printer.hpp"
#include "report.hpp"
#include "streams.hpp"

namespace bench {

using namespace xport;

namespace {

int worst(int rc) {
  int w = rc;
  MPI_Allreduce(&rc, &w, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return w;
}

// Waits for every rank while driving this device's progress. One-sided protocols need the
// peer's progress: a rank whose own windows are open would otherwise sit in MPI (blocking, no
// progress) while a peer still waits for it to answer that peer's window request.
void progress_barrier(Device& dev) {
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  for (int done = 0; !done;) {
    (void)dev.progress();
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
  }
}

int run_ranks(const Options& opt, int rank, int n, const std::vector<std::string>& argv) {
  auto say = [&](const std::string& what, const Status& s) {
    std::fprintf(stderr, "xport-bench: rank %d: %s: %s\n", rank, what.c_str(),
                 s.to_string().c_str());
    return kExitFailed;
  };
  // Who initiates to whom: I initiate to `targets`; `initiators` initiate to me.
  std::vector<int> targets, initiators;
  if (opt.pattern == "pairwise") {
    const int partner = rank ^ 1;  // an odd rank count leaves the last rank idle
    if (partner < n) (rank % 2 == 0 ? targets : initiators).push_back(partner);
  } else if (opt.pattern == "alltoall") {
    for (int j = 0; j < n; ++j) {
      if (j != rank) {
        targets.push_back(j);
        initiators.push_back(j);
      }
    }
  } else if (rank == 0) {  // fan-in: every rank into rank 0
    for (int j = 1; j < n; ++j) initiators.push_back(j);
  } else {
    targets.push_back(0);
  }

  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  ContextOptions co;
  co.provider = opt.provider;
  co.thread_safe = !opt.single_thread;
  co.peers_on_host = node_size == n;  // shm is the first choice only when every rank is here
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Device> dev;
  int rc = kExitOk;
  if (auto c = Context::open(co); !c.ok()) {
    rc = say("context", c.status());
  } else {
    ctx = std::move(c).value();
    DeviceOptions d;
    d.rails = opt.nics;
    if (auto dv = ctx->open_device(d); !dv.ok())
      rc = say("device", dv.status());
    else
      dev = std::move(dv).value();
  }
  if (worst(rc) != kExitOk) return kExitFailed;

  std::vector<Plan> plans;
  for (size_t size : opt.sizes) plans.push_back(make_plan(opt, size));
  const size_t bytes = buffer_bytes(plans);
  const auto timeout = std::chrono::seconds(opt.timeout_s);
  std::vector<std::unique_ptr<Session>> out(n), in(n);  // by peer rank
  auto open_all = [&]() -> Status {
    for (int j : targets) {
      XPORT_ASSIGN_OR_RETURN(out[j], Session::open(*dev, bytes, timeout, opt.comms));
    }
    for (int j : initiators) {
      XPORT_ASSIGN_OR_RETURN(in[j], Session::open(*dev, bytes, timeout, opt.comms));
    }
    return Status();
  };
  if (Status st = open_all(); !st.ok()) rc = say("session", st);
  if (worst(rc) != kExitOk) return kExitFailed;

  // Block for rank j: my initiator-side hello for j, newline, my target-side hello for j.
  std::vector<std::string> blocks(n);
  int longest = 0;
  for (int j = 0; j < n; ++j) {
    blocks[j] = (out[j] ? out[j]->hello() : "") + "\n" + (in[j] ? in[j]->hello() : "");
    longest = std::max(longest, static_cast<int>(blocks[j].size()) + 1);
  }
  int block = 0;
  MPI_Allreduce(&longest, &block, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  std::vector<char> send(static_cast<size_t>(block) * n, 0), recv(send.size(), 0);
  for (int j = 0; j < n; ++j) std::copy(blocks[j].begin(), blocks[j].end(), &send[j * block]);
  MPI_Alltoall(send.data(), block, MPI_CHAR, recv.data(), block, MPI_CHAR, MPI_COMM_WORLD);
  std::vector<uint64_t> links(n);
  uint64_t my_link = 0;
  bool known = true;
  for (const auto& r : dev->rail_info()) {
    my_link += r.link_bits_per_s;
    known = known && r.link_bits_per_s > 0;
  }
  if (!known) my_link = 0;
  MPI_Allgather(&my_link, 1, MPI_UINT64_T, links.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);

  // Every session joins at once: connects wait on peers that are joining their own.
  std::vector<std::pair<Session*, std::string>> joins;
  std::vector<bool> as_initiator;
  for (int j = 0; j < n; ++j) {
    const std::string theirs(&recv[j * block]);
    const size_t nl = theirs.find('\n');
    if (out[j])
      joins.push_back({out[j].get(), theirs.substr(nl + 1)}), as_initiator.push_back(true);
    if (in[j]) joins.push_back({in[j].get(), theirs.substr(0, nl)}), as_initiator.push_back(false);
  }
  if (Status st = in_parallel(
          joins.size(),
          [&](size_t i) { return joins[i].first->join(joins[i].second, as_initiator[i]); });
      !st.ok()) {
    rc = say("connecting", st);
  }
  progress_barrier(*dev);  // (before any blocking MPI call: peers may still open their windows)
  if (worst(rc) != kExitOk) return kExitFailed;

  // Rank 0 describes the run before the first point and prints each point as it is measured.
  // The fraction is of the links data arrives on: every target rank's rails (0: some unknown).
  RunInfo run = describe_run(opt, *dev, "mpi");
  run.ranks = n;
  std::vector<bool> is_target(n, false);
  if (opt.pattern == "pairwise") {
    for (int j = 1; j < n; j += 2) is_target[j] = true;
  } else if (opt.pattern == "alltoall") {
    is_target.assign(n, true);
  } else {
    is_target[0] = true;
  }
  run.link_bits_per_s = 0;
  for (int j = 0; j < n; ++j) {
    if (!is_target[j]) continue;
    if (links[j] == 0) {
      run.link_bits_per_s = 0;
      break;
    }
    run.link_bits_per_s += links[j];
  }
  std::unique_ptr<Printer> printer;
  if (rank == 0) {
    printer = std::make_unique<Printer>(opt.format, false);
    printer->begin(run, argv, plans.size());
  }
  std::vector<Point> points;
  for (const Plan& p : plans) {
    if (printer) printer->measuring(p);
    MPI_Barrier(MPI_COMM_WORLD);  // every stream of a size runs at the same time
    std::vector<Session*> outs, ins;
    for (int j : targets) outs.push_back(out[j].get());
    for (int j : initiators) ins.push_back(in[j].get());
    auto mine = run_streams(outs, ins, p, std::chrono::steady_clock::now());
    if (!mine.ok()) rc = say("size " + std::to_string(p.size), mine.status());
    if (worst(rc) != kExitOk) {
      if (printer) printer->end(EndStatus::failed, "a rank failed (its error is above)", 1);
      return kExitFailed;
    }
    const size_t k = mine->size();
    std::vector<double> packed(k * kPointDoubles);
    for (size_t i = 0; i < k; ++i) pack((*mine)[i], &packed[i * kPointDoubles]);
    int count = static_cast<int>(packed.size());
    std::vector<int> counts(n), displs(n);
    MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    int total = 0;
    for (int j = 0; j < n; ++j) displs[j] = total, total += counts[j];
    std::vector<double> all(static_cast<size_t>(std::max(total, 1)));
    MPI_Gatherv(packed.data(), count, MPI_DOUBLE, all.data(), counts.data(), displs.data(),
                MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      std::vector<Point> streams;
      for (int i = 0; i < total; i += kPointDoubles) streams.push_back(unpack(&all[i]));
      points.push_back(aggregate(streams));
      const Stats stats = dev->stats();  // with every comm still open
      run.pool = stats.pool;
      run.progress = progress_of(stats);
      printer->point(run, points.back());
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);               // nobody closes a session its peer still uses
  out.clear();
  in.clear();
  if (rank != 0) return kExitOk;
  const int verdict = check_expectations(opt, points);
  printer->end(EndStatus::complete, "", verdict);
  return verdict;
}

}  // namespace

int run_mpi(const Options& opt, int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int rc;
  if (n < 2) {
    if (rank == 0) std::fprintf(stderr, "xport-bench: --pattern needs at least 2 MPI ranks\n");
    rc = kExitUsage;
  } else {
    rc = run_ranks(opt, rank, n, std::vector<std::string>(argv, argv + argc));
  }
  // Rank 0's verdict includes --expect-*; every rank exits with the worst.
  rc = worst(rc);
  MPI_Finalize();
  return rc;
}

}  // namespace bench
