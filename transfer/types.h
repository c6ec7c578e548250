// File: transfer/types.h
// Vocabulary of the transfer engine (Mooncake Transfer Engine's shape): segment and batch ids,
// READ/WRITE requests, task states and memory locations. Value types; thread-compatible.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvgate::transfer {

/// A remote (or this engine's own) segment opened with TransferEngine::OpenSegment().
enum class SegmentId : uint64_t {};
/// A group of requests allocated with TransferEngine::AllocateBatch().
enum class BatchId : uint64_t {};

using Clock = std::chrono::steady_clock;

/// READ copies remote -> local; WRITE copies local -> remote (Mooncake's opcodes).
enum class TransferOp : uint8_t { kRead = 1, kWrite = 2 };
std::string_view OpName(TransferOp op);

/// A data node's signed permission for one range (transfer/capability.h), carried with a request
/// to its owner unread. Fixed size, so requests stay cheap to copy.
inline constexpr size_t kCapabilityBytes = 48;
struct RangeCapability {
  bool present = false;
  std::array<uint8_t, kCapabilityBytes> record{};
  friend bool operator==(const RangeCapability&, const RangeCapability&) = default;
};

/// One one-sided transfer. `local` must lie in memory this engine registered; the remote range
/// [remote_offset, remote_offset + length) must lie in one buffer the segment's owner registered.
/// `remote_offset` is the owner's virtual address, as published in its segment descriptor
/// (Mooncake's `target_offset` for RAM segments).
struct TransferRequest {
  TransferOp op = TransferOp::kRead;
  void* local = nullptr;
  SegmentId segment{};
  uint64_t remote_offset = 0;
  uint64_t length = 0;
  /// Sent with the request where the transport supports it (tcp); an owner that requires
  /// capabilities refuses requests without a valid one (kPermissionDenied).
  RangeCapability capability{};
};

/// kWaiting: reserved, not yet handed to a transport; kPending: in flight. The other three are
/// terminal: once a task reaches one, no transport touches its memory again.
enum class TaskState : uint8_t { kWaiting, kPending, kCompleted, kFailed, kTimedOut };
std::string_view TaskStateName(TaskState state);
inline bool IsTerminal(TaskState s) {
  return s == TaskState::kCompleted || s == TaskState::kFailed || s == TaskState::kTimedOut;
}

struct TaskStatus {
  TaskState state = TaskState::kWaiting;
  uint64_t bytes_done = 0;     // Lower bound while pending; the length once completed.
  absl::Status error;          // Why, for kFailed and kTimedOut.
  std::string_view transport;  // The transport that carried it ("" before submission).
};

struct BatchStatus {
  /// kCompleted when every task completed; kFailed / kTimedOut when every task is terminal and
  /// at least one failed (failure wins over time-out); kPending otherwise (kWaiting if empty).
  TaskState state = TaskState::kWaiting;
  uint64_t bytes_done = 0;
  uint32_t tasks = 0;
  uint32_t completed = 0;
  uint32_t failed = 0;
  uint32_t timed_out = 0;
  absl::Status first_error;
  bool finished() const { return completed + failed + timed_out == tasks; }
};

enum class MemoryKind : uint8_t { kCpu, kCuda, kHip };

/// Where a buffer lives: "cpu:0", "cuda:N", "hip:N".
struct MemoryLocation {
  MemoryKind kind = MemoryKind::kCpu;
  int device = 0;

  bool is_device() const { return kind != MemoryKind::kCpu; }
  std::string ToString() const;
  friend bool operator==(const MemoryLocation&, const MemoryLocation&) = default;
};

/// Parses "cpu", "cpu:N", "*" (= cpu:0, Mooncake's wildcard), "cuda:N", "hip:N".
/// @return kInvalidArgument naming the text otherwise.
absl::StatusOr<MemoryLocation> ParseLocation(std::string_view text);

}  // namespace kvgate::transfer
