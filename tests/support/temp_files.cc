// File: tests/support/temp_files.cc
#include "tests/support/temp_files.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace kvgate::testing {

std::string MakeTempDir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base != nullptr ? base : "/tmp") + "/" + prefix + "-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) {
    ADD_FAILURE() << "cannot make a temp dir " << templ;
    return "";
  }
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
