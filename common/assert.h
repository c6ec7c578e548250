// File: common/assert.h
// The crash policy (after Envoy's):
//  - KVGATE_ASSERT: debug-only invariant.
//  - KVGATE_RELEASE_ASSERT: unrecoverable failure, fatal in every build.
//  - KVGATE_BUG: should not happen; logs and counts in release, aborts in debug.
// Never assert on input from the network or from workers.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>

namespace kvgate::common {

/// Number of KVGATE_BUG hits since start; exported as kvgate_bug_total.
std::atomic<uint64_t>& BugCounter();
[[noreturn]] void AssertFail(const char* expr, const char* file, int line, const char* msg);
void ReportBug(const char* expr, const char* file, int line, const char* msg);

}  // namespace kvgate::common

#define KVGATE_RELEASE_ASSERT(cond, msg)                                       \
  do {                                                                         \
    if (!(cond)) ::kvgate::common::AssertFail(#cond, __FILE__, __LINE__, msg); \
  } while (false)

#ifdef NDEBUG
#define KVGATE_ASSERT(cond, msg) \
  do {                           \
  } while (false && (cond))
#else
#define KVGATE_ASSERT(cond, msg) KVGATE_RELEASE_ASSERT(cond, msg)
#endif

#define KVGATE_BUG(cond, msg)                                                 \
  do {                                                                        \
    if (!(cond)) ::kvgate::common::ReportBug(#cond, __FILE__, __LINE__, msg); \
  } while (false)
