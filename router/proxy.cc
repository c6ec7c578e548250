// Upstream side of the gateway: pick a worker, forward the request unchanged, relay the answer
// chunk by chunk as it arrives, retry elsewhere when a worker fails before the client saw a
// byte. See docs/life_of_a_request.md.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <random>

#include "common/strings.h"
#include "router/internal/thread_context.h"
#include "router/usage_scanner.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr size_t kRelayChunkBytes = 64 * 1024;

// Hop-by-hop headers (RFC 9110 §7.6.1) are for one connection and never forwarded.
bool IsHopByHop(http::field f, std::string_view name) {
  switch (f) {
    case http::field::connection:
    case http::field::keep_alive:
    case http::field::proxy_connection:
    case http::field::te:
    case http::field::trailer:
    case http::field::upgrade:
    case http::field::expect:
      return true;
    default:
      return beast::iequals(name, "proxy-connection");
  }
}

enum class Outcome {
  kRelayed,     // the worker's response reached the client (complete or not)
  kRetry,       // nothing reached the client; another worker may serve it
  kTimeout,     // the worker did not answer in time; nothing reached the client
  kClientGone,  // the client disconnected; stop
};

struct AttemptResult {
  Outcome outcome = Outcome::kRetry;
  std::string reason;  // for logs and the final error message
  std::string metric_reason;
};

// Watches a client connection while the gateway waits on a worker: when the client closes its
// side, the upstream socket is closed so the worker stops generating for nobody.
struct DisconnectWatch {
  bool active = true;
  bool client_gone = false;
  beast::tcp_stream* upstream = nullptr;
};

net::awaitable<void> WatchClient(std::shared_ptr<ClientConnection> conn,
                                 std::shared_ptr<DisconnectWatch> watch) {
  auto [ec] = co_await conn->stream.socket().async_wait(tcp::socket::wait_read, kNoThrow);
  if (ec || !watch->active) co_return;
  char c;
  const ssize_t n = ::recv(conn->stream.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
    watch->client_gone = true;
    if (watch->upstream != nullptr) {
      beast::error_code ignored;
      watch->upstream->socket().close(ignored);
    }
  }
  // n > 0: the client pipelined its next request; it is still there, stop watching.
}

// Stops the watcher started for one attempt (it may already have finished).
void StopWatch(ClientConnection& conn, DisconnectWatch& watch) {
  if (!watch.active) return;
  watch.active = false;
  watch.upstream = nullptr;
  beast::error_code ignored;
  conn.stream.socket().cancel(ignored);
}

net::awaitable<void> Backoff(ThreadContext& tc, const config::RetryConfig& retry,
                             uint32_t attempt) {
  double ms = static_cast<double>(retry.backoff_base_ms) *
              static_cast<double>(1u << std::min(attempt, 10u));
  ms = std::min(ms, static_cast<double>(retry.backoff_max_ms));
  std::uniform_real_distribution<double> jitter(1.0 - retry.jitter, 1.0 + retry.jitter);
  ms *= jitter(tc.rng);
  if (ms < 1) co_return;
  net::steady_timer timer(tc.ioc);
  timer.expires_after(std::chrono::microseconds(static_cast<int64_t>(ms * 1000)));
  co_await timer.async_wait(kNoThrow);
}

// Copies the worker's response header for the client: hop-by-hop fields dropped, our request
// id and worker name added, framing kept (the body is relayed byte for byte).
void BuildClientHeader(const http::response<http::buffer_body>& up,
                       http::response<http::buffer_body>& out, const RequestContext& rc,
                       const Worker& worker) {
  out.version(rc.version);
  out.result(up.result_int());
  out.reason(up.reason());
  for (const auto& f : up) {
    if (IsHopByHop(f.name(), f.name_string())) continue;
    if (beast::iequals(f.name_string(), "x-request-id") ||
        beast::iequals(f.name_string(), "x-kvgate-worker")) {
      continue;
    }
    out.insert(f.name_string(), f.value());
  }
  out.set("x-request-id", rc.request_id);
  out.set("x-kvgate-worker", worker.name());
  const bool framed = up.has_content_length() || up.chunked();
  if (!framed && rc.version >= 11) out.chunked(true);  // worker reads until EOF; we must frame
  out.keep_alive(rc.keep_alive && (framed || rc.version >= 11));
}

