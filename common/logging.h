// File: common/logging.h
// Process-wide logging setup on spdlog. Loggers are thread-safe.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace kvgate::common {

/// Sets the level of the default logger ("trace", "debug", "info", "warn", "error", "off").
/// @return kInvalidArgument naming the level when it is unknown.
absl::Status SetLogLevel(std::string_view level);

/// True when `level` names a spdlog level.
bool IsValidLogLevel(std::string_view level);

/// Configures the default logger: stderr, "[time] [level] message".
void InitLogging();

/// "text" (InitLogging's) or "json": one object a line, {"time","level","logger","msg"}, the
/// message escaped (a multi-line message stays one line). @return kInvalidArgument otherwise.
absl::Status SetLogFormat(std::string_view format);

}  // namespace kvgate::common
