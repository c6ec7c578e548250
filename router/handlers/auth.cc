#include "router/handlers/auth.h"

#include <openssl/evp.h>

#include <cmath>

#include "common/strings.h"
#include "router/http/thread_context.h"
#include "router/runtime/gateway_state.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {

std::optional<std::string_view> BearerToken(std::string_view auth) {
  while (!auth.empty() && (auth.front() == ' ' || auth.front() == '\t')) auth.remove_prefix(1);
  constexpr std::string_view kScheme = "bearer";
  if (auth.size() <= kScheme.size() ||
      (auth[kScheme.size()] != ' ' && auth[kScheme.size()] != '\t')) {
    return std::nullopt;
  }
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if ((auth[i] | 0x20) != kScheme[i]) return std::nullopt;
  }
  auth.remove_prefix(kScheme.size());
  while (!auth.empty() && (auth.front() == ' ' || auth.front() == '\t')) auth.remove_prefix(1);
  while (!auth.empty() && (auth.back() == ' ' || auth.back() == '\t')) auth.remove_suffix(1);
  if (auth.empty()) return std::nullopt;
  return auth;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = kHex[md[i] >> 4];
    out[2 * i + 1] = kHex[md[i] & 15];
  }
  return out;
}

bool IsOpenPath(std::string_view path) {
  return path == "/health" || path == "/ready" || path == "/metrics" || path == "/version";
}

namespace {

class AdminTokenCheck : public PreHandler {
 public:
  // router::PreHandler
  Verdict Check(ThreadContext&, Exchange& ex, const Route& route, Refusal* refusal) override {
    if (!route.admin) return Verdict::kPass;
    const std::string& token = ex.snapshot->config->admin.token;
    if (token.empty()) {
      if (ex.conn.admin_listener) return Verdict::kPass;  // the operator bound it apart
      *refusal = {404,
                  "admin endpoints are off the API listener unless admin.token is set "
                  "(or admin.listen gives them a listener of their own)",
                  "invalid_request_error", "not_found", ""};
      return Verdict::kRefuse;
    }
    const auto bearer = BearerToken(ex.head.Find("authorization"));
    if (bearer && ConstantTimeEquals(*bearer, token)) return Verdict::kPass;
    *refusal = {401, "admin token required", "authentication_error", "invalid_admin_token",
                "www-authenticate: Bearer\r\n"};
    return Verdict::kRefuse;
  }
};

// A wrong key costs the sender a request and the gateway a log line: about one line a second
// for them all, with the count of those left out.
void LogAuthFailure(GatewayState& state, const Exchange& ex, std::string_view what,
                    SteadyClock::time_point now) {
  uint64_t suppressed = 0;
  if (!state.auth_failure_log.Allow(now, &suppressed)) return;
  if (suppressed == 0) {
    spdlog::warn("request {}: {} API key from {}", ex.request_id, what, ex.conn.peer);
  } else {
    spdlog::warn(
        "request {}: {} API key from {} ({} more failed or throttled API keys since the last "
        "such line; kvgate_auth_failures_total counts them all)",
        ex.request_id, what, ex.conn.peer, suppressed);
  }
}

class ApiKeyCheck : public PreHandler {
 public:
  explicit ApiKeyCheck(GatewayState& state) : state_(state) {}

  // router::PreHandler
  Verdict Check(ThreadContext&, Exchange& ex, const Route& route, Refusal* refusal) override {
    // Two credentials are one too many: which would a worker, or a proxy between, believe?
    int authorization = 0, x_api_key = 0;
    for (const http1::Header& h : ex.head.headers) {
      authorization += http1::EqualsIgnoreCase(h.name, "authorization") ? 1 : 0;
      x_api_key += http1::EqualsIgnoreCase(h.name, "x-api-key") ? 1 : 0;
    }
    if (authorization > 1 || x_api_key > 1) {
      spdlog::warn("request {}: refused: more than one {} header, from {}", ex.request_id,
                   authorization > 1 ? "Authorization" : "x-api-key", ex.conn.peer);
      *refusal = {400,
                  authorization > 1 ? "more than one Authorization header"
                                    : "more than one x-api-key header",
                  "invalid_request_error", "duplicate_credentials", ""};
      return Verdict::kRefuse;
    }
    const auto& keys = ex.snapshot->config->auth.api_keys;
    if (route.admin || keys.empty() || IsOpenPath(ex.head.path)) return Verdict::kPass;
    // An address that used up its failures is not heard until its window ends: no hashing, no
    // per-request log line.
    const config::AuthConfig& auth = ex.snapshot->config->auth;
    const AuthFailureThrottle::Limit limit{auth.max_failures_per_address,
                                           std::chrono::milliseconds(auth.failure_window_ms)};
    const auto now = SteadyClock::now();
    if (const double wait = state_.auth_failures.RetryAfterSeconds(ex.conn.peer, limit, now);
        wait > 0) {
      state_.metrics.AuthFailures("throttled").Increment();
      LogAuthFailure(state_, ex, "throttled", now);
      *refusal = {429,
                  common::StrCat("Too many failed API keys from ", ex.conn.peer, " (",
                                 limit.max_failures, " within ", auth.failure_window_ms,
                                 " ms). Please try again in ", std::ceil(wait), "s."),
                  "requests",
                  "too_many_failed_api_keys",
                  common::StrCat(
                      "retry-after: ", std::max<int64_t>(1, std::llround(std::ceil(wait))), "\r\n"),
                  /*log=*/false};
      return Verdict::kRefuse;
    }
    // Anthropic's clients (Claude Code with ANTHROPIC_API_KEY) send the key as x-api-key.
    auto bearer = BearerToken(ex.head.Find("authorization"));
    if (const std::string_view x_api_key = ex.head.Find("x-api-key");
        !bearer && !x_api_key.empty()) {
      bearer = x_api_key;
    }
    if (bearer) {
      const std::string presented = Sha256Hex(*bearer);
      const config::ApiKeyConfig* match = nullptr;
      for (const auto& k : keys) {  // every key, so the time does not say which one matched
        if (ConstantTimeEquals(presented, k.sha256) && match == nullptr) match = &k;
      }
      if (match != nullptr) {
        ex.api_key = match->name;
        return Verdict::kPass;
      }
    }
    state_.metrics.AuthFailures(bearer ? "invalid" : "missing").Increment();
    state_.auth_failures.RecordFailure(ex.conn.peer, limit, now);
    LogAuthFailure(state_, ex, bearer ? "invalid" : "missing", now);
    *refusal = {401,
                bearer ? "Incorrect API key provided."
                       : "You didn't provide an API key. Send it as "
                         "'Authorization: Bearer YOUR_KEY' (or 'x-api-key: YOUR_KEY').",
                "invalid_request_error",
                "invalid_api_key",
                "www-authenticate: Bearer\r\n",
                /*log=*/false};
    return Verdict::kRefuse;
  }

 private:
  GatewayState& state_;
};

}  // namespace

PreHandlerPtr MakeAdminTokenCheck() { return std::make_unique<AdminTokenCheck>(); }
PreHandlerPtr MakeApiKeyCheck(GatewayState& state) { return std::make_unique<ApiKeyCheck>(state); }

}  // namespace kvgate::router
