#include "router/upstream/http1_upstream.h"

#include <array>

#include "common/strings.h"
#include "net/body_framing.h"
#include "net/http1.h"
#include "net/tls_socket.h"
#include "router/fleet/worker.h"
#include "router/http/response_writer.h"
#include "router/http/thread_context.h"
#include "router/upstream/relay.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {
namespace {

using std::chrono::milliseconds;
using Clock = SteadyClock;

// How the endpoint's API names its usage counts.
UsageScanner::Dialect ScannerDialect(EndpointLabel endpoint) {
  switch (endpoint) {
    case EndpointLabel::kMessages:
    case EndpointLabel::kCountTokens:
      return UsageScanner::Dialect::kAnthropic;
    case EndpointLabel::kResponses:
      return UsageScanner::Dialect::kResponses;
    default:
      return UsageScanner::Dialect::kOpenAi;
  }
}

constexpr size_t kMaxResponseHeadBytes = 64 * 1024;

bool IsRetryableRead(const error_code& ec) {
  return ec == net::error::eof || ec == net::error::connection_reset ||
         ec == net::error::broken_pipe;
}

// Sends the request head and body on a non-blocking worker socket, at once when it can. The
// head may be a buffer the thread reuses, so what is left of it is copied before waiting; the
// body stays in the client connection's buffer for the whole request.
net::awaitable<error_code> WriteUpstream(UpstreamConnection& c, std::string_view head,
                                         std::string_view body) {
  const std::array<net::const_buffer, 2> both = {net::buffer(head), net::buffer(body)};
  if (c.tls) co_return co_await TlsWriteAll(*c.tls, c.socket, both);
  tcp::socket& s = c.socket;
  error_code ec;
  size_t written = s.write_some(both, ec);
  if (ec && ec != net::error::would_block && ec != net::error::try_again) co_return ec;
  if (ec) written = 0;
  if (written == head.size() + body.size()) co_return error_code{};
  const std::string head_rest(written < head.size() ? head.substr(written) : std::string_view());
  const std::string_view body_rest = body.substr(written > head.size() ? written - head.size() : 0);
  const std::array<net::const_buffer, 2> rest = {net::buffer(head_rest), net::buffer(body_rest)};
  auto [wec, n] = co_await net::async_write(s, rest, kNoThrow);
  co_return wec;
}

// The snapshot's context for https:// workers.
ssl::context* UpstreamTls(const Exchange& ex) {
  return ex.snapshot->tls ? ex.snapshot->tls->upstream.get() : nullptr;
}

void CountTlsFailure(ThreadContext& tc, const absl::Status& s) {
  if (absl::IsFailedPrecondition(s)) tc.state.metrics.TlsHandshakeErrors("worker").Increment();
}

std::string_view BodyOf(const Exchange& ex, const UpstreamAttempt& attempt) {
  return attempt.body != nullptr ? std::string_view(*attempt.body) : ex.body;
}

}  // namespace

void AppendUpstreamHead(const Exchange& ex, const UpstreamAttempt& attempt, std::string* out) {
  const Worker& worker = *attempt.worker;
  const int dp_rank = attempt.dp_rank;
  const http1::RequestHead& h = ex.head;
  common::StrAppend(out, h.method_text, " ", h.path, h.query.empty() ? "" : "?", h.query,
                    " HTTP/1.1\r\nhost: ", worker.authority(), "\r\n");
  const bool rank = dp_rank >= 0 && worker.config().dp_size > 1;
  // A client's credentials stay here when kvgate checked them or has its own for workers.
  static const std::string kNoKey;
  const config::Config* cfg = ex.snapshot ? ex.snapshot->config.get() : nullptr;
  const std::string& worker_key = cfg != nullptr ? cfg->upstream.api_key : kNoKey;
  const bool drop_credentials =
      cfg != nullptr && (!cfg->auth.api_keys.empty() || !worker_key.empty());
  for (const http1::Header& f : h.headers) {
    if (drop_credentials && (http1::EqualsIgnoreCase(f.name, "authorization") ||
                             http1::EqualsIgnoreCase(f.name, "x-api-key"))) {
      continue;
    }
    if (h.IsHopByHop(f.name) || http1::EqualsIgnoreCase(f.name, "host") ||
        http1::EqualsIgnoreCase(f.name, "content-length") ||
        http1::EqualsIgnoreCase(f.name, "x-request-id") ||
        (rank && http1::EqualsIgnoreCase(f.name, "x-data-parallel-rank"))) {
      continue;
    }
    common::StrAppend(out, f.name, ": ", f.value, "\r\n");
  }
  common::StrAppend(
      out, "x-request-id: ",
      attempt.request_id.empty() ? std::string_view(ex.request_id) : attempt.request_id, "\r\n");
  if (!worker_key.empty()) common::StrAppend(out, "authorization: Bearer ", worker_key, "\r\n");
  // vLLM's header: the rank whose cache precise mode matched (or that it spread onto).
  if (rank) common::StrAppend(out, "x-data-parallel-rank: ", dp_rank, "\r\n");
  common::StrAppend(out, "content-length: ", BodyOf(ex, attempt).size(), "\r\n\r\n");
}

