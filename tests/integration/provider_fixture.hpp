// The fixture of the suites that run once per (provider, progress mode): it sets XPORT_PROVIDER
// and XPORT_PROGRESS (and any extra knobs a suite asks for), opens a Context and a Device, skips
// with the reason where libfabric lacks the provider, and undoes it all in TearDown.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/knob.hpp"
#include "harness.hpp"
#include "xport/xport.hpp"

namespace xport::test {

struct ProviderParam {
  const char* provider;
  const char* progress;
};

// A test parameter's name as gtest takes it: anything but letters and digits becomes '_'.
inline std::string param_safe(std::string s) {
  for (char& c : s)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

inline std::string provider_param_name(const ::testing::TestParamInfo<ProviderParam>& info) {
  return param_safe(std::string(info.param.provider) + "_" + info.param.progress);
}

// Opens a Context (peers on this host) and its Device with the knobs the environment holds;
// skips the test where libfabric lacks `provider`. Call last in SetUp (a skip or failure
// returns from here only).
inline void open_context_and_device(const char* provider, std::unique_ptr<Context>& ctx,
                                    std::unique_ptr<Device>& dev) {
  ContextOptions o;
  o.peers_on_host = true;
  auto c = Context::open(o);
  if (!c.ok() && c.status().code() == Code::not_found) {
    GTEST_SKIP() << "provider " << provider << " is absent: " << c.status().to_string();
  }
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ctx = std::move(c).value();
  auto d = ctx->open_device();
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  dev = std::move(d).value();
}

// The test peer process (XTEST_PEER_BIN) with `args`.
inline ChildProcess spawn_peer(const std::vector<std::string>& args) {
  const char* bin = std::getenv("XTEST_PEER_BIN");
  std::vector<std::string> argv{bin != nullptr ? bin : "xport-test-peer"};
  argv.insert(argv.end(), args.begin(), args.end());
  return ChildProcess::spawn(argv, {});
}

// The peer's next line, which must start with `prefix` (returned without it); `dev` makes
// progress meanwhile (with manual progress its last sends may still need it).
inline std::string expect_peer_line(ChildProcess& p, Device& dev, const std::string& prefix,
                                    int ms) {
  std::string err;
  std::string line = p.read_line(ms, &err, [&] { (void)dev.progress(); });
  EXPECT_EQ(line.rfind(prefix, 0), 0u) << "expected '" << prefix << "...' from the peer, got '"
                                       << line << "' " << err;
  return line.size() > prefix.size() ? line.substr(prefix.size()) : "";
}

// Every provider configuration the integration suites cover.
inline auto all_providers() {
  return ::testing::Values(ProviderParam{"shm", "auto"}, ProviderParam{"tcp;ofi_rxm", "auto"},
                           ProviderParam{"tcp;ofi_rxm", "manual"}, ProviderParam{"tcp", "auto"},
                           ProviderParam{"sockets", "auto"});
}

class ProviderTest : public ::testing::TestWithParam<ProviderParam> {
 protected:
  // Knobs a suite sets for all its tests, in the environment before the Context opens.
  virtual std::vector<std::pair<std::string, std::string>> extra_knobs() const { return {}; }

  void SetUp() override {
    setenv("XPORT_PROVIDER", GetParam().provider, 1);
    setenv("XPORT_PROGRESS", GetParam().progress, 1);
    for (const auto& [name, value] : extra_knobs()) setenv(name.c_str(), value.c_str(), 1);
    core::reload_knobs();
    open_context_and_device(GetParam().provider, ctx_, dev_);
  }

  void TearDown() override {
    dev_.reset();
    ctx_.reset();
    unsetenv("XPORT_PROVIDER");
    unsetenv("XPORT_PROGRESS");
    for (const auto& [name, value] : extra_knobs()) unsetenv(name.c_str());
    core::reload_knobs();
  }

  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Device> dev_;
};

struct Pair {
  std::unique_ptr<Listener> listener;
  std::unique_ptr<SendComm> send;
  std::unique_ptr<RecvComm> recv;
};

// A connection from `from` to a listener on `to`; both devices are progressed by this thread's
// calls (connect drives `from`, accept drives `to`), so the listener must answer before connect
// can finish: connect runs on a helper thread.
inline Pair connect_pair(Device& from, Device& to) {
  Pair p;
  auto l = to.listen();
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  if (!l.ok()) return p;
  p.listener = std::move(l).value();
  if (&from == &to) {
    auto s = from.connect(p.listener->handle(), Deadline::after(std::chrono::seconds(20)));
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (s.ok()) p.send = std::move(s).value();
  } else {
    Result<std::unique_ptr<SendComm>> s = Status(Code::internal, "not run");
    std::thread t([&] { s = from.connect(p.listener->handle(), Deadline::after(std::chrono::seconds(20))); });
    auto r = p.listener->accept(Deadline::after(std::chrono::seconds(20)));
    t.join();
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (s.ok()) p.send = std::move(s).value();
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (r.ok()) p.recv = std::move(r).value();
    return p;
  }
  auto r = p.listener->accept(Deadline::after(std::chrono::seconds(20)));
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (r.ok()) p.recv = std::move(r).value();
  return p;
}

}  // namespace xport::test
