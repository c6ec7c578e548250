#include "router/runtime/access_log.h"

#include <chrono>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/json_util.h"
#include "common/mutex.h"
#include "common/strings.h"
#include "spdlog/sinks/basic_file_sink.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {

AccessLog::AccessLog() = default;
AccessLog::~AccessLog() = default;

absl::Status AccessLog::Open(const std::string& path) {
  try {
    std::shared_ptr<spdlog::logger> logger;
    if (path == "-") {
      logger = std::make_shared<spdlog::logger>("access",
                                                std::make_shared<spdlog::sinks::stdout_sink_mt>());
    } else {
      logger = std::make_shared<spdlog::logger>(
          "access", std::make_shared<spdlog::sinks::basic_file_sink_mt>(path));
    }
    logger->set_pattern("%v");
    logger->set_level(spdlog::level::info);
    logger->flush_on(spdlog::level::info);
    common::MutexLock lock(&mu_);
    logger_ = std::move(logger);
    path_ = path;
    enabled_ = true;
  } catch (const spdlog::spdlog_ex& e) {
    return absl::InvalidArgumentError(common::StrCat("access_log.path: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status AccessLog::Reopen() {
  std::string path;
  {
    common::MutexLock lock(&mu_);
    if (logger_ == nullptr || path_ == "-") return absl::OkStatus();
    path = path_;
  }
  // A new sink opens (creates) the path afresh; lines written meanwhile go to the old file.
  return Open(path);
}

void AccessLog::Close() {
  common::MutexLock lock(&mu_);
  logger_.reset();
  enabled_ = false;
}

namespace {

bool IsLowerHex(std::string_view s) {
  return s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// W3C Trace Context: "<2 hex version>-<32 hex trace id>-<16 hex parent id>-<2 hex flags>"
// (more fields may follow for versions above 00). All-zero ids and version ff are invalid.
bool ParseTraceparent(std::string_view v, std::string_view* trace_id, std::string_view* span_id) {
  if (v.size() < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-') return false;
  if (v.size() > 55 && (v.substr(0, 2) == "00" || v[55] != '-')) return false;
  const std::string_view version = v.substr(0, 2), trace = v.substr(3, 32), span = v.substr(36, 16),
                         flags = v.substr(53, 2);
  if (!IsLowerHex(version) || version == "ff" || !IsLowerHex(trace) || !IsLowerHex(span) ||
      !IsLowerHex(flags)) {
    return false;
  }
  if (trace == std::string(32, '0') || span == std::string(16, '0')) return false;
  *trace_id = trace;
  *span_id = span;
  return true;
}

}  // namespace

std::string AccessLog::Format(const AccessRecord& r) {
  std::string out = "{\"ts\":";
  common::AppendJsonString(
      out, absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()));
  out += ",\"id\":";
  common::AppendJsonString(out, r.request_id);
  out += ",\"method\":";
  common::AppendJsonString(out, r.method);
  out += ",\"path\":";
  common::AppendJsonString(out, r.path);
  if (!r.api.empty()) {
    out += ",\"api\":";
    common::AppendJsonString(out, r.api);
  }
  out += ",\"model\":";
  common::AppendJsonString(out, r.model);
  out += ",\"worker\":";
  common::AppendJsonString(out, r.worker);
  common::StrAppend(&out, ",\"status\":", r.status, ",\"bytes\":", r.bytes_sent,
                    ",\"attempts\":", r.attempts);
  if (r.ttfb_seconds >= 0) {
    common::StrAppend(&out, ",\"ttfb_ms\":", r.ttfb_seconds * 1e3);
  }
  common::StrAppend(&out, ",\"e2e_ms\":", r.e2e_seconds * 1e3);
  if (!r.api_key.empty()) {
    out += ",\"api_key\":";
    common::AppendJsonString(out, r.api_key);
  }
  if (r.prompt_tokens >= 0) common::StrAppend(&out, ",\"prompt_tokens\":", r.prompt_tokens);
  if (r.cached_tokens >= 0) common::StrAppend(&out, ",\"cached_tokens\":", r.cached_tokens);
  if (!r.response_id.empty()) {
    out += ",\"response_id\":";
    common::AppendJsonString(out, r.response_id);
  }
  if (std::string_view trace, span; ParseTraceparent(r.traceparent, &trace, &span)) {
    common::StrAppend(&out, ",\"trace_id\":\"", trace, "\",\"span_id\":\"", span, "\"");
  }
  out += "}";
  return out;
}

void AccessLog::Write(const AccessRecord& record) {
  // Copy the pointer: Open() may swap it concurrently on reload.
  std::shared_ptr<spdlog::logger> logger;
  {
    common::MutexLock lock(&mu_);
    logger = logger_;
  }
  if (logger) logger->info(Format(record));
}

}  // namespace kvgate::router
