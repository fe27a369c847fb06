// Command-line parsing for xport-scale (CLI11), its list grammars, and the arguments that hand
// the same settings to the processes it starts.
#include "options.hpp"

#include <CLI/CLI.hpp>

#include <cctype>
#include <cstdint>
#include <iostream>

#include "common/cli.hpp"
#include "common/tool.hpp"

namespace scale {

using xport::Code;
using xport::Result;
using xport::Status;

int rounds_of(const Options& opt) {
  if (opt.rounds >= 0) return opt.rounds;
  return opt.mode == Mode::one_sided ? 20 : 3;
}

Result<size_t> parse_size(std::string_view option, std::string_view t) {
  auto bad = [&](const std::string& why) {
    return Status(Code::invalid_argument,
                  std::string(option) + ": '" + std::string(t) + "' " + why);
  };
  size_t i = 0;
  uint64_t v = 0;
  for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i) {
    if (v > (UINT64_MAX - 9) / 10) return bad("is too large");
    v = v * 10 + static_cast<uint64_t>(t[i] - '0');
  }
  if (i == 0) return bad("is not a number (examples: 4096, 4K, 1M)");
  int shift = 0;
  if (i < t.size()) {
    const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(t[i])));
    shift = c == 'K' ? 10 : c == 'M' ? 20 : -1;
    const std::string_view rest = t.substr(i + 1);
    if (shift < 0 || !(rest.empty() || rest == "B" || rest == "iB")) {
      return bad("has an unknown unit (use K or M: powers of 1024)");
    }
  }
  if (v == 0) return bad("is zero");
  if (v > (uint64_t{1} << 30 >> shift)) return bad("is above 1G");
  return static_cast<size_t>(v << shift);
}

namespace {

// "a,b,c" into its items; the error names the option and an empty item.
Result<std::vector<std::string>> split(std::string_view option, const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (;;) {
    const size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? comma : comma - pos);
    if (item.empty()) {
      return Status(Code::invalid_argument, std::string(option) + ": empty item in '" + text + "'");
    }
    out.push_back(item);
    if (comma == std::string::npos) return out;
    pos = comma + 1;
  }
}

// Peer counts: 1 .. kMaxPeers (the library's own limits are what the tool measures; this one
// only keeps a typo from asking for a million devices).
constexpr size_t kMaxPeers = 16384;

