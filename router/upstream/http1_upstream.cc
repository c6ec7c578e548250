#include "router/upstream/http1_upstream.h"

#include <array>
#include <optional>
#include <tuple>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
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

void CountTlsFailure(RouterMetrics& metrics, const absl::Status& s) {
  if (absl::IsFailedPrecondition(s)) metrics.TlsHandshakeErrors("worker").Increment();
}

// What the upstream's steps use besides the exchange: the thread's pool, the metrics.
struct Wire {
  UpstreamPool& pool;
  RouterMetrics& metrics;
};

std::string_view BodyOf(const Exchange& ex, const UpstreamAttempt& attempt) {
  return attempt.body != nullptr ? std::string_view(*attempt.body) : ex.body;
}

}  // namespace

void AppendUpstreamHead(const Exchange& ex, const UpstreamAttempt& attempt, std::string* out) {
  const Worker& worker = *attempt.worker;
  const int dp_rank = attempt.dp_rank;
  const http1::RequestHead& h = ex.head;
  // string_view literals: StrAppend would measure a `const char*` with strlen, ~30 a request.
  using namespace std::string_view_literals;
  common::StrAppend(out, h.method_text, " "sv, h.path, h.query.empty() ? ""sv : "?"sv, h.query,
                    " HTTP/1.1\r\nhost: "sv, worker.authority(), "\r\n"sv);
  const bool rank = dp_rank >= 0 && worker.config().dp_size > 1;
  // A client's credentials stay here when kvgate checked them or has its own for workers.
  static const std::string kNoKey;
  const config::Config* cfg = ex.snapshot ? ex.snapshot->config.get() : nullptr;
  const std::string& worker_key = cfg != nullptr ? cfg->upstream.api_key : kNoKey;
  const bool drop_credentials =
      cfg != nullptr && (!cfg->auth.api_keys.empty() || !worker_key.empty());
  const auto forwarded = [&](const http1::Header& f) {
    if (drop_credentials && (http1::EqualsIgnoreCase(f.name, "authorization") ||
                             http1::EqualsIgnoreCase(f.name, "x-api-key"))) {
      return false;
    }
    return !(h.IsHopByHop(f.name) || http1::EqualsIgnoreCase(f.name, "host") ||
             http1::EqualsIgnoreCase(f.name, "content-length") ||
             http1::EqualsIgnoreCase(f.name, "x-request-id") ||
             (rank && http1::EqualsIgnoreCase(f.name, "x-data-parallel-rank")));
  };
  http1::AppendFieldLines(h.headers, forwarded, out);
  common::StrAppend(
      out, "x-request-id: "sv,
      attempt.request_id.empty() ? std::string_view(ex.request_id) : attempt.request_id, "\r\n"sv);
  if (!worker_key.empty()) common::StrAppend(out, "authorization: Bearer "sv, worker_key, "\r\n"sv);
  // vLLM's header: the rank whose cache precise mode matched (or that it spread onto).
  if (rank) common::StrAppend(out, "x-data-parallel-rank: "sv, dp_rank, "\r\n"sv);
  common::StrAppend(out, "content-length: "sv, BodyOf(ex, attempt).size(), "\r\n\r\n"sv);
}

