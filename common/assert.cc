#include "common/assert.h"

#include "spdlog/spdlog.h"

namespace kvgate::common {

std::atomic<uint64_t>& BugCounter() {
  static std::atomic<uint64_t> counter{0};
  return counter;
}

void AssertFail(const char* expr, const char* file, int line, const char* msg) {
  spdlog::critical("assertion failed: {} at {}:{}: {}", expr, file, line, msg);
  spdlog::default_logger()->flush();
  std::abort();
}

void ReportBug(const char* expr, const char* file, int line, const char* msg) {
  BugCounter().fetch_add(1, std::memory_order_relaxed);
  spdlog::error("bug: {} at {}:{}: {}", expr, file, line, msg);
#ifndef NDEBUG
  spdlog::default_logger()->flush();
  std::abort();
#endif
}

}  // namespace kvgate::common
