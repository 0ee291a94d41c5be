// Early-return helpers for absl::Status / absl::StatusOr. Abseil 20220623 has
// no public RETURN_IF_ERROR, so pipeplan defines its own once, here.
#ifndef PIPEPLAN_COMMON_STATUS_MACROS_H_
#define PIPEPLAN_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PIPEPLAN_RETURN_IF_ERROR(expr)                   \
  do {                                                   \
    ::absl::Status pipeplan_status_ = (expr);            \
    if (!pipeplan_status_.ok()) return pipeplan_status_; \
  } while (0)

#define PIPEPLAN_CONCAT_INNER_(a, b) a##b
#define PIPEPLAN_CONCAT_(a, b) PIPEPLAN_CONCAT_INNER_(a, b)

// PIPEPLAN_ASSIGN_OR_RETURN(auto x, MakeX()); returns the error status if any.
#define PIPEPLAN_ASSIGN_OR_RETURN(lhs, expr) \
  PIPEPLAN_ASSIGN_OR_RETURN_IMPL_(PIPEPLAN_CONCAT_(pipeplan_statusor_, __LINE__), lhs, expr)

#define PIPEPLAN_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                    \
  if (!statusor.ok()) return std::move(statusor).status();   \
  lhs = std::move(statusor).value()

#endif  // PIPEPLAN_COMMON_STATUS_MACROS_H_
