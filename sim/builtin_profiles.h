// File: sim/builtin_profiles.h
// The YAML of the profiles shipped in sim/profiles/, embedded in the binary at build time
// (sim/CMakeLists.txt generates builtin_profiles.cc from the files), so that `--profile NAME`
// works from any directory. Immutable; thread-safe.
#pragma once

#include <string_view>

#include "absl/types/span.h"

namespace kvgate::sim {

struct BuiltinProfile {
  std::string_view name;  // The file's name without ".yaml".
  std::string_view yaml;  // Its text.
};

/// Every shipped profile, in sim/CMakeLists.txt's order.
absl::Span<const BuiltinProfile> BuiltinProfiles();

}  // namespace kvgate::sim
