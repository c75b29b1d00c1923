#pragma once
// GoogleTest assertions for absl::Status and absl::StatusOr<T>. On failure
// they print the expression and the status (code and message); like
// ASSERT_TRUE they take more context with <<.
//
//   ASSERT_OK(pool->Close());
//   EXPECT_OK(vol->Write(0, data)) << "block " << b;
//   ASSERT_OK_AND_ASSIGN(auto pool, Pool::Open(media, options));  // the value
//   ASSERT_OK_AND_ASSIGN(pool_, Pool::Open(media, options));      // assigned
//
// ASSERT_OK_AND_ASSIGN declares a hidden StatusOr in the enclosing scope (one
// per line), so it is a statement of its own, not the body of an unbraced if.

#include <gtest/gtest.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ftl::status_asserts_internal {

inline const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

// A predicate-formatter (EXPECT_PRED_FORMAT1) that accepts only a Status or a
// StatusOr: anything else with an ok() does not compile.
template <typename S>
::testing::AssertionResult IsOk(const char* expr, const S& s) {
  const absl::Status& status = StatusOf(s);
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << expr << " is not OK: " << status;
}

}  // namespace ftl::status_asserts_internal

#define EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::ftl::status_asserts_internal::IsOk, expr)
#define ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::ftl::status_asserts_internal::IsOk, expr)

#define FTL_STATUS_CONCAT_(a, b) a##b
#define FTL_STATUS_CONCAT(a, b) FTL_STATUS_CONCAT_(a, b)
#define ASSERT_OK_AND_ASSIGN(lhs, rexpr) \
  FTL_ASSERT_OK_AND_ASSIGN_(FTL_STATUS_CONCAT(ftl_status_or_, __LINE__), lhs, rexpr)
#define FTL_ASSERT_OK_AND_ASSIGN_(statusor, lhs, rexpr)                                           \
  auto statusor = (rexpr);                                                                        \
  ASSERT_PRED_FORMAT1(                                                                            \
      [](const char*, const auto& s) { return ::ftl::status_asserts_internal::IsOk(#rexpr, s); }, \
      statusor);                                                                                  \
  lhs = std::move(statusor).value()
