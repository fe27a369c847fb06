// Provider selection against the real libfabric of this machine: choices, reasons, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "core/knob.hpp"
#include "fabric/provider.hpp"
#include "xport/xport.hpp"

namespace xport::fabric {
namespace {

bool has(const std::string& prov) {
  auto l = list_providers();
  return std::find(l.begin(), l.end(), prov) != l.end();
}

TEST(ProviderSelection, LocalPeersPreferShm) {
  if (!has("shm")) GTEST_SKIP() << "libfabric on this host has no shm provider";
  ProviderRequest r;
  r.peers_on_host = true;
  auto s = select_provider(r);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->report.caps.provider, "shm");
  EXPECT_NE(s->report.reason.find("all peers are on this host"), std::string::npos)
      << s->report.reason;
  EXPECT_TRUE(s->report.caps.rma);
  EXPECT_GE(s->report.caps.remote_cq_data_size, 4u);
  EXPECT_FALSE(s->report.candidates.empty());
}

TEST(ProviderSelection, RemotePeersNeverGetShm) {
  ProviderRequest r;
  r.peers_on_host = false;
  r.domain = "lo";  // keep any traffic on loopback in this sandbox
  auto s = select_provider(r);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_NE(s->report.caps.provider, "shm");
  if (has("tcp")) {
    EXPECT_EQ(s->report.caps.provider, "tcp;ofi_rxm") << s->report.reason;
  }
}

TEST(ProviderSelection, TcpIsConnectedAndOnLoopbackForLocalPeers) {
  if (!has("tcp")) GTEST_SKIP() << "no tcp provider";
  ProviderRequest r;
  r.provider = "tcp";
  r.peers_on_host = true;
  auto s = select_provider(r);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->report.caps.endpoint_type, "msg");
  EXPECT_EQ(s->report.caps.domain, "lo");
  EXPECT_NE(s->report.reason.find("as requested"), std::string::npos);
}

TEST(ProviderSelection, ManualProgressWhenAsked) {
  if (!has("tcp")) GTEST_SKIP() << "no tcp provider";
  ProviderRequest r;
  r.provider = "tcp;ofi_rxm";
  r.peers_on_host = true;
  r.want_auto_progress = false;
  auto s = select_provider(r);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->report.caps.data_progress, "manual");
  EXPECT_EQ(s->report.caps.threading, "FI_THREAD_SAFE");
  EXPECT_FALSE(s->report.progress_fallback) << "manual was asked for, not a fallback";
}

// XPORT_PROGRESS=native: tcp;ofi_rxm's own data progress is manual (its auto progress is a
// thread that contends with libxport's progress for the endpoint's lock: an 8-byte ping-pong
// took 3-5 times as long), sockets' own is auto.
TEST(ProviderSelection, NativeProgressIsTheProvidersOwn) {
  if (!has("tcp")) GTEST_SKIP() << "no tcp provider";
  ProviderRequest r;
  r.provider = "tcp;ofi_rxm";
  r.peers_on_host = true;
  r.want_auto_progress = true;
  r.progress_native = true;
  auto s = select_provider(r);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->report.caps.data_progress, "manual") << s->report.reason;
  EXPECT_TRUE(s->report.progress_native_manual);
  EXPECT_FALSE(s->report.progress_fallback) << "manual is the provider's own, not a fallback";
  EXPECT_NE(s->report.reason.find("the provider's own"), std::string::npos) << s->report.reason;
  for (const auto& d : s->domains) {
    EXPECT_EQ(d->domain_attr->data_progress, FI_PROGRESS_MANUAL) << d->domain_attr->name;
  }
  if (has("sockets")) {
    r.provider = "sockets";
    s = select_provider(r);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->report.caps.data_progress, "auto") << s->report.reason;
    EXPECT_FALSE(s->report.progress_native_manual);
  }
}

TEST(ProviderSelection, UnknownNamesListWhatExists) {
  ProviderRequest r;
  r.provider = "no-such-provider";
  auto s = select_provider(r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::not_found);
  EXPECT_NE(s.status().message().find("'no-such-provider'"), std::string::npos);
  EXPECT_NE(s.status().message().find("libfabric lists:"), std::string::npos);
  r.provider = "";
  r.domain = "no-such-nic0";
  s = select_provider(r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("no-such-nic0"), std::string::npos) << s.status().message();
}

// fabric_info(): what xport-probe prints first; the runtime can be newer than the headers.
TEST(FabricInfo, VersionsAndProvidersOfThisHost) {
  FabricInfo f = fabric_info();
  EXPECT_EQ(f.build_version.rfind(std::to_string(FI_MAJOR_VERSION) + ".", 0), 0u)
      << f.build_version;
  EXPECT_EQ(f.api_version, "1.17");
  ASSERT_FALSE(f.runtime_version.empty());
  const auto [maj, min] = std::pair(std::stoi(f.runtime_version),
                                    std::stoi(f.runtime_version.substr(
                                        f.runtime_version.find('.') + 1)));
  EXPECT_GE(maj * 1000 + min, 1 * 1000 + 17) << f.runtime_version;
  EXPECT_EQ(f.providers, list_providers());
  EXPECT_FALSE(f.providers.empty());
}

TEST(ProviderSelection, CapabilityReportRenders) {
  ProviderRequest r;
  r.peers_on_host = true;
  auto s = select_provider(r);
  ASSERT_TRUE(s.ok());
  std::string text = to_string(s->report.caps);
  EXPECT_NE(text.find("provider " + s->report.caps.provider), std::string::npos);
  EXPECT_NE(text.find("mr_mode"), std::string::npos);
  EXPECT_NE(text.find("inject"), std::string::npos);
}

class ContextKnobs : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("XPORT_PROGRESS");
    unsetenv("XPORT_PROVIDER");
    unsetenv("XPORT_MAX_REQUESTS");
    core::reload_knobs();
  }
};

TEST_F(ContextKnobs, BadKnobValuesFailOpenByName) {
  setenv("XPORT_PROGRESS", "sometimes", 1);
  core::reload_knobs();
  auto c = Context::open();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("XPORT_PROGRESS='sometimes'"), std::string::npos)
      << c.status().message();
  unsetenv("XPORT_PROGRESS");
  setenv("XPORT_MAX_REQUESTS", "lots", 1);
  core::reload_knobs();
  c = Context::open();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("XPORT_MAX_REQUESTS"), std::string::npos);
}

TEST_F(ContextKnobs, ProviderKnobIsHonouredAndReported) {
  setenv("XPORT_PROVIDER", "tcp;ofi_rxm", 1);
  core::reload_knobs();
  ContextOptions o;
  o.peers_on_host = true;
  auto c = Context::open(o);
  if (!c.ok() && c.status().code() == Code::not_found) GTEST_SKIP() << "no tcp;ofi_rxm";
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ((*c)->provider().caps.provider, "tcp;ofi_rxm");
  setenv("XPORT_PROVIDER", "does-not-exist", 1);
  core::reload_knobs();
  auto bad = Context::open(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::not_found);
}

}  // namespace
}  // namespace xport::fabric
