// File: router/config/secret.h
// A secret named in the configuration by where it lives, not by its value: a file (a mounted
// Kubernetes Secret) or an environment variable. Read at load and at each reload (SIGHUP), so
// a rotated Secret takes effect on the next reload.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvgate::config {

/// The whole of the secret file `path`, refused (the error names `what`, the key) when it
/// cannot be read, is not a regular file, or other users may read or write it: a secret any
/// local account can read is not one (Kubernetes: a Secret volume with defaultMode 0440 and
/// the pod's fsGroup; elsewhere chmod 600 or 640).
absl::StatusOr<std::string> ReadSecretFile(std::string_view path, std::string_view what);

/// The secret in `file`, else in the environment variable `env_var`; "" when both are empty.
/// One line: surrounding whitespace is trimmed (a Secret file's trailing newline); inner
/// whitespace, control characters or an empty value are errors, which name `what` (the key).
absl::StatusOr<std::string> ReadSecret(std::string_view file, std::string_view env_var,
                                       std::string_view what);

}  // namespace kvgate::config
