// File: tests/replay/test_paths.h
// Locations of the replayer's fixtures and of the shared traces (under SourceDir(),
// tests/support). Stateless; thread-safe.
#pragma once

#include <string>

#include "tests/support/test_util.h"

namespace kvgate::replay {

// The replay tests name these BinDir() and SourceDir().
using kvgate::testing::BinDir;
using kvgate::testing::SourceDir;

inline std::string Fixture(const std::string& name) {
  return SourceDir() + "/tests/replay/fixtures/" + name;
}

/// The real traces kept in the repository (bench/data/README.md).
inline std::string BenchData(const std::string& name) {
  return SourceDir() + "/bench/data/" + name;
}

}  // namespace kvgate::replay
