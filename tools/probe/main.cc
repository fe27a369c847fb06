// xport-probe: is this node ready for a libxport job? A checklist (PASS / WARN / FAIL / SKIP with
// a one-line reason), as a table or --json. Exit 0 when nothing FAILs, 1 when something does,
// 2 for bad usage. Every check runs under its own deadline inside one overall budget.
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <iostream>
#include <thread>

#include "checks.hpp"
#include "common/cli.hpp"
#include "common/tool.hpp"

namespace probe {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Options {
  bool json = false;
  bool knobs = false;  // --knobs: the table lists every knob
  std::string provider;
  std::string nics;
  double timeout_s = 10;
  double loopback_s = 3;  // each rail's loopback check at most this long
  bool skip_loopback = false;
  std::string test_hang;  // tests only: this check hangs, to exercise the deadlines
};

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    if (comma > pos) out.push_back(list.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

// Runs checks one after another, each in its own thread under its own deadline. A check still
// running at its deadline is reported as a FAIL and abandoned (its thread is detached and keeps
// only its own references); the process then ends with _Exit, never joining it.
class Runner {
 public:
  Runner(std::chrono::duration<double> budget, std::string hang)
      : start_(Clock::now()),
        end_(start_ + std::chrono::duration_cast<Clock::duration>(budget)),
        hang_(std::move(hang)) {}

  // `budget`: the check's own limit; it gets less when the overall budget has less left.
  template <typename Fn>
  std::optional<Outcome> run(const std::string& name, const std::string& rail,
                             std::chrono::milliseconds budget, Fn fn) {
    const auto now = Clock::now();
    const auto last = end_ - kReserve;  // time to print the report
    if (now + kMinimum > last) {
      record(fail(name, rail, "not run: the time budget (--timeout) was spent before this check"));
      return std::nullopt;
    }
    const auto deadline = std::min(now + budget, last);
    auto task = std::make_shared<std::packaged_task<Outcome()>>(
        [fn = std::move(fn), deadline, hang = hang_ == name]() mutable {
          if (hang) std::this_thread::sleep_for(std::chrono::hours(1));  // --test-hang
          return fn(xport::Deadline::at(deadline));
        });
    auto fut = task->get_future();
    std::thread t([task] { (*task)(); });
    // The check's own deadline ends its waits; the grace lets it report that itself.
    if (fut.wait_until(std::min(deadline + kGrace, end_ - kReserve / 2)) !=
        std::future_status::ready) {
      t.detach();
      abandoned_ = true;
      const double s = std::chrono::duration<double>(Clock::now() - now).count();
      char why[128];
      std::snprintf(why, sizeof(why),
                    "did not finish within %.1f s: abandoned (hung in the "
                    "provider or the OS?)",
                    s);
      record(fail(name, rail, why), s);
      return std::nullopt;
    }
    t.join();
    Outcome o;
    try {
      o = fut.get();
    } catch (const std::exception& e) {
      o = fail(name, rail, std::string("internal error: ") + e.what());
    }
    record(o, std::chrono::duration<double>(Clock::now() - now).count());
    return o;
  }

  std::vector<Check>& checks() { return checks_; }
  bool abandoned() const { return abandoned_; }
  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  static constexpr auto kReserve = 200ms;
  static constexpr auto kMinimum = 50ms;
  static constexpr auto kGrace = 500ms;

  static Outcome fail(const std::string& name, const std::string& rail, std::string why) {
    Outcome o;
    o.check.name = name;
    o.check.rail = rail;
    o.check.status = Verdict::fail;
    o.check.reason = std::move(why);
    return o;
  }
  void record(const Outcome& o, double seconds = 0) {
    checks_.push_back(o.check);
    checks_.back().seconds = seconds;
  }

  Clock::time_point start_, end_;
  std::string hang_;
  std::vector<Check> checks_;
  bool abandoned_ = false;
};

Outcome skipped(const std::string& name, const std::string& rail, std::string why) {
  Outcome o;
  o.check.name = name;
  o.check.rail = rail;
  o.check.status = Verdict::skip;
  o.check.reason = std::move(why);
  return o;
}

int run(const Options& opt) {
  // The probe's own devices publish no stats segment unless the operator asked for it.
  const bool telemetry_by_probe = std::getenv("XPORT_TELEMETRY") == nullptr;
  if (telemetry_by_probe) setenv("XPORT_TELEMETRY", "0", 1);

  Runner runner(std::chrono::duration<double>(opt.timeout_s), opt.test_hang);
  Report report;
  report.version = xport::version();
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown");
  report.host = host;
  report.budget_s = opt.timeout_s;
  report.show_knobs = opt.knobs;

  runner.run("libfabric", "", 2000ms, [](xport::Deadline) { return check_libfabric(); });
  if (auto o = runner.run("knobs", "", 500ms,
                          [=](xport::Deadline) { return check_knobs(telemetry_by_probe); })) {
    report.knobs = o->knobs;
  }
  std::shared_ptr<const xport::topology::Topology> topo;
  std::shared_ptr<const xport::topology::Plan> plan;
  if (auto o =
          runner.run("topology", "", 3000ms, [](xport::Deadline) { return check_topology(); })) {
    topo = o->topo;
    plan = o->plan;
  }
  std::shared_ptr<xport::Context> ctx;
  if (auto o = runner.run("provider", "", 3000ms, [p = opt.provider, topo](xport::Deadline) {
        return check_provider(p, topo);
      })) {
    ctx = o->ctx;
  }
  const std::string no_ctx = "no provider: see the provider check";
  if (ctx) {
    runner.run("capabilities", "", 500ms,
               [ctx, topo](xport::Deadline) { return check_capabilities(ctx, topo); });
    runner.run("progress", "", 500ms, [ctx](xport::Deadline) { return check_progress(ctx); });
  } else {
    runner.run("capabilities", "", 100ms,
               [&](xport::Deadline) { return skipped("capabilities", "", no_ctx); });
    runner.run("progress", "", 100ms,
               [&](xport::Deadline) { return skipped("progress", "", no_ctx); });
  }

  // The rails to test: --nics, else XPORT_RAILS, else the plan's NICs this provider drives,
  // else the provider's chosen domain.
  std::vector<std::string> rails = split(!opt.nics.empty() ? opt.nics : knob_value("XPORT_RAILS"));
  if (rails.empty() && ctx && plan && topo) {
    const auto domains = ctx->domains();
    for (const auto& g : plan->gpus) {
      for (const auto& r : g.rails) {
        const std::string& n = topo->nics[r.nic].name;
        if (std::find(domains.begin(), domains.end(), n) != domains.end() &&
            std::find(rails.begin(), rails.end(), n) == rails.end()) {
          rails.push_back(n);
        }
      }
    }
  }
  if (rails.empty() && ctx) rails.push_back(ctx->provider().caps.domain);
  for (const auto& rail : rails) {
    runner.run("link", rail, 1000ms, [rail](xport::Deadline) { return check_link(rail); });
  }

  size_t devices = 1, per_device = std::max<size_t>(rails.size(), 1);
  if (plan && !plan->gpus.empty()) {
    devices = plan->gpus.size();
    per_device = 1;
    for (const auto& g : plan->gpus) per_device = std::max(per_device, g.rails.size());
  }
  const std::string provider = ctx ? ctx->provider().caps.provider : "";
  runner.run("memlock", "", 500ms, [=](xport::Deadline) {
    return check_memlock(devices, per_device, provider);
  });

  const bool rdm = ctx && ctx->provider().caps.endpoint_type == "rdm";
  std::vector<std::string> reg_rails =
      rdm ? rails
          : std::vector<std::string>(rails.begin(),
                                     rails.begin() + std::min<size_t>(1, rails.size()));
  if (ctx) {
    runner.run("host-registration", "", 2000ms, [ctx, reg_rails](xport::Deadline d) {
      return check_host_registration(ctx, reg_rails, d);
    });
  } else {
    runner.run("host-registration", "", 100ms,
               [&](xport::Deadline) { return skipped("host-registration", "", no_ctx); });
  }
  runner.run("gpu-registration", "", 1000ms,
             [topo, ctx](xport::Deadline) { return check_gpu_registration(topo, ctx); });

  const size_t eager_max = parse_size(knob_value("XPORT_EAGER_MAX")).value_or(8192);
  if (opt.skip_loopback) {
    runner.run("loopback", "", 100ms,
               [](xport::Deadline) { return skipped("loopback", "", "--skip-loopback"); });
  } else if (!ctx) {
    runner.run("loopback", "", 100ms,
               [&](xport::Deadline) { return skipped("loopback", "", no_ctx); });
  } else {
    for (size_t i = 0; i < rails.size(); ++i) {
      // Each rail gets at most --loopback-timeout and an even share of what is left.
      const auto left = std::chrono::duration<double>(opt.timeout_s - runner.elapsed());
      const auto share =
          std::chrono::duration_cast<std::chrono::milliseconds>(left / double(rails.size() - i));
      const auto budget = std::min(
          std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::duration<double>(opt.loopback_s)),
          share);
      const std::string rail = rails[i];
      runner.run("loopback", rail, budget, [ctx, rail, eager_max](xport::Deadline d) {
        return check_loopback(ctx, rail, eager_max, d);
      });
    }
  }

  report.checks = runner.checks();
  report.elapsed_s = runner.elapsed();
  const std::string out = opt.json ? to_json(report) : to_table(report);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  const int rc = report.exit_status();
  // An abandoned check may still be inside the library: end without running destructors.
  if (runner.abandoned()) std::_Exit(rc);
  return rc;
}

}  // namespace
}  // namespace probe

