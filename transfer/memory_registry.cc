#include "transfer/memory_registry.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/mutex.h"
#include "common/strings.h"

namespace kvgate::transfer {
namespace {

std::string Range(uint64_t addr, uint64_t length) {
  return fmt::format("[{:#x}, {:#x})", addr, addr + length);
}

}  // namespace

LocalBuffer::~LocalBuffer() {
  if (memfd >= 0) {
    munmap(reinterpret_cast<void*>(addr), length);
    close(memfd);
  }
}

absl::Status MemoryRegistry::CheckFreeLocked(uint64_t addr, uint64_t length) const {
  auto it = buffers_.upper_bound(addr);
  if (it != buffers_.end() && it->second->addr < addr + length) {
    return absl::InvalidArgumentError(common::StrCat("memory ", Range(addr, length),
                                                     " overlaps registered buffer ",
                                                     Range(it->second->addr, it->second->length)));
  }
  if (it != buffers_.begin()) {
    --it;
    if (it->second->addr + it->second->length > addr) {
      return absl::InvalidArgumentError(
          common::StrCat("memory ", Range(addr, length), " overlaps registered buffer ",
                         Range(it->second->addr, it->second->length)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LocalBufferPtr> MemoryRegistry::Add(void* addr, uint64_t length,
                                                   MemoryLocation location) {
  const auto a = reinterpret_cast<uint64_t>(addr);
  if (addr == nullptr || length == 0 || a + length < a) {
    return absl::InvalidArgumentError(common::StrCat("cannot register ", Range(a, length),
                                                     ": null address, zero length or wrap-around"));
  }
  auto buf = std::make_shared<LocalBuffer>();
  buf->addr = a;
  buf->length = length;
  buf->location = location;
  common::WriterMutexLock lock(&mu_);
  if (auto st = CheckFreeLocked(a, length); !st.ok()) return st;
  buf->id = next_id_++;
  buffers_.emplace(a, buf);
  return LocalBufferPtr(std::move(buf));
}

absl::StatusOr<LocalBufferPtr> MemoryRegistry::AddManaged(uint64_t length) {
  if (length == 0) return absl::InvalidArgumentError("cannot allocate a managed buffer of 0 bytes");
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t rounded = (length + page - 1) / page * page;
  const int fd = memfd_create("kvgate-transfer", MFD_CLOEXEC);
  if (fd < 0) {
    return absl::ResourceExhaustedError(
        common::StrCat("memfd_create for ", length, " bytes: ", std::strerror(errno)));
  }
  if (ftruncate(fd, static_cast<off_t>(rounded)) != 0) {
    const int err = errno;
    close(fd);
    return absl::ResourceExhaustedError(
        common::StrCat("ftruncate memfd to ", rounded, " bytes: ", std::strerror(err)));
  }
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    close(fd);
    return absl::ResourceExhaustedError(
        common::StrCat("mmap of a ", rounded, "-byte memfd: ", std::strerror(err)));
  }
  auto buf = std::make_shared<LocalBuffer>();
  buf->addr = reinterpret_cast<uint64_t>(p);
  buf->length = rounded;
  buf->memfd = fd;  // From here the buffer owns the mapping.
  common::WriterMutexLock lock(&mu_);
  // A fresh mapping cannot overlap caller memory that is still mapped; a caller that registered
  // memory and then unmapped it without unregistering would collide here.
  if (auto st = CheckFreeLocked(buf->addr, rounded); !st.ok()) return st;
  buf->id = next_id_++;
  buffers_.emplace(buf->addr, buf);
  return LocalBufferPtr(std::move(buf));
}

absl::StatusOr<LocalBufferPtr> MemoryRegistry::Remove(const void* addr) {
  common::WriterMutexLock lock(&mu_);
  auto it = buffers_.find(reinterpret_cast<uint64_t>(addr));
  if (it == buffers_.end()) {
    return absl::NotFoundError(
        fmt::format("no registered buffer starts at {}", static_cast<const void*>(addr)));
  }
  LocalBufferPtr buf = std::move(it->second);
  buffers_.erase(it);
  return buf;
}

LocalBufferPtr MemoryRegistry::Find(uint64_t addr, uint64_t length) const {
  common::ReaderMutexLock lock(&mu_);
  auto it = buffers_.upper_bound(addr);
  if (it == buffers_.begin()) return nullptr;
  --it;
  return it->second->Contains(addr, length) ? it->second : nullptr;
}

std::vector<LocalBufferPtr> MemoryRegistry::List() const {
  common::ReaderMutexLock lock(&mu_);
  std::vector<LocalBufferPtr> out;
  out.reserve(buffers_.size());
  for (const auto& [addr, buf] : buffers_) out.push_back(buf);
  return out;
}

}  // namespace kvgate::transfer