// One try on one worker.
net::awaitable<AttemptResult> TryWorker(ThreadContext& tc,
                                        const std::shared_ptr<ClientConnection>& conn,
                                        http::request<http::string_body>& req, RequestContext& rc,
                                        Worker& worker, Reservation& reservation,
                                        const config::Config& cfg, bool last_attempt) {
  AttemptResult result;
  const auto now = Clock::now;
  // A pooled connection may have been closed by the worker meanwhile (servers drop idle
  // keep-alives after a few seconds): such a failure is retried once on a fresh connection to
  // the same worker and is not the worker's fault.
  for (int fresh = 0; fresh < 2; ++fresh) {
    std::optional<beast::tcp_stream> upstream_slot =
        fresh == 0 ? tc.pool.TakeIdle(worker.authority()) : std::nullopt;
    const bool reused = upstream_slot.has_value();
    if (!reused) {
      auto connected = co_await tc.pool.Connect(worker.config().url,
                                                milliseconds(cfg.upstream.connect_timeout_ms));
      if (!connected.ok()) {
        worker.RecordConnectionFailure(now(), cfg.circuit_breaker);
        result.outcome = Outcome::kRetry;
        result.reason = std::string(connected.status().message());
        result.metric_reason = "connect_error";
        co_return result;
      }
      upstream_slot.emplace(std::move(*connected));
    }
    beast::tcp_stream& upstream = *upstream_slot;

    req.set(http::field::host, worker.authority());
    if (!rc.overhead_recorded) {
      rc.overhead_recorded = true;
      tc.state.metrics.router_overhead().Observe(
          std::chrono::duration<double>(now() - rc.read_done).count());
    }
    upstream.expires_after(
        milliseconds(cfg.upstream.connect_timeout_ms + cfg.limits.write_timeout_ms));
    auto [wec, wn] = co_await http::async_write(upstream, req, kNoThrow);
    if (wec) {
      if (reused) continue;
      worker.RecordConnectionFailure(now(), cfg.circuit_breaker);
      result.reason = common::StrCat("writing to ", worker.name(), ": ", wec.message());
      result.metric_reason = "connect_error";
      co_return result;
    }
    const auto sent_at = now();

    auto watch = std::make_shared<DisconnectWatch>();
    watch->upstream = &upstream;
    net::co_spawn(tc.ioc, WatchClient(conn, watch), net::detached);

    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);  // streamed through, never buffered whole
    parser.header_limit(64 * 1024);
    upstream.expires_after(milliseconds(cfg.upstream.response_timeout_ms));
    beast::flat_buffer up_buffer;
    auto [hec, hn] = co_await http::async_read_header(upstream, up_buffer, parser, kNoThrow);
    if (watch->client_gone) {
      StopWatch(*conn, *watch);
      result.outcome = Outcome::kClientGone;
      result.reason = "client disconnected while waiting for the worker";
      co_return result;
    }
    if (hec) {
      StopWatch(*conn, *watch);
      if (hec == beast::error::timeout) {
        if (worker.metrics().timeouts != nullptr) worker.metrics().timeouts->Increment();
        result.outcome = Outcome::kTimeout;
        result.reason = common::StrCat(worker.name(), " did not answer within ",
                                       cfg.upstream.response_timeout_ms, " ms");
        co_return result;
      }
      if (reused && (hec == http::error::end_of_stream || hec == net::error::connection_reset ||
                     hec == net::error::eof)) {
        continue;  // stale keep-alive connection
      }
      worker.RecordConnectionFailure(now(), cfg.circuit_breaker);
      result.reason = common::StrCat("reading from ", worker.name(), ": ", hec.message());
      result.metric_reason = "upstream_reset";
      co_return result;
    }

    auto& up = parser.get();
    const int status = up.result_int();
    if (status >= 500 && !last_attempt) {
      StopWatch(*conn, *watch);
      worker.RecordSuccess();  // it answered: a 5xx is not a connection failure
      result.reason = common::StrCat(worker.name(), " answered ", status);
      result.metric_reason = "status_5xx";
      co_return result;  // upstream connection dropped, not drained
    }
    worker.RecordSuccess();
    worker.ReleasePrefill(reservation);  // the worker finished this prompt's prefill
    rc.ttfb_seconds = std::chrono::duration<double>(now() - sent_at).count();
    if (worker.metrics().ttfb != nullptr) worker.metrics().ttfb->Observe(rc.ttfb_seconds);
    rc.worker = worker.name();
    rc.status = status;

    // Relay: header first, then each piece of body as soon as the worker produced it.
    http::response<http::buffer_body> out;
    BuildClientHeader(up, out, rc, worker);
    if (!out.keep_alive()) rc.keep_alive = false;
    http::response_serializer<http::buffer_body> sr{out};
    UsageScanner usage;
    std::unique_ptr<char[]> buf(new char[kRelayChunkBytes]);
    bool client_ok = true;
    bool upstream_ok = true;

    out.body().data = nullptr;
    out.body().more = !parser.is_done();
    conn->stream.expires_after(milliseconds(cfg.limits.write_timeout_ms));
    {
      auto [ec, n] = co_await http::async_write_header(conn->stream, sr, kNoThrow);
      client_ok = !ec;
    }
    while (client_ok && !parser.is_done()) {
      up.body().data = buf.get();
      up.body().size = kRelayChunkBytes;
      upstream.expires_after(milliseconds(cfg.upstream.stream_idle_timeout_ms));
      auto [rec, rn] = co_await http::async_read_some(upstream, up_buffer, parser, kNoThrow);
      if (rec == http::error::need_buffer) rec = {};
      if (rec) {
        upstream_ok = false;
        break;
      }
      const size_t got = kRelayChunkBytes - up.body().size;
      if (got == 0 && !parser.is_done()) continue;
      usage.Feed(std::string_view(buf.get(), got));
      out.body().data = got > 0 ? buf.get() : nullptr;
      out.body().size = got;
      out.body().more = !parser.is_done();
      conn->stream.expires_after(milliseconds(cfg.limits.write_timeout_ms));
      auto [cec, cn] = co_await http::async_write(conn->stream, sr, kNoThrow);
      if (cec == http::error::need_buffer) cec = {};
      if (cec) {
        client_ok = false;
        break;
      }
      rc.bytes_sent += got;
    }
    if (client_ok && upstream_ok && !sr.is_done()) {
      // Body ended exactly at a read boundary: flush the final (empty) piece / last chunk.
      out.body().data = nullptr;
      out.body().size = 0;
      out.body().more = false;
      auto [cec, cn] = co_await http::async_write(conn->stream, sr, kNoThrow);
      if (cec && cec != http::error::need_buffer) client_ok = false;
    }
    const bool client_gone = watch->client_gone || !client_ok;
    StopWatch(*conn, *watch);
    rc.cached_tokens = usage.cached_tokens();
    rc.prompt_tokens = usage.prompt_tokens();

    if (parser.is_done() && upstream_ok && up.keep_alive() && upstream.socket().is_open()) {
      tc.pool.PutIdle(worker.authority(), std::move(upstream), cfg.upstream.max_idle_per_worker);
    } else {
      beast::error_code ignored;
      upstream.socket().close(ignored);
    }
    if (!upstream_ok || client_gone) {
      // A response cut short cannot be completed or retried: closing the client connection
      // is the only honest signal (chunked framing then lacks its final chunk).
      rc.keep_alive = false;
      beast::error_code ignored;
      conn->stream.socket().close(ignored);
      if (!upstream_ok) {
        spdlog::warn("request {}: worker {} stream broke after {} bytes", rc.request_id,
                     worker.name(), rc.bytes_sent);
        rc.status = 502;  // what the client effectively got: a broken response
      }
    }
    result.outcome = client_gone ? Outcome::kClientGone : Outcome::kRelayed;
    co_return result;
  }
  result.reason = common::StrCat(worker.name(), " closed the connection twice");
  result.metric_reason = "upstream_reset";
  co_return result;
}

}  // namespace

