// File: transfer/gpu/gpu_runtime.h
// The seam to a GPU vendor runtime (CUDA driver API, HIP), loaded at run time with dlopen so one
// binary runs on hosts without a GPU. Used for device-memory registration checks, copies to and
// from device memory, pinned host bounce buffers and dma-buf export for GPUDirect RDMA.
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transfer/types.h"

namespace kvgate::transfer {

/// A dma-buf exported for a device range: register with ibv_reg_dmabuf_mr(pd, offset, length,
/// iova = the range's address, fd, access). The owner of this struct closes `fd`.
struct DmaBufRegion {
  int fd = -1;
  uint64_t offset = 0;  // Of the requested address inside the exported range.
};

class GpuRuntime {
 public:
  virtual ~GpuRuntime() = default;

  /// "cuda" or "hip".
  virtual std::string_view Name() const = 0;
  virtual MemoryKind kind() const = 0;
  virtual int DeviceCount() const = 0;

  /// @return OK when all of [addr, addr + length) is memory of `device` (or mapped for it);
  /// kInvalidArgument otherwise, naming the pointer.
  virtual absl::Status CheckDeviceRange(const void* addr, uint64_t length, int device) = 0;
  /// Synchronous copy in any direction (host<->device, device<->device; unified addressing).
  virtual absl::Status Copy(void* dst, const void* src, uint64_t length) = 0;
  /// Page-locked host memory for bounce buffers. @return kResourceExhausted on failure.
  virtual absl::StatusOr<void*> AllocPinned(uint64_t length) = 0;
  virtual void FreePinned(void* ptr) = 0;
  /// Device memory (tests and the bench). @return kResourceExhausted on failure.
  virtual absl::StatusOr<void*> AllocDevice(uint64_t length, int device) = 0;
  virtual void FreeDevice(void* ptr) = 0;
  /// @return kUnimplemented when the runtime or driver cannot export dma-bufs.
  virtual absl::StatusOr<DmaBufRegion> ExportDmaBuf(const void* addr, uint64_t length) = 0;
};

using GpuRuntimePtr = std::unique_ptr<GpuRuntime>;

/// Loads libcuda.so.1 and initialises it. @return kUnimplemented when built without CUDA;
/// kUnavailable starting "no GPU: " when the driver or a device is missing.
absl::StatusOr<GpuRuntimePtr> LoadCudaRuntime();
/// Loads libamdhip64.so. Same codes as LoadCudaRuntime().
absl::StatusOr<GpuRuntimePtr> LoadHipRuntime();

}  // namespace kvgate::transfer
