#include "common/logging.h"

#include <string>

#include "common/strings.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace kvgate::common {
namespace {

bool ParseLevel(std::string_view name, spdlog::level::level_enum* out) {
  static constexpr std::pair<std::string_view, spdlog::level::level_enum> kLevels[] = {
      {"trace", spdlog::level::trace},       {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},         {"warn", spdlog::level::warn},
      {"warning", spdlog::level::warn},      {"error", spdlog::level::err},
      {"critical", spdlog::level::critical}, {"off", spdlog::level::off}};
  for (const auto& [n, l] : kLevels) {
    if (n == name) {
      *out = l;
      return true;
    }
  }
  return false;
}

}  // namespace

bool IsValidLogLevel(std::string_view level) {
  spdlog::level::level_enum l;
  return ParseLevel(level, &l);
}

absl::Status SetLogLevel(std::string_view level) {
  spdlog::level::level_enum l;
  if (!ParseLevel(level, &l)) {
    return absl::InvalidArgumentError(common::StrCat(
        "unknown log level '", level, "' (expected trace, debug, info, warn, error or off)"));
  }
  spdlog::set_level(l);
  return absl::OkStatus();
}

void InitLogging() {
  auto logger = spdlog::stderr_color_mt("kvgate");
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_default_logger(std::move(logger));
  spdlog::flush_on(spdlog::level::warn);
}

}  // namespace kvgate::common
