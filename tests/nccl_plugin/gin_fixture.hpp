// The GIN suites' fixture: a provider (and domain) per case set in the environment, the plugin
// loaded with its GIN table before each test and unloaded after.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>

#include "driver.hpp"

namespace xport::nccl_test {

struct ProviderCase {
  const char* provider;
  const char* domain;  // "" for the provider's own choice
};

class GinFixture : public ::testing::TestWithParam<ProviderCase> {
 protected:
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
