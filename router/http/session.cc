#include "router/http/session.h"

#include <random>

#include "common/strings.h"
#include "net/body_framing.h"
#include "router/http/response_writer.h"
#include "router/http/route_table.h"
#include "router/http/thread_context.h"

namespace kvgate::router {
namespace {

using std::chrono::milliseconds;

// simdjson reads up to this many bytes past a body; the buffer keeps them readable so that
// the body is parsed where it lies.
constexpr size_t kBodyPadding = 64;
constexpr size_t kMaxRequestIdBytes = 256;

std::string NewRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(32, '0');
  const uint64_t a = rng();
  const uint64_t b = rng();
  for (int i = 0; i < 16; ++i) {
    id[i] = kHex[(a >> (i * 4)) & 0xf];
    id[16 + i] = kHex[(b >> (i * 4)) & 0xf];
  }
  return id;
}

enum class ReadResult {
  kRequest,   // a complete request is in the exchange
  kClosed,    // the client went away (or idled out) between requests: nothing to answer
  kAnswered,  // the request was refused and answered; the connection closes
};

std::string_view ErrorCode(int status) {
  switch (status) {
    case 408:
      return "request_timeout";
    case 413:
      return "body_too_large";
    case 431:
      return "header_too_large";
    case 501:
      return "not_implemented";
    case 505:
      return "http_version_not_supported";
    default:
      return "bad_request";
  }
}

// Answers a request the session cannot accept and closes the connection; `linger` when the
// client may still be sending bytes of it.
net::awaitable<ReadResult> Refuse(ThreadContext& tc, Exchange& ex, int status,
                                  std::string_view message, bool linger) {
  if (ex.request_id.empty()) ex.request_id = NewRequestId();
  CloseAfterResponse(ex);
  co_await WriteError(tc, ex, status, message, "invalid_request_error", ErrorCode(status));
  if (linger) co_await LingeringClose(tc, ex.conn);
  co_return ReadResult::kAnswered;
}

// Reads the rest of a Content-Length body into the connection's buffer.
net::awaitable<error_code> ReadLengthBody(ThreadContext& tc, ClientConnection& conn, size_t need) {
  if (conn.in.size() < need) {
    const size_t missing = need - conn.in.size() + kBodyPadding;
    conn.in.Prepare(missing, missing, tc.buffers);  // one allocation for the whole body
  }
  while (conn.in.size() < need) {
    if (auto ec = co_await ReadMore(tc, conn, need - conn.in.size()); ec) co_return ec;
  }
  co_return error_code{};
}

// Reads the rest of a request whose first bytes are in `conn.in`.
net::awaitable<ReadResult> ReadRequest(ThreadContext& tc, ClientConnection& conn, Exchange& ex) {
  // Copies: the config may be replaced while this waits.
  const config::LimitsConfig limits = tc.config().limits;
  const http1::ParseLimits parse_limits{.max_head_bytes = limits.max_header_bytes,
                                        .max_headers = 128};
  // Once its first byte arrived, the whole request must come within the read timeout: a head
  // that trickles in is not given the idle timeout again and again.
  tc.MarkBusy(conn);
  conn.SetDeadline(DeadlineKind::kClientRead, milliseconds(limits.read_timeout_ms));
  http1::ParseResult head;
  for (;;) {
    head = http1::ParseRequestHead(conn.in.data(), parse_limits, &ex.head);
    if (head.status == http1::ParseStatus::kComplete) break;
    if (head.status == http1::ParseStatus::kError) {
      ex.endpoint = EndpointLabelOf(ex.head.path);
      co_return co_await Refuse(tc, ex, head.error_status,
                                common::StrCat("malformed HTTP request: ", head.error),
                                head.error_status != 505);
    }
    const error_code ec = co_await ReadMore(tc, conn, limits.max_header_bytes + 1);
    if (ec) {
      if (conn.deadline_expired) {
        ex.endpoint = EndpointLabelOf(ex.head.path);  // the request line may have arrived
        co_return co_await Refuse(tc, ex, 408, "timed out reading the request header", false);
      }
      co_return ReadResult::kClosed;  // the client gave up on its request
    }
  }
  ex.snapshot = tc.Lease();
  StartResponse(ex);
  ex.endpoint = EndpointLabelOf(ex.head.path);
  const std::string_view id = ex.head.Find("x-request-id");
  ex.request_id = !id.empty() && id.size() <= kMaxRequestIdBytes ? std::string(id) : NewRequestId();
  const size_t head_bytes = head.head_bytes;
  const uint64_t head_generation = conn.in.generation();

  // The body.
  const bool continue_needed = ex.head.expect_continue && conn.in.size() == head_bytes;
  if (continue_needed && ex.head.body != http1::BodyKind::kNone) {
    static constexpr std::string_view k100 = "HTTP/1.1 100 Continue\r\n\r\n";
    const net::const_buffer b[] = {net::buffer(k100)};
    const auto read_deadline = conn.deadline;
    if (co_await WriteAll(conn, b, milliseconds(limits.write_timeout_ms))) {
      co_return ReadResult::kClosed;
    }
    // A write that had to wait replaced the request's deadline: the body still owes it.
    conn.deadline = read_deadline;
    conn.deadline_kind = DeadlineKind::kClientRead;
  }
  switch (ex.head.body) {
    case http1::BodyKind::kNone:
    case http1::BodyKind::kUntilClose:
      ex.request_bytes = head_bytes;
      break;
    case http1::BodyKind::kLength: {
      const uint64_t length = ex.head.content_length;
      if (length > limits.max_body_bytes) {
        co_return co_await Refuse(
            tc, ex, 413,
            common::StrCat("request body of ", length, " bytes exceeds the limit of ",
                           limits.max_body_bytes, " bytes"),
            true);
      }
      const error_code ec = co_await ReadLengthBody(tc, conn, head_bytes + length);
      if (ec) {
        if (conn.deadline_expired) {
          co_return co_await Refuse(tc, ex, 408, "timed out reading the request body", false);
        }
        co_return ReadResult::kClosed;
      }
      ex.request_bytes = head_bytes + length;
      break;
    }
    case http1::BodyKind::kChunked: {
      http1::BodyFraming framing(http1::BodyKind::kChunked, 0);
      size_t fed = head_bytes;
      bool over = false;
      for (;;) {
        if (fed < conn.in.size()) {
          size_t consumed = 0;
          const auto status =
              framing.Feed(conn.in.data().substr(fed), &consumed, [&](std::string_view d) {
                if (ex.body_storage.size() + d.size() > limits.max_body_bytes) {
                  over = true;
                } else {
                  ex.body_storage.append(d);
                }
              });
          fed += consumed;
          if (over) {
            co_return co_await Refuse(tc, ex, 413,
                                      common::StrCat("request body exceeds the limit of ",
                                                     limits.max_body_bytes, " bytes"),
                                      true);
          }
          if (status == http1::BodyFraming::Status::kError) {
            co_return co_await Refuse(
                tc, ex, 400, common::StrCat("malformed chunked request body: ", framing.error()),
                true);
          }
          if (status == http1::BodyFraming::Status::kDone) break;
        }
        const error_code ec = co_await ReadMore(tc, conn, 64 * 1024);
        if (ec) {
          if (conn.deadline_expired) {
            co_return co_await Refuse(tc, ex, 408, "timed out reading the request body", false);
          }
          co_return ReadResult::kClosed;
        }
      }
      ex.request_bytes = fed;
      break;
    }
  }
  if (conn.in.generation() != head_generation) {
    // The buffer grew or moved for the body: the head's views must point into it again.
    http1::ParseRequestHead(conn.in.data(), parse_limits, &ex.head);
  }
  if (ex.head.body == http1::BodyKind::kChunked) {
    ex.body_storage.reserve(ex.body_storage.size() + kBodyPadding);
    ex.body = ex.body_storage;
    ex.body_capacity = ex.body_storage.capacity();
  } else {
    ex.body = conn.in.data().substr(head_bytes, ex.request_bytes - head_bytes);
    ex.body_capacity = conn.in.size() - head_bytes + conn.in.spare();
  }
  conn.ClearDeadline();
  ex.read_done = SteadyClock::now();
  co_return ReadResult::kRequest;
}

}  // namespace

