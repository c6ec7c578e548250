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

/// shared/data next to the project root (may be absent).
inline std::string SharedData(const std::string& name) {
  return SourceDir() + "/../shared/data/" + name;
}

inline std::string BinDir() {
  const char* dir = std::getenv("KVGATE_BIN_DIR");
  return dir ? dir : KVGATE_TEST_BIN_DIR;
}

}  // namespace kvgate::replay
