#include "common/logging.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

#include "common/json_util.h"
#include "common/strings.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace kvgate::common {
namespace {

constexpr char kTextPattern[] = "[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v";

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

// {"time":"2026-12-03T21:00:00.123Z","level":"info","logger":"kvgate","msg":"..."}
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto t = msg.time.time_since_epoch();
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(t);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - secs).count();
    const std::time_t tt = static_cast<std::time_t>(secs.count());
    std::tm utc{};
    gmtime_r(&tt, &utc);
    char stamp[40];
    const size_t n = std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
    std::string line = "{\"time\":\"";
    line.append(stamp, n);
    char frac[8];
    std::snprintf(frac, sizeof(frac), ".%03dZ", static_cast<int>(ms));
    line += frac;
    line += "\",\"level\":\"";
    const auto level = spdlog::level::to_string_view(msg.level);
    line.append(level.data(), level.size());
    line += "\",\"logger\":";
    AppendJsonString(line, std::string_view(msg.logger_name.data(), msg.logger_name.size()));
    line += ",\"msg\":";
    AppendJsonString(line, std::string_view(msg.payload.data(), msg.payload.size()));
    line += "}\n";
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

}  // namespace

absl::Status SetLogFormat(std::string_view format) {
  if (format == "json") {
    spdlog::default_logger()->set_formatter(std::make_unique<JsonFormatter>());
  } else if (format == "text") {
    spdlog::default_logger()->set_pattern(kTextPattern);
  } else {
    return absl::InvalidArgumentError(
        common::StrCat("unknown log format '", format, "' (expected text or json)"));
  }
  return absl::OkStatus();
}

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
  logger->set_pattern(kTextPattern);
  spdlog::set_default_logger(std::move(logger));
  spdlog::flush_on(spdlog::level::warn);
}

}  // namespace kvgate::common