void RecordExchange(ThreadContext& tc, const Exchange& ex) {
  const auto now = SteadyClock::now();
  const double e2e = ex.read_done == SteadyClock::time_point{}
                         ? 0.0
                         : std::chrono::duration<double>(now - ex.read_done).count();
  tc.RequestSeries(ex.endpoint, ex.response.status(), ex.worker_id, ex.worker).Increment();
  tc.DurationSeries(ex.endpoint).Observe(e2e);
  if (!ex.api_key.empty()) {
    // /metrics is open to whoever reaches it: a key's name (often its owner's) only when asked.
    static const std::string kRedacted = "redacted";
    const bool named = ex.snapshot ? ex.snapshot->config->auth.key_names_in_metrics
                                   : tc.config().auth.key_names_in_metrics;
    tc.ApiKeySeries(named ? ex.api_key : kRedacted, ex.response.status()).Increment();
  }
  if (tc.access_log().enabled()) {
    AccessRecord r;
    r.request_id = ex.request_id;
    r.method = ex.head.method_text;
    r.path = ex.head.target;
    r.model = ex.model;
    r.worker = ex.worker;
    r.api_key = ex.api_key;
    r.status = ex.response.status();
    r.bytes_sent = ex.response.bytes_sent();
    r.ttfb_seconds = ex.ttfb_seconds;
    r.e2e_seconds = e2e;
    r.attempts = ex.attempts;
    r.cached_tokens = ex.cached_tokens;
    r.prompt_tokens = ex.prompt_tokens;
    r.response_id = ex.response_id;
    r.api = EndpointLabelApi(ex.endpoint);
    r.traceparent = ex.head.Find("traceparent");
    tc.access_log().Write(r);
  }
}

