// The GIN suites' fixture: a provider (and domain) per case set in the environment, the plugin
// loaded with its GIN table before each test and unloaded after.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "../integration/harness.hpp"
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

// Rank 0's side of the handle exchange with its peer process (rank 1): reads the peer's
// "HANDLE <hex>" line and answers with this rank's handle. The peer's handle, or empty with
// why in *err.
inline std::vector<uint8_t> exchange_handle(xport::test::ChildProcess& child,
                                            const std::vector<uint8_t>& mine, std::string* err) {
  std::string line = child.read_line(30000, err);
  if (line.rfind("HANDLE ", 0) != 0) {
    *err = "the peer said '" + line + "' " + *err;
    return {};
  }
  child.write_line("HANDLE " + xport::test::to_hex(mine));
  return xport::test::from_hex(line.substr(7));
}

class GinFixture : public ::testing::TestWithParam<ProviderCase> {
 protected:
  // The environment a peer process of this case runs in: the provider, and the knobs meson's
  // entries set for this process (lanes, the peer timeout), so both ranks run alike.
  std::vector<std::string> peer_env() const {
    std::vector<std::string> env = {std::string("XPORT_PROVIDER=") + GetParam().provider};
    if (*GetParam().domain != 0) env.push_back(std::string("XPORT_DOMAIN=") + GetParam().domain);
    for (const char* k : {"XPORT_NCCL_GIN_LANES", "XPORT_NCCL_LANES", "XPORT_NCCL_GIN_SPLIT_BYTES",
                          "XPORT_PEER_TIMEOUT_MS"}) {
      if (const char* v = std::getenv(k)) env.push_back(std::string(k) + "=" + v);
    }
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
