// File: tests/integration/test_util.h
// Helpers shared by the integration tests: condition polling with a deadline (never a fixed
// sleep), a port nothing listens on, and temp files.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>

namespace kvgate::testing {

/// Polls `pred` every millisecond until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& pred,
             std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// A loopback port that was free a moment ago and has no listener (a "dead worker").
uint16_t UnusedPort();

/// Resident set size of process `pid` (VmRSS in /proc/<pid>/status) in bytes; 0 if unknown.
uint64_t ProcessRssBytes(int pid);

/// Bytes this process's allocator hands out right now (live heap). Under ASan/TSan this asks the
/// sanitizer allocator, whose RSS also holds freed blocks in quarantine and so says nothing about
/// what the code keeps; otherwise glibc's mallinfo2.
uint64_t HeapInUseBytes();

/// Whether a sanitizer's allocator runs this process (RSS then includes its quarantine).
bool UnderSanitizerAllocator();

#ifdef KVGATE_TEST_BIN_DIR
/// Where the built binaries are (kvgate, kvgate-fake-upstream); KVGATE_BIN_DIR overrides.
inline std::string BinDir() {
  const char* dir = std::getenv("KVGATE_BIN_DIR");
  return dir ? dir : KVGATE_TEST_BIN_DIR;
}
#endif

/// Writes `content` to a new file in a fresh temp dir; returns its path.
std::string WriteTempFile(const std::string& name, const std::string& content);

/// WriteTempFile, readable by its owner only, as kvgate wants a secret file
/// (router/config/secret.h).
std::string WriteSecretFile(const std::string& name, const std::string& content);

}  // namespace kvgate::testing
