// The HIP runtime, loaded with dlopen("libamdhip64.so"): compiled as plain C++ against the HIP
// headers (no hipcc), optional at run time. dma-buf export goes through the ROCm runtime's
// hsa_amd_portable_export_dmabuf, looked up at run time because older ROCm (Debian 12 ships
// 5.2) does not have it.
#include "transfer/gpu/gpu_runtime.h"

#if defined(KVGATE_WITH_HIP)
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__
#endif
#include <dlfcn.h>
#include <hip/hip_runtime_api.h>

#include "common/strings.h"
#endif

namespace kvgate::transfer {

#if !defined(KVGATE_WITH_HIP)

absl::StatusOr<GpuRuntimePtr> LoadHipRuntime() {
  return absl::UnimplementedError("no GPU: built without HIP (KVGATE_WITH_HIP=OFF)");
}

#else

namespace {

#define KVGATE_HIP_FN(name) decltype(&::name) name = nullptr

struct HipApi {
  KVGATE_HIP_FN(hipInit);
  KVGATE_HIP_FN(hipGetDeviceCount);
  KVGATE_HIP_FN(hipSetDevice);
  KVGATE_HIP_FN(hipPointerGetAttribute);
  KVGATE_HIP_FN(hipMemGetAddressRange);
  KVGATE_HIP_FN(hipMemcpy);
  hipError_t (*hipHostMalloc)(void**, size_t, unsigned int) = nullptr;  // Overloaded in C++.
  KVGATE_HIP_FN(hipHostFree);
  hipError_t (*hipMalloc)(void**, size_t) = nullptr;  // Overloaded in C++.
  KVGATE_HIP_FN(hipFree);
  KVGATE_HIP_FN(hipGetErrorString);
  // hsa_status_t hsa_amd_portable_export_dmabuf(const void*, size_t, int*, uint64_t*)
  int (*export_dmabuf)(const void*, size_t, int*, uint64_t*) = nullptr;
};

class HipRuntime final : public GpuRuntime {
 public:
  HipRuntime(HipApi api, int count) : api_(api), count_(count) {}

  // transfer::GpuRuntime
  std::string_view Name() const override { return "hip"; }
  MemoryKind kind() const override { return MemoryKind::kHip; }
  int DeviceCount() const override { return count_; }

  absl::Status CheckDeviceRange(const void* addr, uint64_t length, int device) override {
    int ordinal = -1;
    auto* p = const_cast<void*>(addr);
    if (api_.hipPointerGetAttribute(&ordinal, HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) !=
        hipSuccess) {
      return absl::InvalidArgumentError(
          fmt::format("hip:{}: {} is not HIP device memory", device, addr));
    }
    if (ordinal != device) {
      return absl::InvalidArgumentError(
          fmt::format("{} is memory of hip:{}, not hip:{}", addr, ordinal, device));
    }
    hipDeviceptr_t base = nullptr;
    size_t size = 0;
    if (api_.hipMemGetAddressRange(&base, &size, p) != hipSuccess ||
        static_cast<const char*>(addr) + length > static_cast<const char*>(base) + size) {
      return absl::InvalidArgumentError(
          fmt::format("hip:{}: [{}, +{}) runs past its allocation", device, addr, length));
    }
    return absl::OkStatus();
  }

  absl::Status Copy(void* dst, const void* src, uint64_t length) override {
    return Check(api_.hipMemcpy(dst, src, length, hipMemcpyDefault), "hipMemcpy");
  }

  absl::StatusOr<void*> AllocPinned(uint64_t length) override {
    void* p = nullptr;
    if (auto st = Check(api_.hipHostMalloc(&p, length, 0), "hipHostMalloc"); !st.ok()) {
      return absl::ResourceExhaustedError(st.message());
    }
    return p;
  }

  void FreePinned(void* ptr) override { (void)api_.hipHostFree(ptr); }

  absl::StatusOr<void*> AllocDevice(uint64_t length, int device) override {
    void* p = nullptr;
    if (auto st = Check(api_.hipSetDevice(device), "hipSetDevice"); !st.ok()) return st;
    if (auto st = Check(api_.hipMalloc(&p, length), "hipMalloc"); !st.ok()) {
      return absl::ResourceExhaustedError(st.message());
    }
    return p;
  }

  void FreeDevice(void* ptr) override { (void)api_.hipFree(ptr); }

  absl::StatusOr<DmaBufRegion> ExportDmaBuf(const void* addr, uint64_t length) override {
    if (api_.export_dmabuf == nullptr) {
      return absl::UnimplementedError(
          "the ROCm runtime has no hsa_amd_portable_export_dmabuf (ROCm < 5.6?)");
    }
    int fd = -1;
    uint64_t offset = 0;
    if (api_.export_dmabuf(addr, length, &fd, &offset) != 0 || fd < 0) {
      return absl::UnimplementedError(
          fmt::format("hsa_amd_portable_export_dmabuf({}, {}) failed", addr, length));
    }
    return DmaBufRegion{fd, offset};
  }

 private:
  absl::Status Check(hipError_t r, const char* what) const {
    if (r == hipSuccess) return absl::OkStatus();
    return absl::InternalError(common::StrCat(what, ": ", api_.hipGetErrorString(r)));
  }

  const HipApi api_;
  const int count_;
};

template <typename T>
bool Load(void* lib, const char* name, T* out) {
  *out = reinterpret_cast<T>(dlsym(lib, name));
  return *out != nullptr;
}

}  // namespace

absl::StatusOr<GpuRuntimePtr> LoadHipRuntime() {
  void* lib = nullptr;
  for (const char* name : {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
  }
  if (lib == nullptr) return absl::UnavailableError("no GPU: libamdhip64.so (HIP) not found");
  HipApi api;
  const bool ok =
      Load(lib, "hipInit", &api.hipInit) &&
      Load(lib, "hipGetDeviceCount", &api.hipGetDeviceCount) &&
      Load(lib, "hipSetDevice", &api.hipSetDevice) &&
      Load(lib, "hipPointerGetAttribute", &api.hipPointerGetAttribute) &&
      Load(lib, "hipMemGetAddressRange", &api.hipMemGetAddressRange) &&
      Load(lib, "hipMemcpy", &api.hipMemcpy) && Load(lib, "hipHostMalloc", &api.hipHostMalloc) &&
      Load(lib, "hipHostFree", &api.hipHostFree) && Load(lib, "hipMalloc", &api.hipMalloc) &&
      Load(lib, "hipFree", &api.hipFree) && Load(lib, "hipGetErrorString", &api.hipGetErrorString);
  if (!ok) return absl::UnavailableError("no GPU: libamdhip64.so lacks a needed function");
  if (void* hsa = dlopen("libhsa-runtime64.so.1", RTLD_NOW | RTLD_LOCAL); hsa != nullptr) {
    Load(hsa, "hsa_amd_portable_export_dmabuf", &api.export_dmabuf);
  }
  int count = 0;
  if (api.hipInit(0) != hipSuccess || api.hipGetDeviceCount(&count) != hipSuccess || count <= 0) {
    return absl::UnavailableError("no GPU: the HIP runtime reports no device");
  }
  return GpuRuntimePtr(std::make_unique<HipRuntime>(api, count));
}

#endif  // KVGATE_WITH_HIP

}  // namespace kvgate::transfer
