// libxport's integration suite (tests/integration/transfer_test.cc: two-sided streams both
// ways, put/get, error completions, a killed peer, bad input) instantiated over the strict
// provider. The fixture lives in that file's anonymous namespace, so the file is included here
// rather than copied; run with --gtest_filter='Strict/*' to skip its own instantiations.
#include "../integration/transfer_test.cc"

namespace xport {
namespace {

INSTANTIATE_TEST_SUITE_P(Strict, Transfer,
                         ::testing::Values(Param{"strict", "auto"}, Param{"strict", "manual"}),
                         param_name);

}  // namespace
}  // namespace xport