net::awaitable<AttemptResult> Http1Upstream::Send(ThreadContext& tc, Exchange& ex,
                                                  const UpstreamAttempt& attempt) {
  Worker& worker = *attempt.worker;
  const config::Config& cfg = *ex.snapshot->config;
  ClientConnection& client = ex.conn;
  AttemptResult result;
  // A pooled connection may have been closed by the worker meanwhile (servers drop idle
  // keep-alives after a few seconds): such a failure is retried once on a fresh connection to
  // the same worker and is not the worker's fault.
  for (int fresh = 0; fresh < 2; ++fresh) {
    UpstreamConnectionPtr conn = fresh == 0 ? tc.pool.TakeIdle(worker.authority()) : nullptr;
    const bool reused = conn != nullptr;
    if (!reused) {
      client.SetDeadline(DeadlineKind::kUpstream, milliseconds(cfg.upstream.connect_timeout_ms));
      auto connected =
          co_await tc.pool.Connect(worker.config().url, UpstreamTls(ex), &client.upstream);
      const bool expired = client.deadline_expired;
      client.ClearDeadline();
      client.upstream = nullptr;
      if (client.client_gone) {
        result.outcome = AttemptOutcome::kClientGone;
        result.reason = "client disconnected while connecting to the worker";
        co_return result;
      }
      if (!connected.ok()) {
        worker.RecordConnectionFailure(Clock::now(), cfg.circuit_breaker);
        CountTlsFailure(tc, connected.status());
        result.reason = expired
                            ? common::StrCat("connect to ", worker.authority(), " timed out after ",
                                             cfg.upstream.connect_timeout_ms, " ms")
                            : std::string(connected.status().message());
        result.metric_reason = "connect_error";
        co_return result;
      }
      conn = *std::move(connected);
    }
    tcp::socket& socket = conn->socket;
    client.upstream = &socket;
    struct Detach {
      ClientConnection& c;
      ~Detach() { c.upstream = nullptr; }
    } detach{client};

    static thread_local std::string head;
    head.clear();
    AppendUpstreamHead(ex, attempt, &head);
    if (!ex.overhead_recorded) {
      ex.overhead_recorded = true;
      tc.OverheadSeries().Observe(
          std::chrono::duration<double>(Clock::now() - ex.read_done).count());
    }
    client.SetDeadline(DeadlineKind::kUpstream,
                       milliseconds(cfg.upstream.connect_timeout_ms + cfg.limits.write_timeout_ms));
    const error_code wec = co_await WriteUpstream(*conn, head, BodyOf(ex, attempt));
    if (wec) {
      client.ClearDeadline();
      error_code ignored;
      socket.close(ignored);
      if (client.client_gone) {
        result.outcome = AttemptOutcome::kClientGone;
        result.reason = "client disconnected while sending to the worker";
        co_return result;
      }
      if (reused) continue;
      worker.RecordConnectionFailure(Clock::now(), cfg.circuit_breaker);
      result.reason = common::StrCat("writing to ", worker.name(), ": ", wec.message());
      result.metric_reason = "connect_error";
      co_return result;
    }
    const auto sent_at = Clock::now();

    // The response head. It usually arrives whole in one read into the thread's scratch and
    // is parsed there; a head split over reads is gathered in `gathered` first.
    client.SetDeadline(DeadlineKind::kUpstream, milliseconds(cfg.upstream.response_timeout_ms));
    char* buf = tc.scratch();
    std::string gathered;
    bool use_gathered = false;
    http1::ResponseHead response;
    std::string_view data;
    size_t head_bytes = 0;
    bool got_any = false;
    bool stale = false;
    for (;;) {
      error_code ec;
      const size_t n = conn->ReadSome(net::buffer(buf, ThreadContext::kScratchBytes), ec);
      if (ec == net::error::would_block || ec == net::error::try_again) {
        auto [aec] = co_await socket.async_wait(conn->read_wait(), kNoThrow);
        if (client.client_gone) {
          result.outcome = AttemptOutcome::kClientGone;
          result.reason = "client disconnected while waiting for the worker";
          co_return result;
        }
        if (client.deadline_expired) {
          worker.RecordTimeout();
          result.outcome = AttemptOutcome::kTimeout;
          result.reason = common::StrCat(worker.name(), " did not answer within ",
                                         cfg.upstream.response_timeout_ms, " ms");
          co_return result;
        }
        if (aec) {
          result.reason = common::StrCat("waiting for ", worker.name(), ": ", aec.message());
          result.metric_reason = "upstream_reset";
          co_return result;
        }
        continue;
      }
      if (ec) {
        if (reused && !got_any && IsRetryableRead(ec)) {
          stale = true;  // a keep-alive connection the worker had closed
          break;
        }
        // Bytes that cannot begin an HTTP response: the worker speaks another protocol, and
        // another try would hear the same. (A head cut short is a worker that died: retried.)
        constexpr std::string_view kHttp = "HTTP/";
        if (got_any && !data.starts_with(kHttp) && !kHttp.starts_with(data)) {
          result.outcome = AttemptOutcome::kBadResponse;
          result.reason = common::StrCat(worker.name(), " sent ", data.size(),
                                         " bytes that are not an HTTP response, then closed");
          co_return result;
        }
        worker.RecordConnectionFailure(Clock::now(), cfg.circuit_breaker);
        result.reason = common::StrCat("reading from ", worker.name(), ": ", ec.message());
        result.metric_reason = "upstream_reset";
        co_return result;
      }
      got_any = true;
      if (use_gathered) {
        gathered.append(buf, n);
        data = gathered;
      } else {
        data = std::string_view(buf, n);
      }
      // Informational heads (100 Continue, 103 Early Hints) are dropped; the final one counts.
      bool complete = false;
      for (;;) {
        const http1::ParseResult pr = http1::ParseResponseHead(
            data, ex.head.method, http1::ParseLimits{kMaxResponseHeadBytes, 256}, &response);
        if (pr.status == http1::ParseStatus::kIncomplete) break;
        if (pr.status == http1::ParseStatus::kError || response.status == 101) {
          result.outcome = AttemptOutcome::kBadResponse;
          result.reason = common::StrCat(worker.name(), " sent a malformed response: ",
                                         pr.status == http1::ParseStatus::kError
                                             ? pr.error
                                             : std::string("an unrequested protocol switch"));
          co_return result;
        }
        if (response.status >= 200) {
          head_bytes = pr.head_bytes;
          complete = true;
          break;
        }
        data.remove_prefix(pr.head_bytes);
      }
      if (complete) break;
      // A partial head leaves the scratch before the next read reuses it.
      if (!use_gathered) {
        gathered.assign(data.data(), data.size());
        use_gathered = true;
      } else {
        gathered.erase(0, gathered.size() - data.size());
      }
      data = gathered;
    }
    if (stale) {
      error_code ignored;
      socket.close(ignored);
      continue;
    }
    client.ClearDeadline();

    const int status = response.status;
    worker.RecordSuccess();  // it answered: even a 5xx is not a connection failure
    if (status >= 500 && !attempt.last) {
      result.reason = common::StrCat(worker.name(), " answered ", status);
      result.metric_reason = "status_5xx";
      co_return result;  // the connection is dropped, not drained
    }
    result.ttfb_seconds = std::chrono::duration<double>(Clock::now() - sent_at).count();

    UsageScanner usage(ScannerDialect(ex.endpoint), ex.endpoint == EndpointLabel::kResponses);
    ex.worker = worker.name();
    ex.worker_id = worker.id();
    const RelayResult relay =
        co_await RelayResponse(tc, ex, *conn, response, data.substr(head_bytes), usage);
    result.cached_tokens = usage.cached_tokens();
    result.prompt_tokens = usage.prompt_tokens();
    result.response_id = usage.response_id();
    if (!relay.sent_head && !relay.client_gone) {
      result.outcome = AttemptOutcome::kBadResponse;
      result.reason = common::StrCat(worker.name(), " sent a malformed response: ", relay.error);
      co_return result;
    }
    if (relay.complete && relay.reusable) {
      conn->authority = worker.authority();
      tc.pool.PutIdle(std::move(conn), cfg.upstream.max_idle_per_worker);
    } else {
      error_code ignored;
      socket.close(ignored);
    }
    if (relay.client_gone || client.client_gone) {
      result.outcome = AttemptOutcome::kClientGone;
      result.reason = "client disconnected during the response";
      co_return result;
    }
    if (!relay.complete) {
      // A response cut short cannot be completed or retried: closing the client connection
      // is the only honest signal (chunked framing then lacks its last chunk).
      spdlog::warn("request {}: the response from {} broke off after {} bytes: {}", ex.request_id,
                   worker.name(), ex.bytes_sent, relay.error);
      ex.status = 502;  // what the client effectively got: a broken response
      CloseAfterResponse(ex);
      error_code ignored;
      client.socket.close(ignored);
    }
    result.outcome = AttemptOutcome::kRelayed;
    co_return result;
  }
  result.reason = common::StrCat(worker.name(), " closed the connection twice");
  result.metric_reason = "upstream_reset";
  co_return result;
}

