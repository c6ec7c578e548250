// File: config/secret.h
// A secret named in the configuration by where it lives, not by its value: a file (a mounted
// Kubernetes Secret) or an environment variable. Read at load and at each reload.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvgate::config {

/// The secret in `file`, else in the environment variable `env_var`; "" when both are empty.
/// One line: surrounding whitespace is trimmed (a Secret file's trailing newline); inner
/// whitespace, control characters or an empty value are errors, which name `what` (the key).
absl::StatusOr<std::string> ReadSecret(std::string_view file, std::string_view env_var,
                                       std::string_view what);

}  // namespace kvgate::config
