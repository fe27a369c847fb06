// Command-line parsing for xport-bench (CLI11) and the size-list grammar.
#include "options.hpp"
#include "common/cli.hpp"
#include "common/tool.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>

namespace bench {

using xport::Code;
using xport::Result;
using xport::Status;

std::string_view to_string(Op op) {
  switch (op) {
    case Op::send:
      return "send";
    case Op::put:
      return "put";
    case Op::get:
      return "get";
    case Op::put_signal:
      return "put-signal";
    case Op::atomic:
      return "atomic";
  }
  return "?";
}

namespace {

Result<size_t> parse_one(std::string_view t) {
  auto bad = [&](const std::string& why) {
    return Status(Code::invalid_argument, "--size: '" + std::string(t) + "' " + why);
  };
  size_t i = 0;
  uint64_t v = 0;
  for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i) {
    if (v > (UINT64_MAX - 9) / 10) return bad("is too large");
    v = v * 10 + static_cast<uint64_t>(t[i] - '0');
  }
  if (i == 0) return bad("is not a size (examples: 8, 4K, 1M, 1:64M)");
  std::string suf(t.substr(i));
  int shift = 0;
  if (!suf.empty()) {
    const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(suf[0])));
    shift = c == 'K' ? 10 : c == 'M' ? 20 : c == 'G' ? 30 : -1;
    std::string rest = suf.substr(1);
    if (shift < 0 || !(rest.empty() || rest == "B" || rest == "iB")) {
      return bad("has an unknown unit (use K, M or G: powers of 1024)");
    }
  }
  if (v == 0) return bad("is zero");
  if (shift > 0 && v > (UINT64_MAX >> shift)) return bad("is too large");
  v <<= shift;
  if (v > kMaxSize) {
    return bad("is above the largest message libxport accepts (" + std::to_string(kMaxSize) +
               " bytes)");
  }
  return static_cast<size_t>(v);
}

}  // namespace

