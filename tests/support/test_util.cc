// File: tests/support/test_util.cc
#include "tests/support/test_util.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// Declared here: Debian's gcc ships the sanitizer runtimes without their interface headers.
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#define KVGATE_SANITIZER_ALLOCATOR 1
#endif

namespace kvgate::testing {

std::string BinDir() {
  const char* dir = std::getenv("KVGATE_BIN_DIR");
  return dir != nullptr ? dir : KVGATE_TEST_BIN_DIR;
}

std::string SourceDir() {
  const char* dir = std::getenv("KVGATE_SOURCE_DIR");
  return dir != nullptr ? dir : KVGATE_TEST_SOURCE_DIR;
}

std::string TestBinary(const std::string& name) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("KVGATE_GATEWAY_BIN"); env != nullptr && name == "kvgate") {
    candidates.push_back(env);
  }
  candidates.push_back(BinDir() + "/" + name);
  candidates.push_back(SourceDir() + "/build/debug/bin/" + name);
  for (const auto& c : candidates) {
    if (::access(c.c_str(), X_OK) == 0) return c;
  }
  return "";
}

bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

uint64_t ProcessRssBytes(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // kB
  }
  return 0;
}

uint64_t HeapInUseBytes() {
#ifdef KVGATE_SANITIZER_ALLOCATOR
  return __sanitizer_get_current_allocated_bytes();
#else
  const struct mallinfo2 mi = ::mallinfo2();
  return mi.uordblks + mi.hblkhd;
#endif
}

bool UnderSanitizerAllocator() {
#ifdef KVGATE_SANITIZER_ALLOCATOR
  return true;
#else
  return false;
#endif
}

}  // namespace kvgate::testing
