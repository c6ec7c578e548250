#include "router/handlers/admission_control.h"

#include <cmath>

#include "common/strings.h"
#include "router/http/response_writer.h"
#include "router/http/thread_context.h"
#include "router/runtime/gateway_state.h"

namespace kvgate::router {
namespace {

// Prompt tokens are estimated at admission as body bytes / 4 (kvgate's text-mode rate); the
// tokenizer runs later, and only for requests that get in.
constexpr uint64_t kBytesPerToken = 4;

std::string RetryAfter(double seconds) {
  return common::StrCat("retry-after: ", std::max<int64_t>(1, std::llround(std::ceil(seconds))),
                        "\r\n");
}

class AdmissionControl : public PreHandler {
 public:
  explicit AdmissionControl(GatewayState& state) : state_(state) {}

  // router::PreHandler
  Verdict Check(ThreadContext&, Exchange& ex, const Route& route, Refusal* refusal) override {
    if (!route.limited) return Verdict::kPass;
    const config::Config& cfg = *ex.snapshot->config;
    const config::LimitsConfig& limits = cfg.limits;
    const config::RateLimitConfig* rate = &limits.rate;
    const std::string& who = Who(cfg, ex, &rate);
    const uint64_t tokens = ex.body.size() / kBytesPerToken;
    const RateLimiter::Decision d =
        state_.rate_limiter.Take(who, *rate, tokens, SteadyClock::now());
    if (!d.allowed) {
      state_.metrics.RateLimited(d.limit).Increment();
      *refusal = {429,
                  d.never
                      ? common::StrCat("Request too large: about ", tokens,
                                       " prompt tokens, more than the limit of ",
                                       rate->prompt_tokens_per_minute, " per minute for ", who, ".")
                      : common::StrCat("Rate limit reached for ", who, " on ", d.limit,
                                       " per minute. Please try again in ",
                                       std::ceil(d.retry_after_seconds), "s."),
                  std::string(d.limit), "rate_limit_exceeded", RetryAfter(d.retry_after_seconds)};
      return Verdict::kRefuse;
    }
    if (limits.max_concurrent_requests == 0) return Verdict::kPass;  // no cap: no lock, no waiter
    if (state_.admission.TryAcquire(limits.max_concurrent_requests, &ex.admission)) {
      return Verdict::kPass;
    }
    return Verdict::kWait;
  }

  // The cap is reached: a place in the queue.
  net::awaitable<bool> Wait(ThreadContext& tc, Exchange& ex, const Route&) override {
    const config::Config& cfg = *ex.snapshot->config;
    const config::LimitsConfig& limits = cfg.limits;
    const config::RateLimitConfig* rate = &limits.rate;
    const std::string& who = Who(cfg, ex, &rate);
    // A client that leaves while its request waits gives up its place in the queue.
    ArmDisconnectWatch(ex.conn);
    // One client's share of the queue: at least a place, at most queue_size.
    const uint32_t share =
        limits.queue_share_per_client >= 1.0
            ? 0
            : std::max<uint32_t>(1, static_cast<uint32_t>(std::ceil(limits.queue_share_per_client *
                                                                    limits.queue_size)));
    const auto r = co_await state_.admission.Acquire(
        limits.max_concurrent_requests, limits.queue_size,
        std::chrono::milliseconds(limits.queue_timeout_ms), &ex.admission, &ex.conn.queue_timer,
        AdmissionGate::Client{who, share});
    if (ex.conn.client_gone) {
      ex.admission = AdmissionSlot();  // a place granted as it left goes to the next waiter
      RecordClientGone(ex);
      co_return true;
    }
    DisarmDisconnectWatch(ex.conn);
    if (r == AdmissionGate::Result::kAdmitted) co_return false;
    if (r == AdmissionGate::Result::kOverClientShare) {
      // A 429, not a 503: the gateway has room, this client has taken its part of it.
      state_.metrics.AdmissionRejected("client_share").Increment();
      const std::string message = common::StrCat(
          "Too many requests waiting for ", who, ": ", share, " of the ", limits.queue_size,
          " queue places (limits.queue_share_per_client). Please try again shortly.");
      const std::string retry_after = RetryAfter(1);
      co_await WriteError(tc, ex, 429, message, "requests", "rate_limit_exceeded", retry_after);
      co_return true;
    }
    const bool full = r == AdmissionGate::Result::kQueueFull;
    state_.metrics.AdmissionRejected(full ? "queue_full" : "queue_timeout").Increment();
    // Named, not temporaries of the co_await expression (GCC 12 destroys those twice).
    const std::string message =
        full ? common::StrCat("Server overloaded: ", limits.max_concurrent_requests,
                              " requests running and ", limits.queue_size, " waiting.")
             : common::StrCat("Server overloaded: no place within ", limits.queue_timeout_ms,
                              " ms.");
    const std::string retry_after = RetryAfter(1);
    co_await WriteError(tc, ex, 503, message, "service_unavailable", "overloaded", retry_after);
    co_return true;
  }

 private:
  // Who the limits count against: the API key's name, else the client's address; `*rate`
  // becomes the key's own rate limit where it has one.
  static const std::string& Who(const config::Config& cfg, const Exchange& ex,
                                const config::RateLimitConfig** rate) {
    if (!ex.api_key.empty()) {
      for (const auto& k : cfg.auth.api_keys) {
        if (k.name == ex.api_key && k.rate) *rate = &*k.rate;
      }
    }
    return ex.api_key.empty() ? ex.conn.peer : ex.api_key;
  }

  GatewayState& state_;
};

}  // namespace

PreHandlerPtr MakeAdmissionControl(GatewayState& state) {
  return std::make_unique<AdmissionControl>(state);
}

}  // namespace kvgate::router