namespace {

// What the fetch's deadline timer shares with the coroutine: the handler may run after the
// fetch returned, so it reads only this.
struct FetchDeadline {
  bool expired = false;
  bool done = false;
  FetchControl* control = nullptr;
};

// Keeps ClientConnection::side_upstream and the control pointing at the fetch's socket.
void Expose(ClientConnection& client, FetchControl& control, tcp::socket* socket) {
  control.socket = socket;
  if (!control.outlive_client) client.side_upstream = socket;
}

}  // namespace

net::awaitable<FetchResult> Http1Upstream::Fetch(ThreadContext& tc, const Exchange& ex,
                                                 const UpstreamAttempt& attempt,
                                                 milliseconds timeout, uint64_t max_body_bytes,
                                                 FetchControl& control) {
  Worker& worker = *attempt.worker;
  const config::Config& cfg = *ex.snapshot->config;
  ClientConnection& client = ex.conn;
  FetchResult result;
  const auto start = Clock::now();
  auto deadline = std::make_shared<FetchDeadline>();
  deadline->control = &control;
  net::steady_timer timer(tc.ioc);
  timer.expires_after(timeout);
  timer.async_wait([deadline](const error_code& ec) {
    if (ec || deadline->done) return;
    deadline->expired = true;
    deadline->control->Cancel();
  });
  struct Finish {
    ClientConnection& client;
    FetchControl& control;
    FetchDeadline& deadline;
    net::steady_timer& timer;
    ~Finish() {
      deadline.done = true;
      timer.cancel();
      Expose(client, control, nullptr);
    }
  } finish{client, control, *deadline, timer};
  // Why the fetch stopped waiting, when it was not the worker's doing.
  auto interrupted = [&]() -> bool {
    if (deadline->expired) {
      result.timed_out = true;
      result.reason =
          common::StrCat(worker.name(), " did not answer within ", timeout.count(), " ms");
      return true;
    }
    if (control.cancelled || (client.client_gone && !control.outlive_client)) {
      result.cancelled = true;
      result.reason = control.cancelled ? "cancelled" : "the client disconnected";
      return true;
    }
    return false;
  };

  std::string head;
  AppendUpstreamHead(ex, attempt, &head);
  for (int fresh = 0; fresh < 2; ++fresh) {
    if (interrupted()) co_return result;
    UpstreamConnectionPtr conn = fresh == 0 ? tc.pool.TakeIdle(worker.authority()) : nullptr;
    const bool reused = conn != nullptr;
    if (!reused) {
      tcp::socket* connecting = nullptr;
      auto connected = co_await tc.pool.Connect(worker.config().url, UpstreamTls(ex), &connecting);
      if (interrupted()) co_return result;
      if (!connected.ok()) {
        worker.RecordConnectionFailure(Clock::now(), cfg.circuit_breaker);
        CountTlsFailure(tc, connected.status());
        result.reason = std::string(connected.status().message());
        co_return result;
      }
      conn = *std::move(connected);
    }
    tcp::socket& socket = conn->socket;
    Expose(client, control, &socket);
    const error_code wec = co_await WriteUpstream(*conn, head, BodyOf(ex, attempt));
    if (interrupted()) co_return result;
    if (wec) {
      if (reused) continue;
      worker.RecordConnectionFailure(Clock::now(), cfg.circuit_breaker);
      result.reason = common::StrCat("writing to ", worker.name(), ": ", wec.message());
      co_return result;
    }

    // Head, then body, gathered in `in`; the body's payload goes to result.body.
    std::string in;
    char buf[16 * 1024];
    int status = 0;
    bool keep_alive = false;
    std::optional<http1::BodyFraming> framing;
    bool got_any = false;
    bool stale = false;
    for (;;) {
      error_code ec;
      size_t n = conn->ReadSome(net::buffer(buf), ec);
      if (ec == net::error::would_block || ec == net::error::try_again) {
        auto [aec] = co_await socket.async_wait(conn->read_wait(), kNoThrow);
        if (interrupted()) co_return result;
        if (aec) {
          result.reason = common::StrCat("waiting for ", worker.name(), ": ", aec.message());
          co_return result;
        }
        continue;
      }
      if (ec == net::error::eof && framing) {
        if (framing->OnEof() == http1::BodyFraming::Status::kDone) break;
      }
      if (ec) {
        if (reused && !got_any && IsRetryableRead(ec)) {
          stale = true;
          break;
        }
        worker.RecordConnectionFailure(Clock::now(), cfg.circuit_breaker);
        result.reason = common::StrCat("reading from ", worker.name(), ": ", ec.message());
        co_return result;
      }
      got_any = true;
      in.append(buf, n);
      if (!framing) {
        http1::ResponseHead response;
        const http1::ParseResult pr = http1::ParseResponseHead(
            in, ex.head.method, http1::ParseLimits{kMaxResponseHeadBytes, 256}, &response);
        if (pr.status == http1::ParseStatus::kIncomplete) continue;
        if (pr.status == http1::ParseStatus::kError) {
          result.reason = common::StrCat(worker.name(), " sent a malformed response: ", pr.error);
          co_return result;
        }
        if (response.status < 200) {  // 100 Continue, 103 Early Hints: the next head counts
          in.erase(0, pr.head_bytes);
          continue;
        }
        status = response.status;
        keep_alive = response.keep_alive;
        framing.emplace(response.body, response.content_length);
        in.erase(0, pr.head_bytes);
      }
      size_t consumed = 0;
      const auto fs = framing->Feed(in, &consumed,
                                    [&](std::string_view payload) { result.body.append(payload); });
      in.erase(0, consumed);
      if (fs == http1::BodyFraming::Status::kError) {
        result.reason =
            common::StrCat(worker.name(), " sent a malformed response body: ", framing->error());
        co_return result;
      }
      if (result.body.size() > max_body_bytes) {
        result.reason =
            common::StrCat(worker.name(), "'s response is larger than ", max_body_bytes, " bytes");
        co_return result;
      }
      if (fs == http1::BodyFraming::Status::kDone) break;
    }
    if (stale) {
      error_code ignored;
      socket.close(ignored);
      continue;
    }
    worker.RecordSuccess();
    result.answered = true;
    result.status = status;
    result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (keep_alive && in.empty() && framing->kind() != http1::BodyKind::kUntilClose) {
      Expose(client, control, nullptr);
      conn->authority = worker.authority();
      tc.pool.PutIdle(std::move(conn), cfg.upstream.max_idle_per_worker);
    }
    co_return result;
  }
  result.reason = common::StrCat(worker.name(), " closed the connection twice");
  co_return result;
}

}  // namespace kvgate::router