Result<std::vector<size_t>> parse_sizes(std::string_view text) {
  std::vector<size_t> out;
  auto add = [&](size_t s) {
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  if (text.empty()) return Status(Code::invalid_argument, "--size: empty list");
  size_t pos = 0;
  for (;;) {
    const size_t comma = text.find(',', pos);
    std::string_view tok = text.substr(pos, comma == std::string_view::npos ? comma : comma - pos);
    if (tok.empty())
      return Status(Code::invalid_argument, "--size: empty item in '" + std::string(text) + "'");
    const size_t colon = tok.find(':');
    if (colon == std::string_view::npos) {
      XPORT_ASSIGN_OR_RETURN(size_t s, parse_one(tok));
      add(s);
    } else {
      XPORT_ASSIGN_OR_RETURN(size_t lo, parse_one(tok.substr(0, colon)));
      XPORT_ASSIGN_OR_RETURN(size_t hi, parse_one(tok.substr(colon + 1)));
      if (lo > hi) {
        return Status(Code::invalid_argument,
                      "--size: range '" + std::string(tok) + "' is reversed (start > end)");
      }
      for (size_t s = lo; s <= hi; s *= 2) {
        add(s);
        if (s > hi / 2) break;  // the next doubling passes the end (or would overflow)
      }
    }
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

int iterations_for(const Options& opt, size_t size) {
  if (opt.iterations_set) return opt.iterations;
  // Bytes moved per point: enough for a stable figure, small enough that 1:64M ends in seconds.
  const size_t budget = opt.check ? (size_t{256} << 20) : (size_t{1} << 30);
  const size_t n = std::clamp<size_t>(budget / size, 10, static_cast<size_t>(opt.iterations));
  return static_cast<int>(n);
}

int warmup_for(const Options& opt, size_t size) {
  if (opt.warmup_set) return opt.warmup;
  return std::clamp(iterations_for(opt, size) / 10, 1, opt.warmup);
}

int default_depth(Op op) { return op == Op::send ? 1 : 16; }

int depth_of(const Options& opt) { return opt.depth > 0 ? opt.depth : default_depth(opt.op); }

bool mpi_mode(const Options& opt) {
  if (opt.pattern.empty()) return false;
  if (opt.pattern != "alltoall") return true;
  if (opt.server || !opt.connect.empty()) return false;
  // Open MPI, MPICH/Hydra and PMIx launchers: alltoall under them is MPI mode, without them
  // it is the two processes of local mode.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

std::optional<int> parse(int argc, char** argv, Options* opt) {
  CLI::App app{
      "xport-bench: latency, bandwidth and message rate of libxport between two processes "
      "(local, two hosts) or many MPI ranks"};
  xport::tool::plain_help(app, 34);
  std::string op = "send", sizes = "8", nics, format_csv, pattern;
  bool json = false, csv = false;
  app.add_option("--op", op, "send (ping-pong), put, get, put-signal, atomic (default send)")
      ->check(xport::tool::one_of({"send", "put", "get", "put-signal", "atomic"}));
  app.add_option("--size", sizes,
                 "sizes: 8, 4K, 1M, ranges 1:64M (powers of two), lists 8,4K:1M (default 8)");
  app.add_option("--provider", opt->provider, "libfabric provider (default: as Context chooses)");
  app.add_option("--nics", nics,
                 "rails, comma-separated libfabric domain or interface names (default: "
                 "XPORT_RAILS, else the provider's choice)");
  auto* it = app.add_option("--iterations", opt->iterations,
                            "measured iterations per size (default 10000, fewer for large sizes)")
                 ->check(xport::tool::number_in(1, 100000000, "", true));
  auto* wu = app.add_option("--warmup", opt->warmup,
                            "unmeasured iterations first (default: iterations/10, at most 1000)")
                 ->check(xport::tool::number_in(0, 100000000, "", true));
  app.add_option("--depth", opt->depth,
                 "operations outstanding: sends in flight (1 = ping-pong), puts/gets per quiet "
                 "(default 1 for send, 16 for put and get)")
      ->check(xport::tool::number_in(1, 1024, "", true));
  app.add_option("--window", opt->depth, "old name of --depth")
      ->check(xport::tool::number_in(1, 1024, "", true))
      ->group("");
  app.add_option("--comms", opt->comms,
                 "communicators per peer and direction; messages and one-sided ops go "
                 "round-robin over them (default 1)")
      ->check(xport::tool::number_in(1, kMaxComms, "", true));
  app.add_option(
         "--groups", opt->groups,
         "XPORT_POOL_GROUPS for this run (0: no channel sharing); default: the "
         "environment's. Local mode gives the peer the same; a two-host server sets its own")
      ->check(xport::tool::number_in(0, 1024, "", true));
  app.add_option("--gap-us", opt->gap_us,
                 "send ping-pong: the initiator idles (busy, unmeasured) this many µs before each "
                 "ping, so that a peer with XPORT_WAIT=block is asleep when it comes (what a "
                 "wake-up costs: compare with XPORT_WAIT=spin)")
      ->check(xport::tool::number_in(0, 1000000, "", true));
  app.add_flag("--single-thread", opt->single_thread,
               "open the device with ContextOptions::thread_safe = false (one thread drives it: "
               "no engine lock, as a single-threaded runtime would; telemetry not published). "
               "Local mode gives the peer the same; a two-host server takes its own");
  app.add_option("--cpu", opt->cpu,
                 "run this process (and every thread it starts) on this CPU only "
                 "(sched_setaffinity), so that runs do not differ by where the scheduler put it; "
                 "a two-host server takes its own")
      ->check(xport::tool::number_in(0, 4095, "", true));
  app.add_option("--peer-cpu", opt->peer_cpu,
                 "local mode: the peer process on this CPU only (--cpu in local mode needs it)")
      ->check(xport::tool::number_in(0, 4095, "", true));
  app.add_flag("--sliding", opt->sliding,
               "put and get: the rate phase keeps --depth operations in flight (each new one "
               "waits for the oldest to be locally complete) and one quiet ends the phase, as "
               "fi-bare-loop's window; default: --depth operations per quiet");
  app.add_option("--slots", opt->slots,
                 "put and get without --check: the SIZE-byte slots the operations cycle through "
                 "on each side, whatever the depth (default 16; at most 64 MiB of them; 1 is "
                 "fabtests' fi_rma_bw, every write from one buffer to one address)")
      ->check(xport::tool::number_in(1, 65536, "", true));
  app.add_flag("--time-calls", opt->time_calls,
               "with --sliding, a diagnostic: the rate phase reads the clock around each put or "
               "get call and each wait for the oldest operation, and the JSON gives their mean "
               "ns per operation (time_calls), as fi-bare-loop --time-calls does for its posts "
               "and waits");
  std::string memory = "host", initiator = "host", scope = "thread";
  app.add_option("--memory", memory,
                 "host (default), or cuda: every buffer in GPU memory (cudaMalloc on --gpu, "
                 "registered: staged through host shadows); --check copies back from the GPU to "
                 "verify")
      ->check(xport::tool::one_of({"host", "cuda"}));
  app.add_option("--gpu", opt->gpu,
                 "--memory cuda, --initiator device: this process's GPU (default 0; a two-host "
                 "server takes its own)")
      ->check(xport::tool::number_in(0, 1023, "", true));
  app.add_option("--peer-gpu", opt->peer_gpu,
                 "local mode: the peer process's GPU (default: --gpu; 1 with --gpu 0 runs "
                 "between two GPUs)")
      ->check(xport::tool::number_in(0, 1023, "", true));
  app.add_option("--initiator", initiator,
                 "host (default), or device: a kernel issues the operations through a GpuProxy "
                 "(--op put: puts then quiet; --op put-signal: round trips, the peer's kernel "
                 "replying); needs --memory cuda")
      ->check(xport::tool::one_of({"host", "device"}));
  app.add_option("--device-scope", scope,
                 "--initiator device --op put: the kernel's put and quiet calls per thread (one "
                 "thread; default), warp (32 lanes, one issues) or block (128 threads, one issues)")
      ->check(xport::tool::one_of({"thread", "warp", "block"}));
  app.add_flag("--round-trip", opt->round_trip,
               "--op put-signal: latency of round trips (put_signal, the peer's wait_signal "
               "and reply put_signal, wait_signal here) instead of put_signal + quiet; always "
               "so with --initiator device");
  app.add_flag("--check", opt->check, "verify every byte of every transfer (slower)");
  app.add_flag("--json", json,
               "JSON Lines: a header record, a record per point as it is measured, an end record");
  app.add_flag("--csv", csv, "CSV: a header line, then a line per point as it is measured");
  app.add_option("--expect-bw", opt->expect_bw_gbs,
                 "exit 1 naming every size whose bandwidth is below this many GB/s")
      ->type_name("GB/S")
      ->check(xport::tool::positive("GB/s"));
  app.add_option("--expect-lat", opt->expect_lat_us,
                 "exit 1 naming every size whose p50 latency is above this many µs")
      ->type_name("US")
      ->check(xport::tool::positive("µs"));
  app.add_flag("--server", opt->server, "two-host mode: wait for one client (--port)");
  app.add_option("--port", opt->port, "two-host mode: TCP port of the bootstrap (default 18515)")
      ->check(xport::tool::number_in(1, 65535, "", true));
  app.add_option("--connect", opt->connect, "two-host mode: the server's HOST:PORT");
  app.add_option("--timeout", opt->timeout_s,
                 "seconds to wait for the other side and for each operation (default 30)")
      ->check(xport::tool::number_in(1, 3600, "", true));
  app.add_option("--pattern", pattern,
                 "pairwise, fan-in (MPI mode, under mpirun); alltoall (under mpirun: every rank "
                 "with every other; otherwise both sides of local or two-host mode send at once)")
      ->check(xport::tool::one_of({"pairwise", "alltoall", "fan-in"}));
  // Placeholders for the help, instead of the parser's own type names.
  for (const auto& [name, placeholder] :
       std::initializer_list<std::pair<const char*, const char*>>{
           {"--op", "OP"}, {"--size", "LIST"}, {"--provider", "NAME"}, {"--nics", "A,B"},
           {"--iterations", "N"}, {"--warmup", "N"}, {"--depth", "N"}, {"--slots", "N"},
           {"--comms", "N"}, {"--groups", "G"}, {"--gap-us", "US"}, {"--cpu", "CPU"},
           {"--peer-cpu", "CPU"}, {"--memory", "WHERE"}, {"--gpu", "N"}, {"--peer-gpu", "N"},
           {"--initiator", "WHO"},
           {"--device-scope", "SCOPE"}, {"--port", "PORT"}, {"--connect", "HOST:PORT"},
           {"--timeout", "SECONDS"}, {"--pattern", "PATTERN"}}) {
    app.get_option(name)->type_name(placeholder);
  }
  xport::tool::add_version(app, "xport-bench");
  app.add_option("--role", opt->role, "internal")->group("");
  app.add_option("--test-corrupt", opt->corrupt, "internal: corrupt one byte of this iteration")
      ->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return xport::tool::usage_exit(app, e, "xport-bench");
  }
  auto usage = [](const std::string& what) {  // one line, as every input error of the tools
    std::cerr << "xport-bench: " << what << "\n";
    return kExitUsage;
  };
  opt->iterations_set = it->count() > 0;
  opt->warmup_set = wu->count() > 0;
  opt->op = op == "send"         ? Op::send
            : op == "put"        ? Op::put
            : op == "get"        ? Op::get
            : op == "put-signal" ? Op::put_signal
                                 : Op::atomic;
  opt->pattern = pattern;
  if (json && csv) return usage("--json and --csv exclude each other");
  opt->format = json ? Format::json : csv ? Format::csv : Format::table;
  if (opt->server && !opt->connect.empty())
    return usage("--server and --connect exclude each other");
  if (opt->gap_us > 0 && (opt->op != Op::send || opt->depth > 1 || !pattern.empty())) {
    return usage("--gap-us belongs to the send ping-pong (--op send, depth 1, no --pattern)");
  }
  opt->cuda = memory == "cuda";
  opt->device_initiator = initiator == "device";
  opt->device_scope = scope == "warp" ? 1 : scope == "block" ? 2 : 0;
  if (opt->device_initiator && opt->op != Op::put && opt->op != Op::put_signal) {
    return usage("--initiator device belongs to --op put and --op put-signal, not --op " +
                 std::string(to_string(opt->op)));
  }
  if (opt->device_initiator && opt->single_thread) {
    return usage("--single-thread and --initiator device exclude each other (the GPU proxy's "
                 "thread drives the device beside the caller's)");
  }
  if (opt->device_initiator && !opt->cuda) {
    return usage("--initiator device needs --memory cuda (kernels put from and wait on GPU "
                 "memory)");
  }
  if (opt->device_initiator && (opt->comms != 1 || opt->sliding)) {
    return usage("--initiator device issues on one window: no --comms above 1, no --sliding");
  }
  if (opt->device_scope != 0 && !(opt->device_initiator && opt->op == Op::put)) {
    return usage("--device-scope belongs to --initiator device --op put");
  }
  if (opt->round_trip && opt->op != Op::put_signal) {
    return usage("--round-trip belongs to --op put-signal");
  }
  if ((opt->cuda || opt->round_trip || opt->device_initiator) && !pattern.empty()) {
    return usage("--memory cuda, --round-trip and --initiator device run between two processes "
                 "(local or two-host mode): not with --pattern");
  }
  if (opt->peer_gpu >= 0 && (!opt->cuda || opt->server || !opt->connect.empty())) {
    return usage("--peer-gpu belongs to local mode with --memory cuda (a two-host server takes "
                 "--gpu)");
  }
  if ((opt->cpu >= 0 || opt->peer_cpu >= 0) && mpi_mode(*opt)) {
    return usage("--cpu and --peer-cpu pin the processes of local and two-host modes (under "
                 "mpirun, the launcher's binding options place the ranks)");
  }
  if (opt->cpu >= 0 && opt->peer_cpu < 0 && !opt->server && opt->connect.empty() &&
      opt->role != "peer") {
    return usage("--cpu in local mode needs --peer-cpu too (the peer would inherit this "
                 "process's CPU)");
  }
  if (opt->peer_cpu >= 0 && (opt->server || !opt->connect.empty())) {
    return usage("--peer-cpu belongs to local mode (in two-host mode each side takes --cpu)");
  }
  if (opt->sliding && ((opt->op != Op::put && opt->op != Op::get) || opt->check)) {
    return usage("--sliding belongs to --op put and get, without --check (a sliding window "
                 "reuses slots while earlier operations on them are in flight)");
  }
  if (opt->time_calls && !opt->sliding) return usage("--time-calls goes with --sliding");
  if (opt->slots > 0 && ((opt->op != Op::put && opt->op != Op::get) || opt->check)) {
    return usage("--slots belongs to --op put and get, without --check (checked operations "
                 "each have a slot of their own)");
  }
  if (!pattern.empty() && pattern != "alltoall" && (opt->server || !opt->connect.empty())) {
    return usage("--pattern " + pattern + " (MPI mode) excludes --server and --connect");
  }
  if (opt->server && !pattern.empty()) {
    return usage("--server takes the pattern from its client: --pattern belongs to --connect");
  }
  if (!opt->connect.empty()) {
    const size_t colon = opt->connect.rfind(':');
    const std::string port = colon == std::string::npos ? "" : opt->connect.substr(colon + 1);
    char* end = nullptr;
    const long p = port.empty() ? 0 : std::strtol(port.c_str(), &end, 10);
    if (colon == 0 || port.empty() || *end != '\0' || p < 1 || p > 65535) {
      return usage("--connect wants HOST:PORT with a port in 1..65535, got '" + opt->connect + "'");
    }
  }
  auto parsed = parse_sizes(sizes);
  if (!parsed.ok()) return usage(parsed.status().message());
  opt->sizes = std::move(parsed).value();
  opt->nics.clear();
  for (size_t pos = 0; !nics.empty();) {
    const size_t comma = nics.find(',', pos);
    std::string n = nics.substr(pos, comma == std::string::npos ? comma : comma - pos);
    if (n.empty()) return usage("--nics '" + nics + "': empty rail name");
    opt->nics.push_back(n);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return std::nullopt;
}

}  // namespace bench
