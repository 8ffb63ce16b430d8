// gtest/gmock helpers for strata's Status and StatusOr (abseil's, core/status.h), shared by
// every package's tests so a failure always prints the status it got:
//   EXPECT_OK(expr) / ASSERT_OK(expr)   expr is an absl::Status or absl::StatusOr<T> that is OK;
//                                       more context can be streamed: ASSERT_OK(s) << "step " << t;
//   ASSERT_OK_AND_ASSIGN(lhs, expr)     asserts the StatusOr `expr` is OK, then moves its value
//                                       into `lhs` (`auto x`, `Type x` or an existing variable);
//   StatusIs(code, message_matcher)     gmock matcher on Status or StatusOr: the code equals
//                                       `code` (or matches a Matcher<absl::StatusCode>) and the
//                                       message matches, e.g.
//       EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zero.stage")));
//   StatusIs(code)                      the code alone, any message;
//   IsOk()                              gmock matcher: OK (for Not(IsOk()), or inside others);
//   IsOkAndHolds(matcher)               gmock matcher: an OK StatusOr whose value matches, e.g.
//       EXPECT_THAT(ParseBytes("2GiB"), IsOkAndHolds(2ull << 30));
// Like ASSERT_TRUE, ASSERT_OK and ASSERT_OK_AND_ASSIGN return from the enclosing function, so
// they only compile in functions returning void. The expression is evaluated exactly once.
// The matchers live in strata::testing: inside namespace strata an unqualified `testing::`
// means this namespace, so name gtest's as `::testing::` there. ASSERT_OK_AND_ASSIGN uses
// GTEST_ASSERT_/GTEST_FATAL_FAILURE_, the macros gtest's own ASSERT_PRED_FORMAT* expand to.
// Thread-safety: as gtest's own assertions (failures may be reported from any thread).
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "core/status.h"

namespace strata {
namespace testing {
namespace internal {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }

template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

// The predicate-formatter behind EXPECT_OK/ASSERT_OK: names the expression and prints the
// status (code and message) when it is not OK.
template <typename StatusType>
::testing::AssertionResult AssertOk(const char* expression_text, const StatusType& value) {
  const absl::Status& status = GetStatus(value);
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << expression_text << " is not OK: " << status;
}

// Matches the code and message of a Status; shared by every type StatusIs is applied to.
class StatusIsMatcherCommon {
 public:
  StatusIsMatcherCommon(::testing::Matcher<absl::StatusCode> code_matcher,
                        ::testing::Matcher<const std::string&> message_matcher)
      : code_matcher_(std::move(code_matcher)), message_matcher_(std::move(message_matcher)) {}

  void DescribeTo(std::ostream* os) const {
    *os << "has a status code that ";
    code_matcher_.DescribeTo(os);
    *os << ", and a message that ";
    message_matcher_.DescribeTo(os);
  }

  void DescribeNegationTo(std::ostream* os) const {
    *os << "has a status code that ";
    code_matcher_.DescribeNegationTo(os);
    *os << ", or a message that ";
    message_matcher_.DescribeNegationTo(os);
  }

  bool MatchAndExplain(const absl::Status& status, ::testing::MatchResultListener* listener) const {
    // gtest prints a StatusOr as bytes, so the explanation always carries the status itself.
    *listener << "whose status is " << status;
    ::testing::StringMatchResultListener inner;
    if (!code_matcher_.MatchAndExplain(status.code(), &inner)) {
      *listener << " (the code does not match" << (inner.str().empty() ? "" : ": ") << inner.str()
                << ")";
      return false;
    }
    const std::string message(status.message());
    if (!message_matcher_.MatchAndExplain(message, &inner)) {
      *listener << " (the message does not match" << (inner.str().empty() ? "" : ": ")
                << inner.str() << ")";
      return false;
    }
    return true;
  }

 private:
  ::testing::Matcher<absl::StatusCode> code_matcher_;
  ::testing::Matcher<const std::string&> message_matcher_;
};

// StatusIs for one argument type (`const absl::Status&` or `const absl::StatusOr<T>&`).
template <typename StatusType>
class MonoStatusIsMatcher : public ::testing::MatcherInterface<StatusType> {
 public:
  explicit MonoStatusIsMatcher(StatusIsMatcherCommon common) : common_(std::move(common)) {}
  void DescribeTo(std::ostream* os) const override { common_.DescribeTo(os); }
  void DescribeNegationTo(std::ostream* os) const override { common_.DescribeNegationTo(os); }
  bool MatchAndExplain(StatusType value, ::testing::MatchResultListener* listener) const override {
    return common_.MatchAndExplain(GetStatus(value), listener);
  }

 private:
  StatusIsMatcherCommon common_;
};

// The polymorphic matcher StatusIs returns: it becomes a Matcher of whichever type it meets.
class StatusIsMatcher {
 public:
  explicit StatusIsMatcher(StatusIsMatcherCommon common) : common_(std::move(common)) {}

  template <typename StatusType>
  operator ::testing::Matcher<StatusType>() const {  // NOLINT: implicit by design, as gmock's
    return ::testing::Matcher<StatusType>(
        new MonoStatusIsMatcher<const std::decay_t<StatusType>&>(common_));
  }

