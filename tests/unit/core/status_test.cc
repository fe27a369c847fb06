// Status and Result: values, messages, propagation macros.
#include <gtest/gtest.h>

#include <memory>

#include "core/format.hpp"
#include "xport/status.hpp"

namespace xport {
namespace {

Status fails() { return core::error(Code::timeout, "waiting for ", 3, " things"); }
Result<int> half(int v) {
  if (v % 2 != 0) return core::error(Code::invalid_argument, "odd value ", v);
  return v / 2;
}
Result<int> quarter(int v) {
  XPORT_ASSIGN_OR_RETURN(int h, half(v));
  XPORT_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}
Status chain() {
  XPORT_RETURN_IF_ERROR(fails());
  return Status::success();
}

TEST(Status, OkByDefaultAndCarriesMessages) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.to_string(), "ok");
  Status e = fails();
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.code(), Code::timeout);
  EXPECT_EQ(e.to_string(), "timeout: waiting for 3 things");
  EXPECT_EQ(e.with_context("connect").message(), "connect: waiting for 3 things");
  EXPECT_TRUE(Status().with_context("x").ok());
}

// An ok Status is two words with no message to hold; a failure's message is its own: copies
// do not share it, a move leaves an ok-looking empty message behind, and self-assignment keeps
// it.
TEST(Status, CopiesOwnTheirMessagesAndOkStatusesAreSmall) {
  static_assert(sizeof(Status) <= 2 * sizeof(void*));
  EXPECT_TRUE(Status().message().empty());
  EXPECT_TRUE(Status(Code::timeout, "").message().empty());
  Status a = fails();
  Status b = a;
  b = std::move(b).with_context("b");
  EXPECT_EQ(a.message(), "waiting for 3 things");
  EXPECT_EQ(b.message(), "b: waiting for 3 things");
  Status c;
  c = a;
  EXPECT_EQ(c.to_string(), a.to_string());
  Status& same = c;
  c = same;
  EXPECT_EQ(c.to_string(), "timeout: waiting for 3 things");
  Status d = std::move(c);
  EXPECT_EQ(d.message(), "waiting for 3 things");
  EXPECT_TRUE(c.message().empty());  // NOLINT(bugprone-use-after-move): moved-from, still valid
  d = Status();
  EXPECT_TRUE(d.ok());
  EXPECT_TRUE(d.message().empty());
  EXPECT_EQ(Status(Code::ok, "noted").message(), "noted");
}

TEST(Result, HoldsValueOrStatus) {
  auto a = quarter(8);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, 2);
  auto b = quarter(6);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::invalid_argument);
  EXPECT_EQ(b.status().message(), "odd value 3");
  EXPECT_EQ(chain().code(), Code::timeout);
}

TEST(Result, MoveOnlyValuesAndOkStatusIsRejected) {
  Result<std::unique_ptr<int>> r(std::make_unique<int>(5));
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 5);
  Result<int> bad{Status()};
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::internal);
  Result<int> copy = Result<int>(7);
  Result<int> other = copy;
  EXPECT_EQ(*other, 7);
  other = bad;
  EXPECT_FALSE(other.ok());
}

TEST(Code, EveryCodeHasText) {
  for (int c = 0; c <= static_cast<int>(Code::internal); ++c) {
    EXPECT_NE(to_string(static_cast<Code>(c)), "unknown code") << c;
  }
}

}  // namespace
}  // namespace xport

namespace xport {
namespace {

// Status and Result test as booleans ("if it succeeded"), as std::expected does; the
// conversion is explicit, so neither slips into arithmetic or comparisons.
TEST(Status, TestsAsABoolean) {
  static_assert(!std::is_convertible_v<Status, bool>);
  static_assert(!std::is_convertible_v<Result<int>, bool>);
  EXPECT_TRUE(static_cast<bool>(Status()));
  EXPECT_FALSE(static_cast<bool>(Status(Code::timeout, "late")));
  Result<int> r = 7;
  if (r) {
    EXPECT_EQ(*r, 7);
  } else {
    ADD_FAILURE() << "a Result with a value tested false";
  }
  Result<int> e = Status(Code::not_found, "none");
  EXPECT_FALSE(e);
}

}  // namespace
}  // namespace xport
