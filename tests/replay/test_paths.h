// File: tests/replay/test_paths.h
// Locations of the replayer's fixtures and of the shared traces. Stateless; thread-safe.
#pragma once

#include <cstdlib>
#include <string>

namespace kvgate::replay {

inline std::string SourceDir() {
  const char* dir = std::getenv("KVGATE_SOURCE_DIR");
  return dir ? dir : KVGATE_TEST_SOURCE_DIR;
}

inline std::string Fixture(const std::string& name) {
  return SourceDir() + "/tests/replay/fixtures/" + name;
}

/// The real traces kept in the repository (bench/data/README.md).
inline std::string BenchData(const std::string& name) {
  return SourceDir() + "/bench/data/" + name;
}

inline std::string BinDir() {
  const char* dir = std::getenv("KVGATE_BIN_DIR");
  return dir ? dir : KVGATE_TEST_BIN_DIR;
}

}  // namespace kvgate::replay
