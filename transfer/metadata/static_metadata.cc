#include "transfer/metadata/static_metadata.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/strings.h"

namespace kvgate::transfer {
namespace {

absl::Status FileError(std::string_view what, const std::string& path) {
  return absl::UnavailableError(
      common::StrCat("static metadata: ", what, " ", path, ": ", std::strerror(errno)));
}

// Holds flock(LOCK_EX) on "<path>.lock" for its lifetime.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0 && flock(fd_, LOCK_EX) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~FileLock() {
    if (fd_ >= 0) close(fd_);  // Releases the lock.
  }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Lines of the file; a missing file is an empty set.
std::vector<std::string> ReadLines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace

absl::Status StaticMetadata::Update(std::string_view name, const SegmentDescriptor* replacement) {
  FileLock lock(path_);
  if (!lock.ok()) return FileError("cannot lock", path_ + ".lock");
  std::string out;
  for (const std::string& line : ReadLines(path_)) {
    auto desc = ParseSegmentJson(line);
    if (desc.ok() && desc->name == name) continue;  // Replaced below (or removed).
    if (!desc.ok()) continue;  // A corrupt line is dropped rather than kept forever.
    out.append(line).push_back('\n');
  }
  if (replacement != nullptr) out.append(SegmentToJson(*replacement)).push_back('\n');
  const std::string tmp = common::StrCat(path_, ".tmp.", getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << out;
    f.flush();
    if (!f) return FileError("cannot write", tmp);
  }
  if (rename(tmp.c_str(), path_.c_str()) != 0) return FileError("cannot rename onto", path_);
  return absl::OkStatus();
}

absl::Status StaticMetadata::Publish(const SegmentDescriptor& desc) {
  return Update(desc.name, &desc);
}

absl::Status StaticMetadata::Remove(std::string_view name) { return Update(name, nullptr); }

absl::StatusOr<SegmentDescriptor> StaticMetadata::Lookup(std::string_view name) {
  // Readers need no lock: the file is only ever replaced whole by rename().
  for (const std::string& line : ReadLines(path_)) {
    auto desc = ParseSegmentJson(line);
    if (desc.ok() && desc->name == name) return desc;
  }
  return absl::NotFoundError(
      common::StrCat("static metadata ", path_, ": no segment named '", name, "'"));
}

}  // namespace kvgate::transfer
