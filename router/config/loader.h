// File: router/config/loader.h
// YAML -> Config with validation. Every error names the key and its line ("workers[1].url (line
// 12): ..."); unknown keys are errors, so that typos never silently fall back to defaults.
// Stateless; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "config/config.h"

namespace kvgate::config {

/// Parses and validates YAML text. `source` names it in messages (usually the file path).
/// @return kInvalidArgument with every problem found, one per line.
absl::StatusOr<Config> LoadConfigFromString(std::string_view yaml, std::string_view source);

/// Reads and parses a file. @return kNotFound when it cannot be read.
absl::StatusOr<Config> LoadConfigFromFile(const std::string& path);

/// Checks cross-field rules (duplicates, policy names, thresholds, the prefix index's holder
/// limit) of an assembled Config, for configs built from the command line too.
absl::Status ValidateConfig(const Config& config);

}  // namespace kvgate::config
