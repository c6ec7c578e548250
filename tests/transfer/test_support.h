// File: tests/transfer/test_support.h
// The transfer tests' own fixtures: a second process (this test binary re-run with
// --transfer-peer) that owns a segment and answers line commands on stdin/stdout, a
// deterministic byte pattern, and engine options for tests. Temp dirs, ports and processes come
// from tests/support. Thread-compatible.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/support/loopback.h"
#include "tests/support/temp_files.h"
#include "transfer/gpu/gpu_runtime.h"
#include "transfer/transfer_engine.h"

namespace kvgate::transfer::testing {

/// The byte at `offset` of a buffer filled with FillPattern(seed).
uint8_t PatternByte(uint64_t seed, uint64_t offset);
void FillPattern(uint8_t* p, uint64_t length, uint64_t seed, uint64_t first_offset = 0);
/// Index of the first byte of p[0, length) that differs from the pattern, or -1.
int64_t FindPatternMismatch(const uint8_t* p, uint64_t length, uint64_t seed,
                            uint64_t first_offset = 0);

/// "Device memory" for tests without a GPU: one CUDA device whose ranges all pass, and nothing
/// to allocate or export. A fake overrides Copy() (every access to its memory goes through it)
/// and what else it observes.
class StubGpuRuntime : public GpuRuntime {
 public:
  std::string_view Name() const override { return "fake-cuda"; }
  MemoryKind kind() const override { return MemoryKind::kCuda; }
  int DeviceCount() const override { return 1; }
  absl::Status CheckDeviceRange(const void*, uint64_t, int) override { return absl::OkStatus(); }
  absl::StatusOr<void*> AllocPinned(uint64_t) override { return absl::UnimplementedError("stub"); }
  void FreePinned(void*) override {}
  absl::StatusOr<void*> AllocDevice(uint64_t, int) override {
    return absl::UnimplementedError("stub");
  }
  void FreeDevice(void*) override {}
  absl::StatusOr<DmaBufRegion> ExportDmaBuf(const void*, uint64_t) override {
    return absl::UnimplementedError("stub runtime: no dma-buf");
  }
};

// The transfer tests name these testing::TempDir and testing::FreePort.
using kvgate::testing::FreePort;
using kvgate::testing::TempDir;

/// Options for a peer process.
struct PeerOptions {
  std::string name;
  std::string metadata_uri;
  std::string transports = "shm,tcp";  // Comma-separated.
  uint64_t bytes = 8 << 20;
  uint64_t seed = 1;
  bool managed = true;  // AllocateManagedMemory (shm-shareable) or malloc + RegisterMemory.
};

/// The other process. Its stdout lines are the replies to commands written on its stdin:
///   crc ADDR LEN        -> "crc VALUE" (CRC32C of its own memory)
///   register LEN        -> "buffer ADDR" (another managed buffer, filled with the pattern)
///   unregister ADDR     -> "ok" / "error ..."
///   quit                -> exits 0
/// It is killed (SIGKILL) on destruction if still running.
class PeerProcess {
 public:
  explicit PeerProcess(PeerOptions options);
  ~PeerProcess();
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  /// Waits for the "ready" line. @return false (and the log) if it did not come.
  bool WaitReady(std::chrono::milliseconds timeout = std::chrono::seconds(20));
  uint64_t buffer_addr() const { return addr_; }
  uint64_t buffer_len() const { return len_; }
  const PeerOptions& options() const { return options_; }

  /// Sends a command and returns the reply line.
  absl::StatusOr<std::string> Command(const std::string& line,
                                      std::chrono::milliseconds timeout = std::chrono::seconds(10));
  absl::StatusOr<uint32_t> Crc(uint64_t addr, uint64_t len);
  void Signal(int sig);
  /// SIGSTOP, then waits until the kernel reports the process stopped (signals are delivered
  /// asynchronously: without this it may still answer a request or two).
  bool Stop();
  /// Waits for exit; the exit code, or 128 + signal.
  int Wait();
  pid_t pid() const { return pid_; }

 private:
  absl::StatusOr<std::string> ReadLine(std::chrono::milliseconds timeout);

  PeerOptions options_;
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  std::string pending_;  // Read but not yet returned.
  uint64_t addr_ = 0;
  uint64_t len_ = 0;
};

/// The peer's main(), run when the binary is started with --transfer-peer.
int RunPeer(int argc, char** argv);

/// Options for an in-test engine: no GPU runtimes, tcp on loopback, short default time-out.
TransferEngineOptions TestEngineOptions(const std::string& name, const std::string& metadata_uri,
                                        std::vector<std::string> transports);

}  // namespace kvgate::transfer::testing