namespace {

// The stale-connection rule Send and Fetch share. A pooled connection may have been closed by
// the worker meanwhile (servers drop idle keep-alives after a few seconds): a try on it that
// fails before any response byte arrived returns nullopt, and the request is tried once more on
// a fresh connection to the same worker; that is not the worker's fault. `one_try(conn)` gets
// the pooled connection, or null to open a new one. nullopt: the fresh try found its connection
// closed too.
template <typename R, typename OneTry>
net::awaitable<std::optional<R>> RetryStale(UpstreamPool& pool, const std::string& authority,
                                            OneTry one_try) {
  if (UpstreamConnectionPtr pooled = pool.TakeIdle(authority)) {
    std::optional<R> r = co_await one_try(std::move(pooled));
    if (r) co_return r;
  }
  co_return co_await one_try(nullptr);
}

AttemptResult Failed(AttemptOutcome outcome, std::string reason,
                     std::string_view metric_reason = {}) {
  AttemptResult r;
  r.outcome = outcome;
  r.reason = std::move(reason);
  r.metric_reason = metric_reason;
  return r;
}

// Opens a new connection for Send under the connect deadline, the link pointing at it while
// it connects. Null with `*failed` set when it could not.
net::awaitable<UpstreamConnectionPtr> ConnectForSend(const Wire& wire, const Exchange& ex,
                                                     Worker& worker, UpstreamLink& link,
                                                     AttemptResult* failed) {
  const config::Config& cfg = *ex.snapshot->config;
  ClientConnection& client = ex.conn;
  client.SetDeadline(DeadlineKind::kUpstream, milliseconds(cfg.upstream.connect_timeout_ms));
  auto connected =
      co_await wire.pool.Connect(worker.config().url, UpstreamTls(ex), link.connecting());
  const bool expired = client.deadline_expired;
  client.ClearDeadline();
  if (client.client_gone) {
    *failed =
        Failed(AttemptOutcome::kClientGone, "client disconnected while connecting to the worker");
    co_return nullptr;
  }
  if (!connected.ok()) {
    worker.RecordConnectionFailure(Clock::now(), cfg.circuit_breaker);
    CountTlsFailure(wire.metrics, connected.status());
    *failed =
        Failed(AttemptOutcome::kRetry,
               expired ? common::StrCat("connect to ", worker.authority(), " timed out after ",
                                        cfg.upstream.connect_timeout_ms, " ms")
                       : std::string(connected.status().message()),
               "connect_error");
    co_return nullptr;
  }
  co_return *std::move(connected);
}

// The worker's response head, as ReadResponseHead found it.
struct HeadRead {
  bool stale = false;                   // a pooled connection the worker had closed
  std::optional<AttemptResult> failed;  // the attempt ended here
  http1::ResponseHead head;
  std::string_view body_start;  // bytes after the head: in the scratch, the wait or `gathered`
};

// Parses the final response head in `data` (informational 1xx heads are dropped). False while
// incomplete; sets `out->failed` for a head that cannot be relayed.
bool ParseFinalHead(const Exchange& ex, const Worker& worker, std::string_view& data,
                    HeadRead* out) {
  for (;;) {
    const http1::ParseResult pr = http1::ParseResponseHead(
        data, ex.head.method, http1::ParseLimits{kMaxResponseHeadBytes, 256}, &out->head);
    if (pr.status == http1::ParseStatus::kIncomplete) return false;
    if (pr.status == http1::ParseStatus::kError || out->head.status == 101) {
      out->failed = Failed(AttemptOutcome::kBadResponse,
                           common::StrCat(worker.name(), " sent a malformed response: ",
                                          pr.status == http1::ParseStatus::kError
                                              ? pr.error
                                              : std::string("an unrequested protocol switch")));
      return true;
    }
    if (out->head.status >= 200) {
      out->body_start = data.substr(pr.head_bytes);
      return true;
    }
    data.remove_prefix(pr.head_bytes);
  }
}

// Reads the response head under the response deadline. It usually arrives whole in one read
// into the thread's scratch (or, when it had to be waited for, `wait`'s buffer) and is parsed
// there; a head split over reads is gathered in `gathered` first.
net::awaitable<HeadRead> ReadResponseHead(ThreadContext& tc, const Exchange& ex, Worker& worker,
                                          UpstreamConnection& conn, bool reused, ResponseWait& wait,
                                          std::string& gathered) {
  const config::Config& cfg = *ex.snapshot->config;
  ClientConnection& client = ex.conn;
  client.SetDeadline(DeadlineKind::kUpstream, milliseconds(cfg.upstream.response_timeout_ms));
  const net::mutable_buffer scratch(tc.scratch(), ThreadContext::kScratchBytes);
  bool use_gathered = false;
  std::string_view data;
  bool got_any = false;
  HeadRead out;
  for (;;) {
    error_code ec;
    size_t n = 0;
    const char* buf = tc.scratch();
    if (!wait.drained) n = conn.ReadSome(scratch, ec);
    if (wait.drained || ec == net::error::would_block || ec == net::error::try_again) {
      const net::mutable_buffer into = wait.buffer();
      std::tie(ec, n) = co_await conn.WaitAndRead(into);
      wait.drained = conn.Drained(ec, n, into.size());
      buf = static_cast<const char*>(into.data());
      if (client.client_gone) {
        out.failed =
            Failed(AttemptOutcome::kClientGone, "client disconnected while waiting for the worker");
      } else if (client.deadline_expired) {
        worker.RecordTimeout();
        out.failed = Failed(AttemptOutcome::kTimeout,
                            common::StrCat(worker.name(), " did not answer within ",
                                           cfg.upstream.response_timeout_ms, " ms"));
      }
      if (out.failed) co_return out;
      // The read's own errors (a pooled connection the worker closed: eof) are judged below.
    }
    if (ec) {
      if (reused && !got_any && IsRetryableRead(ec)) {
        out.stale = true;  // a keep-alive connection the worker had closed
        co_return out;
      }
      // Bytes that cannot begin an HTTP response: the worker speaks another protocol, and
      // another try would hear the same. (A head cut short is a worker that died: retried.)
      constexpr std::string_view kHttp = "HTTP/";
      if (got_any && !data.starts_with(kHttp) && !kHttp.starts_with(data)) {
        out.failed = Failed(AttemptOutcome::kBadResponse,
                            common::StrCat(worker.name(), " sent ", data.size(),
                                           " bytes that are not an HTTP response, then closed"));
        co_return out;
      }
      worker.RecordConnectionFailure(Clock::now(), cfg.circuit_breaker);
      out.failed = Failed(AttemptOutcome::kRetry,
                          common::StrCat("reading from ", worker.name(), ": ", ec.message()),
                          "upstream_reset");
      co_return out;
    }
    got_any = true;
    if (use_gathered) {
      gathered.append(buf, n);
      data = gathered;
    } else {
      data = std::string_view(buf, n);
    }
    if (ParseFinalHead(ex, worker, data, &out)) co_return out;
    // A partial head leaves the scratch before the next read reuses it.
    if (!use_gathered) {
      gathered.assign(data.data(), data.size());
      use_gathered = true;
    } else {
      gathered.erase(0, gathered.size() - data.size());
    }
    data = gathered;
  }
}

bool IsEventStream(const http1::ResponseHead& head) {
  const std::string_view type = head.Find("content-type");
  const absl::string_view value(type.data(), type.size());
  return absl::StartsWithIgnoreCase(absl::StripLeadingAsciiWhitespace(value), "text/event-stream");
}

// Relays the response whose head arrived to the client, and puts the connection back in the
// pool when the worker can take another request on it.
net::awaitable<AttemptResult> RelayToClient(const Wire& wire, ThreadContext& tc, Exchange& ex,
                                            Worker& worker, UpstreamConnectionPtr conn,
                                            const HeadRead& h, ResponseWait& wait,
                                            Clock::time_point sent_at, Reservation* reservation) {
  const config::Config& cfg = *ex.snapshot->config;
  AttemptResult result;
  result.ttfb_seconds = std::chrono::duration<double>(Clock::now() - sent_at).count();
  UsageScanner usage(ScannerDialect(ex.endpoint), ex.endpoint == EndpointLabel::kResponses);
  ex.worker = worker.name();
  ex.worker_id = worker.id();
  // vLLM and SGLang send a stream's head before the prefill and its first event with the first
  // token: that event times the prefill. A whole answer's body comes after its decode too.
  // (Read before the relay: the head's views may point into the scratch it reuses.)
  const bool event_stream = IsEventStream(h.head);
  const RelayResult relay = co_await RelayResponse(tc, ex, *conn, h.head, h.body_start, wait, usage,
                                                   PrefillRelease{&worker, reservation});
  if (relay.first_payload && event_stream) {
    result.ttft_seconds = std::chrono::duration<double>(*relay.first_payload - sent_at).count();
    if (ex.read_done != Clock::time_point{}) {
      result.ttft_since_read_seconds =
          std::chrono::duration<double>(*relay.first_payload - ex.read_done).count();
    }
  }
  result.cached_tokens = usage.cached_tokens();
  result.prompt_tokens = usage.prompt_tokens();
  result.output_tokens = usage.output_tokens();
  result.response_id = usage.response_id();
  if (!relay.sent_head && !relay.client_gone) {
    result.outcome = AttemptOutcome::kBadResponse;
    result.reason = common::StrCat(worker.name(), " sent a malformed response: ", relay.error);
    co_return result;
  }
  if (relay.complete && relay.reusable) {
    conn->authority = worker.authority();
    wire.pool.PutIdle(std::move(conn), cfg.upstream.max_idle_per_worker);
  } else {
    error_code ignored;
    conn->socket.close(ignored);
  }
  if (relay.client_gone || ex.conn.client_gone) {
    result.outcome = AttemptOutcome::kClientGone;
    result.reason = "client disconnected during the response";
    co_return result;
  }
  if (!relay.complete) {
    // A response cut short cannot be completed or retried: closing the client connection
    // is the only honest signal (chunked framing then lacks its last chunk).
    spdlog::warn("request {}: the response from {} broke off after {} bytes: {}", ex.request_id,
                 worker.name(), ex.response.bytes_sent(), relay.error);
    RecordBrokenRelay(ex);
    error_code ignored;
    ex.conn.socket.close(ignored);
  }
  result.outcome = AttemptOutcome::kRelayed;
  co_return result;
}

constexpr size_t kYieldBelowBodyBytes = 64 * 1024;

// One try of Send on `conn` (null: a new connection). nullopt: `conn` was a pooled connection
// the worker had closed.
net::awaitable<std::optional<AttemptResult>> SendOnce(const Wire& wire, ThreadContext& tc,
                                                      Exchange& ex, const UpstreamAttempt& attempt,
                                                      UpstreamConnectionPtr conn) {
  Worker& worker = *attempt.worker;
  const config::Config& cfg = *ex.snapshot->config;
  ClientConnection& client = ex.conn;
  UpstreamLink link(client, UpstreamLink::Role::kMain);  // cleared on every way out
  const bool reused = conn != nullptr;
  if (!reused) {
    AttemptResult failed;
    conn = co_await ConnectForSend(wire, ex, worker, link, &failed);
    if (conn == nullptr) co_return failed;
  }
  link.Set(&conn->socket);

  static thread_local std::string head;
  head.clear();
  AppendUpstreamHead(ex, attempt, &head);
  if (!ex.overhead_recorded) {
    ex.overhead_recorded = true;
    tc.OverheadSeries().Observe(std::chrono::duration<double>(Clock::now() - ex.read_done).count());
  }
  client.SetDeadline(DeadlineKind::kUpstream,
                     milliseconds(cfg.upstream.connect_timeout_ms + cfg.limits.write_timeout_ms));
  const error_code wec = co_await WriteUpstream(*conn, head, BodyOf(ex, attempt));
  if (wec) {
    client.ClearDeadline();
    error_code ignored;
    conn->socket.close(ignored);
    if (client.client_gone) {
      co_return Failed(AttemptOutcome::kClientGone,
                       "client disconnected while sending to the worker");
    }
    if (reused) co_return std::nullopt;
    worker.RecordConnectionFailure(Clock::now(), cfg.circuit_breaker);
    co_return Failed(AttemptOutcome::kRetry,
                     common::StrCat("writing to ", worker.name(), ": ", wec.message()),
                     "connect_error");
  }
  const auto sent_at = Clock::now();
  if (attempt.on_sent != nullptr) (*attempt.on_sent)();
  // For a small request the other ready handlers run while the worker answers: its answer is
  // then usually there when read, and sends to the workers go out together (see RunSession;
  // 4 KiB: +9-46% req/s). Not after a large body: the handlers run in between parse other
  // large bodies, and 400 KB requests lost 3-17% req/s with it.
  if (BodyOf(ex, attempt).size() <= kYieldBelowBodyBytes) {
    co_await net::post(tc.ioc, net::use_awaitable);
  }

  std::string gathered;
  ResponseWait wait;  // outlives the relay: the head and the body's first bytes may be in it
  const HeadRead h = co_await ReadResponseHead(tc, ex, worker, *conn, reused, wait, gathered);
  if (h.failed) co_return *h.failed;
  if (h.stale) {
    error_code ignored;
    conn->socket.close(ignored);
    co_return std::nullopt;
  }
  client.ClearDeadline();
  worker.RecordSuccess();  // it answered: even a 5xx is not a connection failure
  if (h.head.status >= 500 && !attempt.last) {
    // The connection is dropped, not drained.
    co_return Failed(AttemptOutcome::kRetry,
                     common::StrCat(worker.name(), " answered ", h.head.status), "status_5xx");
  }
  co_return co_await RelayToClient(wire, tc, ex, worker, std::move(conn), h, wait, sent_at,
                                   attempt.reservation);
}

}  // namespace

