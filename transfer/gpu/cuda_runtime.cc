// The CUDA driver API, loaded with dlopen("libcuda.so.1"): the headers give the types, the
// driver is optional at run time, and no nvcc-compiled code is needed.
#include "transfer/gpu/gpu_runtime.h"

#if defined(KVGATE_WITH_CUDA)
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <vector>

#include "common/strings.h"
#endif

namespace kvgate::transfer {

#if !defined(KVGATE_WITH_CUDA)

absl::StatusOr<GpuRuntimePtr> LoadCudaRuntime() {
  return absl::UnimplementedError("no GPU: built without CUDA (KVGATE_WITH_CUDA=OFF)");
}

#else

namespace {

// cuda.h maps versioned entry points with macros (cuMemAllocHost -> cuMemAllocHost_v2); the
// stringified macro gives the symbol to look up.
#define KVGATE_CU_STR2(x) #x
#define KVGATE_CU_STR(x) KVGATE_CU_STR2(x)
#define KVGATE_CU_FN(name) decltype(&::name) name = nullptr

struct CudaApi {
  KVGATE_CU_FN(cuInit);
  KVGATE_CU_FN(cuDeviceGetCount);
  KVGATE_CU_FN(cuDeviceGet);
  KVGATE_CU_FN(cuDeviceGetAttribute);
  KVGATE_CU_FN(cuDevicePrimaryCtxRetain);
  KVGATE_CU_FN(cuCtxSetCurrent);
  KVGATE_CU_FN(cuPointerGetAttribute);
  KVGATE_CU_FN(cuMemGetAddressRange);
  KVGATE_CU_FN(cuMemcpy);
  KVGATE_CU_FN(cuMemAllocHost);
  KVGATE_CU_FN(cuMemAlloc);
  KVGATE_CU_FN(cuMemFree);
  KVGATE_CU_FN(cuMemFreeHost);
  KVGATE_CU_FN(cuGetErrorString);
  KVGATE_CU_FN(cuMemGetHandleForAddressRange);  // CUDA >= 11.7 drivers; may stay null.
};

#define KVGATE_CU_LOAD(api, lib, name, required)                                          \
  do {                                                                                    \
    (api).name = reinterpret_cast<decltype((api).name)>(dlsym(lib, KVGATE_CU_STR(name))); \
    if ((required) && (api).name == nullptr) {                                            \
      return absl::UnavailableError("no GPU: libcuda.so.1 lacks " KVGATE_CU_STR(name));   \
    }                                                                                     \
  } while (false)

class CudaRuntime final : public GpuRuntime {
 public:
  CudaRuntime(void* lib, CudaApi api, std::vector<CUcontext> contexts)
      : lib_(lib), api_(api), contexts_(std::move(contexts)) {}
  ~CudaRuntime() override {
    // The primary contexts stay retained and the library loaded until exit: other users of the
    // driver in this process share them.
    (void)lib_;
  }

  // transfer::GpuRuntime
  std::string_view Name() const override { return "cuda"; }
  MemoryKind kind() const override { return MemoryKind::kCuda; }
  int DeviceCount() const override { return static_cast<int>(contexts_.size()); }

  absl::Status CheckDeviceRange(const void* addr, uint64_t length, int device) override {
    if (auto st = Bind(device); !st.ok()) return st;
    const auto p = reinterpret_cast<CUdeviceptr>(addr);
    unsigned int type = 0;
    int ordinal = -1;
    if (api_.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS ||
        type != CU_MEMORYTYPE_DEVICE ||
        api_.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) !=
            CUDA_SUCCESS) {
      return absl::InvalidArgumentError(
          fmt::format("cuda:{}: {} is not CUDA device memory", device, addr));
    }
    if (ordinal != device) {
      return absl::InvalidArgumentError(
          fmt::format("{} is memory of cuda:{}, not cuda:{}", addr, ordinal, device));
    }
    CUdeviceptr base = 0;
    size_t size = 0;
    if (api_.cuMemGetAddressRange(&base, &size, p) != CUDA_SUCCESS || p + length > base + size) {
      return absl::InvalidArgumentError(
          fmt::format("cuda:{}: [{}, +{}) runs past its allocation", device, addr, length));
    }
    return absl::OkStatus();
  }

  absl::Status Copy(void* dst, const void* src, uint64_t length) override {
    if (auto st = Bind(0); !st.ok()) return st;
    return Check(api_.cuMemcpy(reinterpret_cast<CUdeviceptr>(dst),
                               reinterpret_cast<CUdeviceptr>(src), length),
                 "cuMemcpy");
  }

  absl::StatusOr<void*> AllocPinned(uint64_t length) override {
    if (auto st = Bind(0); !st.ok()) return st;
    void* p = nullptr;
    if (auto st = Check(api_.cuMemAllocHost(&p, length), "cuMemAllocHost"); !st.ok()) {
      return absl::ResourceExhaustedError(st.message());
    }
    return p;
  }

  void FreePinned(void* ptr) override {
    if (Bind(0).ok()) api_.cuMemFreeHost(ptr);
  }

