#include "transfer/types.h"

#include "common/strings.h"

namespace kvgate::transfer {

std::string_view OpName(TransferOp op) {
  switch (op) {
    case TransferOp::kRead:
      return "READ";
    case TransferOp::kWrite:
      return "WRITE";
  }
  return "?";
}

std::string_view TaskStateName(TaskState state) {
  switch (state) {
    case TaskState::kWaiting:
      return "waiting";
    case TaskState::kPending:
      return "pending";
    case TaskState::kCompleted:
      return "completed";
    case TaskState::kFailed:
      return "failed";
    case TaskState::kTimedOut:
      return "timed_out";
  }
  return "?";
}

std::string MemoryLocation::ToString() const {
  switch (kind) {
    case MemoryKind::kCpu:
      return common::StrCat("cpu:", device);
    case MemoryKind::kCuda:
      return common::StrCat("cuda:", device);
    case MemoryKind::kHip:
      return common::StrCat("hip:", device);
  }
  return "?";
}

absl::StatusOr<MemoryLocation> ParseLocation(std::string_view text) {
  if (text == "*" || text == "cpu") return MemoryLocation{};
  const size_t colon = text.find(':');
  const auto bad = [&] {
    return absl::InvalidArgumentError(common::StrCat(
        "memory location '", text, "' is not one of \"cpu:N\", \"cuda:N\", \"hip:N\""));
  };
  if (colon == std::string_view::npos) return bad();
  const std::string_view kind = text.substr(0, colon);
  uint64_t device = 0;
  if (!common::ParseUint64(text.substr(colon + 1), &device) || device > 1023) return bad();
  MemoryLocation loc;
  loc.device = static_cast<int>(device);
  if (kind == "cpu") {
    loc.kind = MemoryKind::kCpu;
  } else if (kind == "cuda") {
    loc.kind = MemoryKind::kCuda;
  } else if (kind == "hip") {
    loc.kind = MemoryKind::kHip;
  } else {
    return bad();
  }
  return loc;
}

}  // namespace kvgate::transfer