net::awaitable<AttemptResult> Http1Upstream::Send(ThreadContext& tc, Exchange& ex,
                                                  const UpstreamAttempt& attempt) {
  const Wire wire{pool_, metrics_};
  std::optional<AttemptResult> r = co_await RetryStale<AttemptResult>(
      pool_, attempt.worker->authority(),
      [&](UpstreamConnectionPtr conn) { return SendOnce(wire, tc, ex, attempt, std::move(conn)); });
  if (r) co_return *std::move(r);
  co_return Failed(AttemptOutcome::kRetry,
                   common::StrCat(attempt.worker->name(), " closed the connection twice"),
                   "upstream_reset");
}

namespace {

// What the fetch's deadline timer shares with the coroutine: the handler may run after the
// fetch returned, so it reads only this.
struct FetchDeadline {
  bool expired = false;
  bool done = false;
  FetchControl* control = nullptr;
};

// One fetch, across its tries.
struct FetchRun {
  Wire wire;
  const Exchange& ex;
  const UpstreamAttempt& attempt;
  milliseconds timeout;
  uint64_t max_body_bytes;
  FetchControl& control;
  const FetchDeadline& deadline;
  Clock::time_point start;
  std::string head;  // the request head, the same for each try

  // Why the fetch stopped waiting, when it was not the worker's doing (then in `result`).
  bool Interrupted(FetchResult& result) const {
    if (deadline.expired) {
      result.timed_out = true;
      result.reason =
          common::StrCat(attempt.worker->name(), " did not answer within ", timeout.count(), " ms");
      return true;
    }
    if (control.cancelled || (ex.conn.client_gone && !control.outlive_client)) {
      result.cancelled = true;
      result.reason = control.cancelled ? "cancelled" : "the client disconnected";
      return true;
    }
    return false;
  }
};

// Points the control (and, unless the fetch outlives its client, the client connection's side
// link) at the socket a try holds; both are cleared when the try ends.
class FetchExposure {
 public:
  FetchExposure(ClientConnection& client, FetchControl& control)
      : link_(control.outlive_client ? UpstreamLink()
                                     : UpstreamLink(client, UpstreamLink::Role::kSide)),
        control_(control) {}
  ~FetchExposure() { control_.socket = nullptr; }
  FetchExposure(const FetchExposure&) = delete;
  FetchExposure& operator=(const FetchExposure&) = delete;
  void Set(tcp::socket* socket) {
    link_.Set(socket);
    control_.socket = socket;
  }