int main(int argc, char** argv) {
  CLI::App app{
      "xport-probe: is this node ready for a libxport job? Checks libfabric, the provider and its\n"
      "capabilities, topology, links, locked memory, registration and a loopback transfer on\n"
      "every rail. Exit 0: nothing FAILs; 1: something FAILs; 2: bad usage."};
  xport::tool::plain_help(app, 32);
  probe::Options opt;
  app.add_flag("--json", opt.json, "one JSON object (schema in docs/tools.md) instead of a table");
  app.add_flag("--knobs", opt.knobs,
               "list every knob in effect under the checklist (the JSON always has them)");
  app.add_option("--provider", opt.provider,
                 "libfabric provider to check (default: XPORT_PROVIDER, else the best available)")
      ->type_name("NAME");
  app.add_option("--nics", opt.nics,
                 "rails to check, comma-separated domain names (default: XPORT_RAILS, else the "
                 "NIC plan's rails, else the provider's domain)")
      ->type_name("A,B");
  app.add_option("--timeout", opt.timeout_s, "overall time budget, 1 to 600 (default 10)")
      ->type_name("SECONDS")
      ->check(xport::tool::number_in(1.0, 600.0, "seconds"));
  app.add_option("--loopback-timeout", opt.loopback_s,
                 "each rail's loopback check, 0.1 to 600, within --timeout (default 3)")
      ->type_name("SECONDS")
      ->check(xport::tool::number_in(0.1, 600.0, "seconds"));
  app.add_flag("--skip-loopback", opt.skip_loopback, "do not run the loopback transfers");
  xport::tool::add_version(app, "xport-probe");
  // Hidden, for tests/tools/xport_probe_test.py: make one check hang to prove the deadlines.
  app.add_option("--test-hang", opt.test_hang, "")->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return xport::tool::usage_exit(app, e, "xport-probe");
  }
  try {
    return probe::run(opt);
  } catch (const std::exception& e) {
    return xport::tool::early_failure("xport-probe", opt.json, e.what());
  }
}
