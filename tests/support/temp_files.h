// File: tests/support/temp_files.h
// Temp directories and files for tests, under $TMPDIR (else /tmp). TempDir removes its tree on
// destruction; every other directory made here (WriteTempFile's, MakeTempDir's) stays while the
// test process runs and is removed when it exits with every test passed: a failed run keeps
// them for its post-mortem, as does KVGATE_KEEP_TEMP=1.
// Thread-compatible.
#pragma once

#include <string>

namespace kvgate::testing {

/// Makes a fresh directory "<$TMPDIR or /tmp>/<prefix>-XXXXXX"; "" (and the test fails) if it
/// cannot.
std::string MakeTempDir(const std::string& prefix = "kvgate-test");

/// A fresh directory, removed with its contents on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "kvgate-test") : path_(MakeTempDir(prefix)) {}
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  /// Writes `content` to file `name` in the directory; returns its path.
  std::string Write(const std::string& name, const std::string& content) const;

 private:
  std::string path_;
};

/// Writes `content` to a new file in a fresh temp dir; returns its path.
std::string WriteTempFile(const std::string& name, const std::string& content);

/// WriteTempFile, readable by its owner only, as kvgate wants a secret file
/// (router/config/secret.h).
std::string WriteSecretFile(const std::string& name, const std::string& content);

}  // namespace kvgate::testing
