// File: tests/support/test_util.h
// What a test asks of its environment: where the built binaries and the sources are, condition
// polling with a deadline (never a fixed sleep), and memory use. Stateless; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace kvgate::testing {

/// Where the built binaries are (kvgate, kvgate-fake-upstream, ...); $KVGATE_BIN_DIR overrides.
std::string BinDir();

/// The checkout the tests were built from; $KVGATE_SOURCE_DIR overrides.
std::string SourceDir();

/// The path of binary `name` ("kvgate", "kvgate-store"), the first that exists of:
/// $KVGATE_GATEWAY_BIN (for kvgate only), BinDir(), build/debug/bin of the checkout; "" when
/// none does (a test then skips).
std::string TestBinary(const std::string& name);

/// Polls `pred` every millisecond until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& pred,
             std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// Resident set size of process `pid` (VmRSS in /proc/<pid>/status) in bytes; 0 if unknown.
uint64_t ProcessRssBytes(int pid);

/// Bytes this process's allocator hands out right now (live heap). Under ASan/TSan this asks the
/// sanitizer allocator, whose RSS also holds freed blocks in quarantine and so says nothing about
/// what the code keeps; otherwise glibc's mallinfo2.
uint64_t HeapInUseBytes();

/// Whether a sanitizer's allocator runs this process (RSS then includes its quarantine).
bool UnderSanitizerAllocator();

}  // namespace kvgate::testing