 private:
  UpstreamLink link_;
  FetchControl& control_;
};

// How a fetch's response read ended.
struct BodyRead {
  bool stale = false;     // a pooled connection the worker had closed
  bool complete = false;  // head and body arrived (else `result` says why not)
  bool reusable = false;  // the connection may carry another request
};

// Reads the head, then the body into `result.body`, within the fetch's limits.
net::awaitable<BodyRead> ReadWholeResponse(FetchRun& run, UpstreamConnection& conn, bool reused,
                                           FetchResult& result) {
  Worker& worker = *run.attempt.worker;
  const config::Config& cfg = *run.ex.snapshot->config;
  std::string in;  // head, then body bytes not yet framed
  char buf[16 * 1024];
  bool keep_alive = false;
  std::optional<http1::BodyFraming> framing;
  bool got_any = false;
  bool drained = false;  // the last waited read came back short
  BodyRead out;
  for (;;) {
    error_code ec;
    size_t n = 0;
    if (!drained) n = conn.ReadSome(net::buffer(buf), ec);
    if (drained || ec == net::error::would_block || ec == net::error::try_again) {
      std::tie(ec, n) = co_await conn.WaitAndRead(net::buffer(buf));
      drained = conn.Drained(ec, n, sizeof(buf));
      if (run.Interrupted(result)) co_return out;
    }
    if (ec == net::error::eof && framing && framing->OnEof() == http1::BodyFraming::Status::kDone) {
      break;
    }
    if (ec) {
      if (reused && !got_any && IsRetryableRead(ec)) {
        out.stale = true;
        co_return out;
      }
      worker.RecordConnectionFailure(Clock::now(), cfg.circuit_breaker);
      result.reason = common::StrCat("reading from ", worker.name(), ": ", ec.message());
      co_return out;
    }
    got_any = true;
    in.append(buf, n);
    if (!framing) {
      http1::ResponseHead response;
      const http1::ParseResult pr = http1::ParseResponseHead(
          in, run.ex.head.method, http1::ParseLimits{kMaxResponseHeadBytes, 256}, &response);
      if (pr.status == http1::ParseStatus::kIncomplete) continue;
      if (pr.status == http1::ParseStatus::kError) {
        result.reason = common::StrCat(worker.name(), " sent a malformed response: ", pr.error);
        co_return out;
      }
      in.erase(0, pr.head_bytes);
      if (response.status < 200) continue;  // 100 Continue, 103 Early Hints: the next counts
      result.status = response.status;
      keep_alive = response.keep_alive;
      framing.emplace(response.body, response.content_length);
    }
    size_t consumed = 0;
    const auto fs = framing->Feed(in, &consumed,
                                  [&](std::string_view payload) { result.body.append(payload); });
    in.erase(0, consumed);
    if (fs == http1::BodyFraming::Status::kError) {
      result.reason =
          common::StrCat(worker.name(), " sent a malformed response body: ", framing->error());
      co_return out;
    }
    if (result.body.size() > run.max_body_bytes) {
      result.reason = common::StrCat(worker.name(), "'s response is larger than ",
                                     run.max_body_bytes, " bytes");
      co_return out;
    }
    if (fs == http1::BodyFraming::Status::kDone) break;
  }
  out.complete = true;
  out.reusable = keep_alive && in.empty() && framing->kind() != http1::BodyKind::kUntilClose;
  co_return out;
}

// One try of Fetch on `conn` (null: a new connection). nullopt: `conn` was a pooled
// connection the worker had closed.
net::awaitable<std::optional<FetchResult>> FetchOnce(FetchRun& run, UpstreamConnectionPtr conn) {
  Worker& worker = *run.attempt.worker;
  const config::Config& cfg = *run.ex.snapshot->config;
  FetchResult result;
  if (run.Interrupted(result)) co_return result;
  const bool reused = conn != nullptr;
  if (!reused) {
    auto connected = co_await run.wire.pool.Connect(worker.config().url, UpstreamTls(run.ex));
    if (run.Interrupted(result)) co_return result;
    if (!connected.ok()) {
      worker.RecordConnectionFailure(Clock::now(), cfg.circuit_breaker);
      CountTlsFailure(run.wire.metrics, connected.status());
      result.reason = std::string(connected.status().message());
      co_return result;
    }
    conn = *std::move(connected);
  }
  FetchExposure exposure(run.ex.conn, run.control);
  exposure.Set(&conn->socket);
  const error_code wec = co_await WriteUpstream(*conn, run.head, BodyOf(run.ex, run.attempt));
  if (run.Interrupted(result)) co_return result;
  if (wec) {
    if (reused) co_return std::nullopt;
    worker.RecordConnectionFailure(Clock::now(), cfg.circuit_breaker);
    result.reason = common::StrCat("writing to ", worker.name(), ": ", wec.message());
    co_return result;
  }
  const BodyRead read = co_await ReadWholeResponse(run, *conn, reused, result);
  if (read.stale) {
    error_code ignored;
    conn->socket.close(ignored);
    co_return std::nullopt;
  }
  if (!read.complete) co_return result;
  worker.RecordSuccess();
  result.answered = true;
  result.seconds = std::chrono::duration<double>(Clock::now() - run.start).count();
  if (read.reusable) {
    exposure.Set(nullptr);
    conn->authority = worker.authority();
    run.wire.pool.PutIdle(std::move(conn), cfg.upstream.max_idle_per_worker);
  }
  co_return result;
}

}  // namespace