  absl::StatusOr<void*> AllocDevice(uint64_t length, int device) override {
    if (auto st = Bind(device); !st.ok()) return st;
    CUdeviceptr p = 0;
    if (auto st = Check(api_.cuMemAlloc(&p, length), "cuMemAlloc"); !st.ok()) {
      return absl::ResourceExhaustedError(st.message());
    }
    return reinterpret_cast<void*>(p);
  }

  void FreeDevice(void* ptr) override {
    if (Bind(0).ok()) api_.cuMemFree(reinterpret_cast<CUdeviceptr>(ptr));
  }

  absl::StatusOr<DmaBufRegion> ExportDmaBuf(const void* addr, uint64_t length) override {
    if (api_.cuMemGetHandleForAddressRange == nullptr) {
      return absl::UnimplementedError("the CUDA driver has no cuMemGetHandleForAddressRange");
    }
    if (auto st = Bind(0); !st.ok()) return st;
    // Export the whole allocation (page-aligned, as the driver requires) and point into it.
    CUdeviceptr base = 0;
    size_t size = 0;
    const auto p = reinterpret_cast<CUdeviceptr>(addr);
    if (auto st = Check(api_.cuMemGetAddressRange(&base, &size, p), "cuMemGetAddressRange");
        !st.ok()) {
      return st;
    }
    const auto page = static_cast<CUdeviceptr>(sysconf(_SC_PAGESIZE));
    const CUdeviceptr start = base / page * page;
    const size_t span = (base + size - start + page - 1) / page * page;
    int fd = -1;
    if (auto st = Check(api_.cuMemGetHandleForAddressRange(&fd, start, span,
                                                           CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0),
                        "cuMemGetHandleForAddressRange");
        !st.ok()) {
      return absl::UnimplementedError(st.message());
    }
    (void)length;
    return DmaBufRegion{fd, p - start};
  }

 private:
  absl::Status Check(CUresult r, const char* what) const {
    if (r == CUDA_SUCCESS) return absl::OkStatus();
    const char* msg = nullptr;
    api_.cuGetErrorString(r, &msg);
    return absl::InternalError(
        common::StrCat(what, ": ", msg != nullptr ? msg : "error ", static_cast<int>(r)));
  }
  // The driver API needs a current context on the calling thread.
  absl::Status Bind(int device) {
    if (device < 0 || device >= DeviceCount()) {
      return absl::InvalidArgumentError(common::StrCat("no device cuda:", device));
    }
    return Check(api_.cuCtxSetCurrent(contexts_[device]), "cuCtxSetCurrent");
  }

  void* lib_;
  const CudaApi api_;
  const std::vector<CUcontext> contexts_;
};

}  // namespace

absl::StatusOr<GpuRuntimePtr> LoadCudaRuntime() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return absl::UnavailableError("no GPU: libcuda.so.1 (the driver) not found");
  CudaApi api;
  KVGATE_CU_LOAD(api, lib, cuInit, true);
  KVGATE_CU_LOAD(api, lib, cuDeviceGetCount, true);
  KVGATE_CU_LOAD(api, lib, cuDeviceGet, true);
  KVGATE_CU_LOAD(api, lib, cuDeviceGetAttribute, true);
  KVGATE_CU_LOAD(api, lib, cuDevicePrimaryCtxRetain, true);
  KVGATE_CU_LOAD(api, lib, cuCtxSetCurrent, true);
  KVGATE_CU_LOAD(api, lib, cuPointerGetAttribute, true);
  KVGATE_CU_LOAD(api, lib, cuMemGetAddressRange, true);
  KVGATE_CU_LOAD(api, lib, cuMemcpy, true);
  KVGATE_CU_LOAD(api, lib, cuMemAllocHost, true);
  KVGATE_CU_LOAD(api, lib, cuMemAlloc, true);
  KVGATE_CU_LOAD(api, lib, cuMemFree, true);
  KVGATE_CU_LOAD(api, lib, cuMemFreeHost, true);
  KVGATE_CU_LOAD(api, lib, cuGetErrorString, true);
  KVGATE_CU_LOAD(api, lib, cuMemGetHandleForAddressRange, false);
  if (CUresult r = api.cuInit(0); r != CUDA_SUCCESS) {
    const char* msg = nullptr;
    api.cuGetErrorString(r, &msg);
    return absl::UnavailableError(common::StrCat("no GPU: cuInit: ", msg ? msg : "failed"));
  }
  int count = 0;
  if (api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count <= 0) {
    return absl::UnavailableError("no GPU: the CUDA driver reports no device");
  }
  std::vector<CUcontext> contexts;
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    if (api.cuDeviceGet(&dev, i) != CUDA_SUCCESS ||
        api.cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS) {
      return absl::UnavailableError(common::StrCat("no GPU: cannot open cuda:", i));
    }
    contexts.push_back(ctx);
  }
  return GpuRuntimePtr(std::make_unique<CudaRuntime>(lib, api, std::move(contexts)));
}

#endif  // KVGATE_WITH_CUDA

}  // namespace kvgate::transfer