 private:
  StatusIsMatcherCommon common_;
};

// IsOk() for one argument type.
template <typename StatusType>
class MonoIsOkMatcher : public ::testing::MatcherInterface<StatusType> {
 public:
  void DescribeTo(std::ostream* os) const override { *os << "is OK"; }
  void DescribeNegationTo(std::ostream* os) const override { *os << "is not OK"; }
  bool MatchAndExplain(StatusType value, ::testing::MatchResultListener* listener) const override {
    const absl::Status& status = GetStatus(value);
    *listener << "whose status is " << status;
    return status.ok();
  }
};

class IsOkMatcher {
 public:
  template <typename StatusType>
  operator ::testing::Matcher<StatusType>() const {  // NOLINT: implicit by design, as gmock's
    return ::testing::Matcher<StatusType>(new MonoIsOkMatcher<const std::decay_t<StatusType>&>());
  }
};

// IsOkAndHolds(inner) for one StatusOr type.
template <typename StatusOrType>
class MonoIsOkAndHoldsMatcher : public ::testing::MatcherInterface<StatusOrType> {
 public:
  using Value = typename std::decay_t<StatusOrType>::value_type;

  explicit MonoIsOkAndHoldsMatcher(::testing::Matcher<const Value&> inner)
      : inner_(std::move(inner)) {}

  void DescribeTo(std::ostream* os) const override {
    *os << "is OK and has a value that ";
    inner_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const override {
    *os << "is not OK, or has a value that ";
    inner_.DescribeNegationTo(os);
  }
  bool MatchAndExplain(StatusOrType value,
                       ::testing::MatchResultListener* listener) const override {
    if (!value.ok()) {
      *listener << "whose status is " << value.status();
      return false;
    }
    ::testing::StringMatchResultListener inner;
    const bool matches = inner_.MatchAndExplain(*value, &inner);
    *listener << "whose value " << ::testing::PrintToString(*value)
              << (matches ? " matches" : " does not match");
    if (!inner.str().empty()) *listener << ", " << inner.str();
    return matches;
  }

 private:
  ::testing::Matcher<const Value&> inner_;
};

template <typename InnerMatcher>
class IsOkAndHoldsMatcher {
 public:
  explicit IsOkAndHoldsMatcher(InnerMatcher inner) : inner_(std::move(inner)) {}

  template <typename StatusOrType>
  operator ::testing::Matcher<StatusOrType>() const {  // NOLINT: implicit by design, as gmock's
    using Value = typename std::decay_t<StatusOrType>::value_type;
    return ::testing::Matcher<StatusOrType>(
        new MonoIsOkAndHoldsMatcher<const std::decay_t<StatusOrType>&>(
            ::testing::MatcherCast<const Value&>(inner_)));
  }

 private:
  InnerMatcher inner_;
};

}  // namespace internal

// Matches a Status or StatusOr whose code matches `code` (an absl::StatusCode or a
// Matcher<absl::StatusCode>) and whose message matches `message` (a string matcher such as
// HasSubstr("x"), or a string for equality).
template <typename CodeMatcher, typename MessageMatcher>
internal::StatusIsMatcher StatusIs(CodeMatcher&& code, MessageMatcher&& message) {
  return internal::StatusIsMatcher(internal::StatusIsMatcherCommon(
      ::testing::MatcherCast<absl::StatusCode>(std::forward<CodeMatcher>(code)),
      ::testing::MatcherCast<const std::string&>(std::forward<MessageMatcher>(message))));
}

// Matches a Status or StatusOr whose code matches `code`, whatever its message.
template <typename CodeMatcher>
internal::StatusIsMatcher StatusIs(CodeMatcher&& code) {
  return StatusIs(std::forward<CodeMatcher>(code), ::testing::_);
}

// Matches an OK Status or StatusOr.
inline internal::IsOkMatcher IsOk() { return internal::IsOkMatcher(); }

// Matches an OK StatusOr whose value matches `inner` (a matcher, or a value for equality).
template <typename InnerMatcher>
internal::IsOkAndHoldsMatcher<std::decay_t<InnerMatcher>> IsOkAndHolds(InnerMatcher&& inner) {
  return internal::IsOkAndHoldsMatcher<std::decay_t<InnerMatcher>>(
      std::forward<InnerMatcher>(inner));
}

}  // namespace testing
}  // namespace strata

#define EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::strata::testing::internal::AssertOk, expr)
#define ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::strata::testing::internal::AssertOk, expr)

#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  STRATA_ASSERT_OK_AND_ASSIGN_IMPL_(STRATA_CONCAT_(strata_assert_statusor_, __LINE__), lhs, expr)
// The status is checked under the text of `expr`, not of the temporary that holds it.
#define STRATA_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, expr)                                 \
  auto statusor = (expr);                                                                      \
  GTEST_ASSERT_(::strata::testing::internal::AssertOk(#expr, statusor), GTEST_FATAL_FAILURE_); \
  lhs = std::move(statusor).value()