namespace {

// One request on the connection, from its first byte to its recorded end. Its state lives in
// this coroutine's frame, which exists only while a request is served: an idle connection
// holds none of it. @return whether the connection stays open.
net::awaitable<bool> ServeOne(ThreadContext& tc, const RouteTable& routes, ClientConnection& conn) {
  Exchange ex(conn);
  const ReadResult r = co_await ReadRequest(tc, conn, ex);
  if (r == ReadResult::kClosed) co_return false;
  if (r == ReadResult::kRequest) co_await routes.Serve(tc, ex);
  RecordExchange(tc, ex);
  if (!ex.response.keep_alive() || !conn.socket.is_open()) co_return false;
  conn.in.Consume(ex.request_bytes, tc.buffers);
  co_return true;
}

// The connection is done: closed, its place in the table given back.
void EndSession(ThreadContext& tc, ClientConnection& conn) {
  tc.MarkBusy(conn);
  CloseConnection(conn);
  conn.in.Release(tc.buffers);
  tc.ReleasePlace(conn);
}

}  // namespace

void ParkSession(ThreadContext& tc, const RouteTable& routes, ClientConnectionPtr conn) {
  ClientConnection& c = *conn;
  c.socket.async_wait(
      ReadinessWait(c), [&tc, &routes, conn = std::move(conn)](const error_code& ec) mutable {
        if (ec) {  // idle timeout, drain, reaped for a new connection
          EndSession(tc, *conn);
          tc.connections.erase(conn);
          return;
        }
        net::co_spawn(tc.ioc, RunSession(tc, routes, std::move(conn)), net::detached);
      });
}

net::awaitable<void> RunSession(ThreadContext& tc, const RouteTable& routes,
                                ClientConnectionPtr conn) {
  bool open = !conn->tls_context || co_await Handshake(tc, *conn);
  for (bool served = false; open && !conn->reaped; served = true) {
    if (conn->in.empty()) {
      // Between requests: wait for the next one's first byte, holding no buffer.
      if (tc.draining()) break;
      if (served) {
        // The handlers already ready run before this connection reads its next request. Read
        // at once, a client that sent it while the answer was written kept this connection
        // looping while the others waited: gateway, worker and client took turns on one
        // request at a time, each send waking a sleeper (0.7 context switches a request
        // against HAProxy's 0.03).
        co_await net::post(tc.ioc, net::use_awaitable);
        if (conn->reaped || tc.draining()) break;
      }
      tc.MarkIdle(*conn);
      // A connection on the probe reserve is there for one probe, which comes at once: it
      // may not sit on the reserve for the idle timeout.
      const config::LimitsConfig& limits = tc.config().limits;
      conn->SetDeadline(
          DeadlineKind::kIdle,
          milliseconds(conn->reserve ? std::min(limits.idle_timeout_ms, limits.read_timeout_ms)
                                     : limits.idle_timeout_ms));
      const error_code ec = ReadAvailable(tc, *conn, 16 * 1024);
      if (ec == net::error::would_block) {
        ParkSession(tc, routes, std::move(conn));
        co_return;
      }
      if (ec) break;  // EOF, reset, idle timeout, reaped for a new connection
    }
    open = co_await ServeOne(tc, routes, *conn);
  }
  EndSession(tc, *conn);
  tc.connections.erase(conn);
}

}  // namespace kvgate::router
