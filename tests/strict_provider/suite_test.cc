// libxport's integration suite (tests/integration/transfer_test.cc: two-sided streams both
// ways, put/get, error completions, a killed peer, bad input) and its teardown tests
// (teardown_test.cc: waits that time out, then close; a peer device of the process closed under
// queued operations) instantiated over the strict provider. The fixtures live in those files'
// anonymous namespaces, so the files are included here rather than copied; run with
// --gtest_filter='Strict/*' to skip their own instantiations.
#include "../integration/teardown_test.cc"
#include "../integration/transfer_test.cc"

namespace xport {
namespace {

INSTANTIATE_TEST_SUITE_P(Strict, Transfer,
                         ::testing::Values(Param{"strict", "auto"}, Param{"strict", "manual"}),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Strict, Teardown,
                         ::testing::Values(Param{"strict", "auto"}, Param{"strict", "manual"}),
                         param_name);

}  // namespace
}  // namespace xport
