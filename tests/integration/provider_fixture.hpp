// The fixture of the suites that run once per (provider, progress mode): it sets XPORT_PROVIDER
// and XPORT_PROGRESS (and any extra knobs a suite asks for), opens a Context and a Device, skips
// with the reason where libfabric lacks the provider, and undoes it all in TearDown.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/knob.hpp"
#include "xport/xport.hpp"

namespace xport::test {

struct ProviderParam {
  const char* provider;
  const char* progress;
};

inline std::string provider_param_name(const ::testing::TestParamInfo<ProviderParam>& info) {
  std::string s = std::string(info.param.provider) + "_" + info.param.progress;
  for (char& c : s)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
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
    ContextOptions o;
    o.peers_on_host = true;
    auto ctx = Context::open(o);
    if (!ctx.ok() && ctx.status().code() == Code::not_found) {
      GTEST_SKIP() << "provider " << GetParam().provider << " is absent: "
                   << ctx.status().to_string();
    }
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    ctx_ = std::move(ctx).value();
    auto dev = ctx_->open_device();
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    dev_ = std::move(dev).value();
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

}  // namespace xport::test
