// The GIN suites' fixture: a provider (and domain) per case set in the environment, the plugin
// loaded with its GIN table before each test and unloaded after.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "driver.hpp"

namespace xport::nccl_test {

struct ProviderCase {
  const char* provider;
  const char* domain;  // "" for the provider's own choice
};

// The suites' cases: shm, and tcp;ofi_rxm on the loopback; named shm / tcp_ofi_rxm (meson's
// filters select them by that name).
inline auto gin_cases() {
  return ::testing::Values(ProviderCase{"shm", ""}, ProviderCase{"tcp;ofi_rxm", "lo"});
}
inline std::string gin_case_name(const ::testing::TestParamInfo<ProviderCase>& i) {
  return std::string(i.param.provider) == "shm" ? "shm" : "tcp_ofi_rxm";
}

class GinFixture : public ::testing::TestWithParam<ProviderCase> {
 protected:
  // The environment a peer process of this case runs in.
  std::vector<std::string> peer_env() const {
    std::vector<std::string> env = {std::string("XPORT_PROVIDER=") + GetParam().provider};
    if (*GetParam().domain != 0) env.push_back(std::string("XPORT_DOMAIN=") + GetParam().domain);
    return env;
  }
  void SetUp() override {
    setenv("XPORT_PROVIDER", GetParam().provider, 1);
    if (*GetParam().domain != 0) setenv("XPORT_DOMAIN", GetParam().domain, 1);
    ASSERT_TRUE(p_.load_gin()) << p_.error;
  }
  void TearDown() override {
    p_.unload();
    unsetenv("XPORT_PROVIDER");
    unsetenv("XPORT_DOMAIN");
  }
  Plugin p_;
};

}  // namespace xport::nccl_test
