// File: tests/support/temp_files.cc
#include "tests/support/temp_files.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <vector>

#include "gtest/gtest.h"

namespace kvgate::testing {
namespace {

// Every directory this test process made. They stay while it runs (a child's log, a config the
// gateway rereads) and are removed when it exits with every test passed, so that runs do not
// fill /tmp (thousands of directories a `make test`); a failed run keeps them for its
// post-mortem, and so does KVGATE_KEEP_TEMP=1. Only the process that made them removes them (a
// forked child that exits must not).
class MadeDirs {
 public:
  void Add(std::string dir) {
    std::lock_guard<std::mutex> lock(mu_);
    dirs_.push_back(std::move(dir));
  }
  // Runs at static destruction, before gtest's UnitTest (constructed earlier, by main).
  ~MadeDirs() {
    if (::getpid() != owner_ || std::getenv("KVGATE_KEEP_TEMP") != nullptr) return;
    if (::testing::UnitTest::GetInstance()->Failed()) return;
    std::error_code ignored;
    for (const std::string& dir : dirs_) std::filesystem::remove_all(dir, ignored);
  }

 private:
  const pid_t owner_ = ::getpid();
  std::mutex mu_;
  std::vector<std::string> dirs_;
};

MadeDirs& Made() {
  static MadeDirs made;
  return made;
}

}  // namespace

std::string MakeTempDir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base != nullptr ? base : "/tmp") + "/" + prefix + "-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) {
    ADD_FAILURE() << "cannot make a temp dir " << templ;
    return "";
  }
  Made().Add(templ);
  return templ;
}

TempDir::~TempDir() {
  std::error_code ignored;
  if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
}

std::string TempDir::Write(const std::string& name, const std::string& content) const {
  const std::string path = path_ + "/" + name;
  std::ofstream(path, std::ios::trunc) << content;
  return path;
}

std::string WriteTempFile(const std::string& name, const std::string& content) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/" + name;
  std::ofstream(path) << content;
  return path;
}

std::string WriteSecretFile(const std::string& name, const std::string& content) {
  const std::string path = WriteTempFile(name, content);
  ::chmod(path.c_str(), 0600);
  return path;
}

}  // namespace kvgate::testing
