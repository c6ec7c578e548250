// File: common/status_macros.h
// Propagation macros for absl::Status / absl::StatusOr (Debian's abseil 20220623 has no
// ABSL_RETURN_IF_ERROR).
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KVGATE_STATUS_CONCAT_INNER(a, b) a##b
#define KVGATE_STATUS_CONCAT(a, b) KVGATE_STATUS_CONCAT_INNER(a, b)

/// Returns from the current function if `expr` (an absl::Status) is not OK.
#define KVGATE_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    const ::absl::Status kvgate_status_ = (expr);    \
    if (!kvgate_status_.ok()) return kvgate_status_; \
  } while (false)

#define KVGATE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(*tmp)

/// `KVGATE_ASSIGN_OR_RETURN(auto x, MakeX());` assigns the value or returns the error.
#define KVGATE_ASSIGN_OR_RETURN(lhs, expr) \
  KVGATE_ASSIGN_OR_RETURN_IMPL(KVGATE_STATUS_CONCAT(kvgate_statusor_, __LINE__), lhs, expr)