net::awaitable<void> ProxyRequest(ThreadContext& tc, const std::shared_ptr<ClientConnection>& conn,
                                  http::request<http::string_body>& req, RequestContext& rc) {
  // Own copies: another request on this thread may refresh the thread's snapshots meanwhile.
  const config::ConfigConstSharedPtr cfg = tc.config();
  const WorkerSetConstSharedPtr workers = tc.workers();
  const PolicySetConstSharedPtr policies = tc.policies();

  // Forwarded unchanged but for hop-by-hop headers, Host and the request id.
  std::vector<std::string> drop;
  for (const auto& f : req) {
    if (IsHopByHop(f.name(), f.name_string())) drop.emplace_back(f.name_string());
  }
  for (const auto& name : drop) req.erase(name);
  req.set("x-request-id", rc.request_id);
  req.version(11);
  req.keep_alive(true);
  req.prepare_payload();

  bool any_serves_model = false;
  std::vector<Worker*> candidates =
      RoutePlanner::Available(*workers, rc.model, Clock::now(), &any_serves_model);
  if (!any_serves_model && !workers->workers.empty()) {
    co_await WriteError(*conn, rc, http::status::not_found,
                        common::StrCat("The model `", rc.model, "` does not exist."),
                        "invalid_request_error", "model_not_found");
    co_return;
  }
  if (candidates.empty()) {
    co_await WriteError(*conn, rc, http::status::service_unavailable, "no healthy worker available",
                        "service_unavailable", "no_healthy_worker");
    co_return;
  }

  RoutePlanner& planner = tc.state.planner;
  RouteRequest route;
  route.endpoint = rc.endpoint;
  route.model = rc.model;
  route.session_key = rc.session_key;
  route.body = req.body();
  route.chain = rc.prompt.chain;
  route.tokens = rc.prompt.tokens;
  route.prompt_tokens = rc.prompt.prompt_tokens;
  route.block_tokens = cfg->routing.block_tokens;
  std::string last_error;
  bool rank_set = false;
  const uint32_t max_attempts = cfg->retry.max_attempts;
  for (uint32_t attempt = 0; attempt < max_attempts && !candidates.empty(); ++attempt) {
    if (attempt > 0) co_await Backoff(tc, cfg->retry, attempt - 1);
    route.attempt = attempt;
    route.now = Clock::now();
    Decision decision = planner.Decide(route, candidates, *policies, cfg->routing, true);
    Worker* worker = decision.worker;
    const bool last = attempt + 1 == max_attempts || candidates.size() == 1;
    rc.attempts = attempt + 1;
    // Keep the worker alive across a reload that removes it while this request runs.
    WorkerSharedPtr hold;
    for (const auto& w : workers->workers) {
      if (w.get() == worker) hold = w;
    }
    if (decision.dp_rank >= 0 && worker->config().dp_size > 1) {
      // vLLM's header: the rank whose cache precise mode matched (or that it spread onto).
      req.set("x-data-parallel-rank", std::to_string(decision.dp_rank));
      rank_set = true;
    } else if (rank_set) {
      req.erase("x-data-parallel-rank");  // Set for an earlier attempt on another worker.
      rank_set = false;
    }
    AttemptResult r =
        co_await TryWorker(tc, conn, req, rc, *worker, decision.reservation, *cfg, last);
    worker->Release(decision.reservation);

    RouteOutcome outcome;
    outcome.success = r.outcome == Outcome::kRelayed;
    outcome.status = rc.status;
    outcome.cached_tokens = rc.cached_tokens;
    outcome.prompt_tokens = rc.prompt_tokens;
    outcome.ttfb_seconds = rc.ttfb_seconds;
    outcome.predicted_cached_tokens = decision.predicted_cached_tokens;
    outcome.queue_tokens_at_dispatch = decision.queue_tokens_at_dispatch;
    outcome.uncached_tokens = decision.reservation.prefill_tokens;
    planner.Complete(route, decision, outcome, *policies, cfg->routing);

    switch (r.outcome) {
      case Outcome::kRelayed:
        co_return;
      case Outcome::kClientGone:
        rc.status = 499;  // nginx's "client closed request"
        rc.keep_alive = false;
        spdlog::info("request {}: {}", rc.request_id, r.reason);
        co_return;
      case Outcome::kTimeout:
        rc.worker = worker->name();
        co_await WriteError(*conn, rc, http::status::gateway_timeout, r.reason, "timeout",
                            "upstream_timeout");
        co_return;
      case Outcome::kRetry:
        break;
    }
    last_error = r.reason;
    spdlog::warn("request {}: attempt {} on {} failed: {}", rc.request_id, attempt + 1,
                 worker->name(), r.reason);
    candidates.erase(std::remove(candidates.begin(), candidates.end(), worker), candidates.end());
    if (attempt + 1 < max_attempts && !candidates.empty()) {
      tc.state.metrics.Retries(r.metric_reason).Increment();
    }
  }
  co_await WriteError(*conn, rc, http::status::service_unavailable,
                      common::StrCat("no worker could serve the request after ", rc.attempts,
                                     " attempt(s); last error: ", last_error),
                      "service_unavailable", "upstream_unavailable");
}

}  // namespace kvgate::router