Result<std::vector<size_t>> parse_peers(const std::string& text) {
  XPORT_ASSIGN_OR_RETURN(auto items, split("--peers", text));
  std::vector<size_t> out;
  for (const auto& s : items) {
    size_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9' || v > kMaxPeers) {
        return Status(Code::invalid_argument, "--peers: '" + s + "' is not a peer count");
      }
      v = v * 10 + static_cast<size_t>(c - '0');
    }
    if (v == 0 || v > kMaxPeers) {
      return Status(Code::invalid_argument,
                    "--peers: '" + s + "' is outside 1.." + std::to_string(kMaxPeers));
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace

std::optional<int> parse(int argc, char** argv, Options* opt) {
  CLI::App app{
      "xport-scale: one target device and N initiator devices: how long N windows (or "
      "communicators) take to open, whether they all do, traffic into each with every byte "
      "verified, and what each peer costs at the target"};
  xport::tool::plain_help(app, 30);
  std::string mode = "one-sided", peers = "16,64", nics, size = "4K", sizes = "4K,1M";
  app.add_option("--mode", mode,
                 "one-sided (windows by the target's key, put_signal) or "
                 "two-sided (communicators to one listener, sends)")
      ->check(xport::tool::one_of({"one-sided", "two-sided"}));
  app.add_option("--peers", peers, "initiator counts N to measure, comma-separated (16,64,256)");
  app.add_option("--procs", opt->procs,
                 "0 (default): the initiator devices in the target's process; P: spread over P "
                 "child processes, the target alone in its own")
      ->check(xport::tool::number_in(0, 1024, "", true));
  app.add_option("--threads", opt->threads,
                 "threads per initiator process that open windows (connect) and issue, each "
                 "over its share of the devices (default 1: one after another)")
      ->check(xport::tool::number_in(1, 1024, "", true));
  app.add_option("--provider", opt->provider,
                 "libfabric provider (default: XPORT_PROVIDER, "
                 "else libxport's choice for peers on this host)");
  app.add_option("--nics", nics, "rails of every device, comma-separated domain names (lo)");
  app.add_option("--size", size, "one-sided: bytes of each put_signal (default 4K)");
  app.add_option("--sizes", sizes, "two-sided: message sizes (default 4K,1M)");
  app.add_option("--rounds", opt->rounds,
                 "rounds of traffic (one-sided: a put_signal from every initiator and quiet; "
                 "two-sided: a message of each size from every initiator); default 20 / 3")
      ->check(xport::tool::number_in(0, 1000000, "", true));
  app.add_option("--latency-peers", opt->latency_peers,
                 "one-sided: initiators sampled for put_signal latency (default 4, 0: none)")
      ->check(xport::tool::number_in(0, 1024, "", true));
  app.add_option("--latency-samples", opt->latency_samples,
                 "one-sided: latency samples per sampled initiator (default 50)")
      ->check(xport::tool::number_in(1, 100000, "", true));
  app.add_option("--idle-passes", opt->idle_passes,
                 "progress passes timed at the target with nothing to do (default 10000)")
      ->check(xport::tool::number_in(1, 10000000, "", true));
  app.add_option("--timeout", opt->timeout_s,
                 "seconds each phase of a run may take (device opening, window opening, the "
                 "rounds, the latency samples, closing); default 60")
      ->check(xport::tool::number_in(1, 3600, "", true));
  app.add_flag("--json", opt->json, "JSON Lines: one object per N");
  xport::tool::add_version(app, "xport-scale");
  app.add_option("--role", opt->role, "internal")
      ->group("")
      ->check(CLI::IsMember({"run", "initiators"}));
  app.add_option("--test-corrupt", opt->corrupt,
                 "internal: initiator 0 sends one wrong byte in this round")
      ->group("");
  // Placeholders for the help, instead of the parser's own type names.
  for (const auto& [name, placeholder] :
       std::initializer_list<std::pair<const char*, const char*>>{
           {"--mode", "MODE"}, {"--peers", "LIST"}, {"--procs", "P"}, {"--threads", "T"},
           {"--provider", "NAME"}, {"--nics", "A,B"}, {"--size", "BYTES"}, {"--sizes", "LIST"},
           {"--rounds", "N"}, {"--latency-peers", "N"}, {"--latency-samples", "N"},
           {"--idle-passes", "N"}, {"--timeout", "SECONDS"}}) {
    app.get_option(name)->type_name(placeholder);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return xport::tool::usage_exit(app, e, "xport-scale");
  }
  auto usage = [](const std::string& what) {  // one line, as every input error of the tools
    std::cerr << "xport-scale: " << what << "\n";
    return kExitUsage;
  };
  opt->mode = mode == "two-sided" ? Mode::two_sided : Mode::one_sided;
  auto p = parse_peers(peers);
  if (!p.ok()) return usage(p.status().message());
  opt->peers = *p;
  opt->nics.clear();
  if (!nics.empty()) {
    auto n = split("--nics", nics);
    if (!n.ok()) return usage(n.status().message());
    opt->nics = *n;
  }
  auto s = parse_size("--size", size);
  if (!s.ok()) return usage(s.status().message());
  if (*s > (size_t{1} << 20)) return usage("--size: at most 1M (the target holds N slots)");
  opt->size = *s;
  auto list = split("--sizes", sizes);
  if (!list.ok()) return usage(list.status().message());
  opt->sizes.clear();
  for (const auto& item : *list) {
    auto one = parse_size("--sizes", item);
    if (!one.ok()) return usage(one.status().message());
    if (*one > (size_t{64} << 20)) return usage("--sizes: '" + item + "' is above 64M");
    if (*one < 8) {
      return usage("--sizes: '" + item +
                   "' is under 8 bytes (a message's first 8 name its sender)");
    }
    opt->sizes.push_back(*one);
  }
  if (opt->role == "run" && opt->peers.size() != 1) return usage("--role run takes one --peers");
  return std::nullopt;
}

std::vector<std::string> child_args(const Options& opt, const std::string& role, size_t peers) {
  std::vector<std::string> a{"xport-scale", "--role", role, "--timeout",
                             std::to_string(opt.timeout_s)};
  if (!opt.provider.empty()) a.insert(a.end(), {"--provider", opt.provider});
  if (!opt.nics.empty()) {
    std::string n;
    for (const auto& x : opt.nics) n += (n.empty() ? "" : ",") + x;
    a.insert(a.end(), {"--nics", n});
  }
  if (role == "initiators") return a;  // the rest comes with the run's hello
  std::string sizes;
  for (size_t s : opt.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(s);
  a.insert(a.end(), {"--mode",
                     opt.mode == Mode::one_sided ? "one-sided" : "two-sided",
                     "--peers",
                     std::to_string(peers),
                     "--procs",
                     std::to_string(opt.procs),
                     "--threads",
                     std::to_string(opt.threads),
                     "--size",
                     std::to_string(opt.size),
                     "--sizes",
                     sizes,
                     "--rounds",
                     std::to_string(rounds_of(opt)),
                     "--latency-peers",
                     std::to_string(opt.latency_peers),
                     "--latency-samples",
                     std::to_string(opt.latency_samples),
                     "--idle-passes",
                     std::to_string(opt.idle_passes)});
  if (opt.json) a.push_back("--json");
  if (opt.corrupt >= 0) a.insert(a.end(), {"--test-corrupt", std::to_string(opt.corrupt)});
  return a;
}

}  // namespace scale