net::awaitable<FetchResult> Http1Upstream::Fetch(ThreadContext&, const Exchange& ex,
                                                 const UpstreamAttempt& attempt,
                                                 milliseconds timeout, uint64_t max_body_bytes,
                                                 FetchControl& control) {
  auto deadline = std::make_shared<FetchDeadline>();
  deadline->control = &control;
  net::steady_timer timer(co_await net::this_coro::executor);
  timer.expires_after(timeout);
  timer.async_wait([deadline](const error_code& ec) {
    if (ec || deadline->done) return;
    deadline->expired = true;
    deadline->control->Cancel();
  });
  absl::Cleanup finish = [&] {
    deadline->done = true;
    timer.cancel();
  };
  FetchRun run{Wire{pool_, metrics_}, ex, attempt, timeout, max_body_bytes, control, *deadline,
               Clock::now(),          {}};
  AppendUpstreamHead(ex, attempt, &run.head);
  std::optional<FetchResult> r = co_await RetryStale<FetchResult>(
      pool_, attempt.worker->authority(),
      [&](UpstreamConnectionPtr conn) { return FetchOnce(run, std::move(conn)); });
  if (r) co_return *std::move(r);
  FetchResult twice;
  twice.reason = common::StrCat(attempt.worker->name(), " closed the connection twice");
  co_return twice;
}

}  // namespace kvgate::router
