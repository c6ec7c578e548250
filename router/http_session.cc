// Client side of the gateway: reads requests with limits and timeouts, answers local endpoints
// (/health, /ready, /metrics, /v1/models) and hands OpenAI calls to the proxy.
#include <random>

#include "common/json_util.h"
#include "common/strings.h"
#include "router/admin.h"
#include "router/internal/thread_context.h"
#include "router/request_info.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {
namespace {

using namespace std::chrono_literals;

std::string NewRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(32, '0');
  uint64_t a = rng();
  uint64_t b = rng();
  for (int i = 0; i < 16; ++i) {
    id[i] = kHex[(a >> (i * 4)) & 0xf];
    id[16 + i] = kHex[(b >> (i * 4)) & 0xf];
  }
  return id;
}

// Bounded label values: known OpenAI paths keep their name, everything else is "other".
std::string EndpointLabel(std::string_view path) {
  static constexpr std::string_view kKnown[] = {
      "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/v1/tokenize",
      "/v1/detokenize",       "/v1/responses",   "/health",        "/ready",     "/metrics"};
  for (std::string_view k : kKnown) {
    if (path == k) return std::string(k);
  }
  if (path.starts_with("/v1/")) return "/v1/other";
  return "other";
}

std::string_view PathOf(std::string_view target) {
  const size_t q = target.find('?');
  return q == std::string_view::npos ? target : target.substr(0, q);
}

// After an error that leaves unread request bytes (oversized body, bad framing), stop sending
// and discard what the client still sends for a short while, so that it reads our response
// instead of a connection reset.
net::awaitable<void> LingeringClose(ClientConnection& conn) {
  beast::error_code ec;
  conn.stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  char sink[16384];
  size_t total = 0;
  conn.stream.expires_after(1s);
  while (total < (64u << 20)) {
    auto [rec, n] = co_await conn.stream.async_read_some(net::buffer(sink), kNoThrow);
    if (rec) break;
    total += n;
  }
  conn.stream.socket().close(ec);
}

void Finish(ThreadContext& tc, const http::request<http::string_body>& req, RequestContext& rc) {
  const double e2e =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - rc.read_done).count();
  tc.RequestCounter(rc.endpoint, rc.status, rc.worker).Increment();
  tc.Duration(rc.endpoint).Observe(e2e);
  if (tc.state.access_log.enabled()) {
    AccessRecord r;
    r.request_id = rc.request_id;
    r.method = req.method_string();
    r.path = req.target();
    r.model = rc.model;
    r.worker = rc.worker;
    r.status = rc.status;
    r.bytes_sent = rc.bytes_sent;
    r.ttfb_seconds = rc.ttfb_seconds;
    r.e2e_seconds = e2e;
    r.attempts = rc.attempts;
    r.cached_tokens = rc.cached_tokens;
    tc.state.access_log.Write(r);
  }
}

// /admin/*: on the admin listener when one is configured (else on the main one), behind the
// bearer token when one is set.
net::awaitable<void> HandleAdmin(ThreadContext& tc, ClientConnection& conn,
                                 http::request<http::string_body>& req, RequestContext& rc,
                                 std::string_view path) {
  const auto& cfg = tc.config();
  if (!cfg->admin.token.empty()) {
    auto auth = req.find(http::field::authorization);
    if (auth == req.end() || auth->value() != "Bearer " + cfg->admin.token) {
      co_await WriteError(conn, rc, http::status::unauthorized, "admin token required",
                          "authentication_error", "invalid_admin_token");
      co_return;
    }
  }
  const bool get = req.method() == http::verb::get;
  const bool post = req.method() == http::verb::post;
  if (path == "/admin/workers" && get) {
    const std::string_view target = req.target();
    const bool block_ids = target.find("blocks=1") != std::string_view::npos;
    co_await WriteResponse(conn, rc, http::status::ok, "application/json",
                           WorkersJson(tc.state, block_ids));
  } else if (path == "/admin/explain" && post) {
    std::string target = "/v1/chat/completions";
    if (auto it = req.find("x-kvgate-endpoint"); it != req.end()) target = std::string(it->value());
    std::string session;
    if (auto sid = req.find("x-session-id"); sid != req.end()) session = std::string(sid->value());
    auto json = ExplainJson(tc.state, req.body(), target, session);
    if (json.ok()) {
      co_await WriteResponse(conn, rc, http::status::ok, "application/json", *std::move(json));
    } else {
      const auto code = json.status().code();
      co_await WriteError(conn, rc,
                          code == absl::StatusCode::kNotFound ? http::status::not_found
                          : code == absl::StatusCode::kUnavailable
                              ? http::status::service_unavailable
                              : http::status::bad_request,
                          json.status().message(), "invalid_request_error", "explain_failed");
    }
  } else if (path == "/admin/workers" || path == "/admin/explain") {
    co_await WriteError(conn, rc, http::status::method_not_allowed,
                        common::StrCat("method not allowed on ", path), "invalid_request_error",
                        "method_not_allowed");
  } else {
    co_await WriteError(conn, rc, http::status::not_found, common::StrCat("no route for ", path),
                        "invalid_request_error", "not_found");
  }
}

net::awaitable<void> HandleRequest(ThreadContext& tc, const std::shared_ptr<ClientConnection>& conn,
                                   http::request<http::string_body>& req, RequestContext& rc) {
  const std::string_view path = PathOf(req.target());
  const bool get = req.method() == http::verb::get || req.method() == http::verb::head;
  const bool post = req.method() == http::verb::post;
  const bool separate_admin = !tc.config()->admin.listen.empty();
  if (path.starts_with("/admin/") && conn->admin_listener == separate_admin) {
    co_await HandleAdmin(tc, *conn, req, rc, path);
    co_return;
  }
  if (conn->admin_listener && path != "/health" && path != "/metrics") {
    co_await WriteError(*conn, rc, http::status::not_found,
                        common::StrCat("the admin listener serves /admin/*, /health and /metrics"),
                        "invalid_request_error", "not_found");
    co_return;
  }

  if (path == "/health" && get) {
    co_await WriteResponse(*conn, rc, http::status::ok, "application/json", R"({"status":"ok"})");
  } else if (path == "/ready" && get) {
    if (tc.state.draining.load()) {
      co_await WriteError(*conn, rc, http::status::service_unavailable, "gateway is draining",
                          "service_unavailable", "draining");
    } else if (!tc.state.AnyWorkerAvailable()) {
      co_await WriteError(*conn, rc, http::status::service_unavailable,
                          "no healthy worker available", "service_unavailable",
                          "no_healthy_worker");
    } else {
      co_await WriteResponse(*conn, rc, http::status::ok, "application/json",
                             R"({"status":"ready"})");
    }
  } else if (path == "/metrics" && get) {
    co_await WriteResponse(*conn, rc, http::status::ok, "text/plain; version=0.0.4; charset=utf-8",
                           RouterMetrics::Serialize(tc.state.registry));
  } else if (path == "/v1/models" && get) {
    co_await WriteResponse(*conn, rc, http::status::ok, "application/json",
                           *tc.state.models_json());
  } else if (path.starts_with("/v1/") && post) {
    const bool openai_json = path == "/v1/chat/completions" || path == "/v1/completions";
    auto info = ParseRequestInfo(req.body());
    if (!info.ok() && openai_json) {
      co_await WriteError(*conn, rc, http::status::bad_request, info.status().message(),
                          "invalid_request_error", "invalid_json");
      co_return;
    }
    if (info.ok()) {
      rc.model = info->model;
      rc.session_key = info->user;
    }
    if (info.ok() && openai_json) {
      const auto& policies = tc.policies();
      rc.prompt = tc.state.planner.Prepare(req.body(), req.body().capacity(),
                                           path == "/v1/chat/completions", rc.model, *policies,
                                           tc.config()->routing);
    }
    if (auto sid = req.find("x-session-id"); sid != req.end()) {
      rc.session_key = std::string(sid->value());
    }
    co_await ProxyRequest(tc, conn, req, rc);
  } else if (path == "/health" || path == "/ready" || path == "/metrics" || path == "/v1/models" ||
             path.starts_with("/v1/")) {
    co_await WriteError(
        *conn, rc, http::status::method_not_allowed,
        common::StrCat("method ", std::string(req.method_string()), " is not allowed on ", path),
        "invalid_request_error", "method_not_allowed");
  } else {
    co_await WriteError(*conn, rc, http::status::not_found, common::StrCat("no route for ", path),
                        "invalid_request_error", "not_found");
  }
}

}  // namespace

prometheus::Counter& ThreadContext::RequestCounter(const std::string& endpoint, int code,
                                                   const std::string& worker) {
  std::string key = common::StrCat(endpoint, "|", code, "|", worker);
  auto it = counters_.find(key);
  if (it != counters_.end()) return *it->second;
  prometheus::Counter* c = &state.metrics.Requests(endpoint, code, worker);
  counters_.emplace(std::move(key), c);
  return *c;
}

prometheus::Histogram& ThreadContext::Duration(const std::string& endpoint) {
  auto it = durations_.find(endpoint);
  if (it != durations_.end()) return *it->second;
  prometheus::Histogram* h = &state.metrics.RequestDuration(endpoint);
  durations_.emplace(endpoint, h);
  return *h;
}

net::awaitable<bool> WriteResponse(ClientConnection& conn, RequestContext& rc, http::status status,
                                   std::string_view content_type, std::string body) {
  http::response<http::string_body> res{status, rc.version};
  res.set(http::field::server, "kvgate");
  res.set(http::field::content_type, content_type);
  res.set("x-request-id", rc.request_id);
  res.keep_alive(rc.keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  rc.status = static_cast<int>(status);
  rc.bytes_sent += res.body().size();
  const auto cfg = std::chrono::milliseconds(60'000);
  conn.stream.expires_after(cfg);
  auto [ec, n] = co_await http::async_write(conn.stream, res, kNoThrow);
  co_return !ec;
}

net::awaitable<bool> WriteError(ClientConnection& conn, RequestContext& rc, http::status status,
                                absl::string_view message, std::string_view type,
                                std::string_view code) {
  spdlog::info("request {}: {} {}", rc.request_id, static_cast<int>(status), message);
  co_return co_await WriteResponse(
      conn, rc, status, "application/json",
      common::OpenAiErrorBody(std::string_view(message.data(), message.size()), type, code));
}

net::awaitable<void> RunSession(ThreadContext& tc, std::shared_ptr<ClientConnection> conn) {
  GatewayState& state = tc.state;
  beast::error_code ec;
  conn->stream.socket().set_option(tcp::no_delay(true), ec);
  for (;;) {
    const config::ConfigConstSharedPtr cfg = tc.config();
    http::request_parser<http::string_body> parser;
    parser.header_limit(cfg->limits.max_header_bytes);
    parser.body_limit(cfg->limits.max_body_bytes);

    conn->idle = true;
    if (state.draining.load()) break;
    conn->stream.expires_after(std::chrono::milliseconds(cfg->limits.idle_timeout_ms));
    auto [hec, hn] = co_await http::async_read_header(conn->stream, conn->buffer, parser, kNoThrow);
    conn->idle = false;

    RequestContext rc;
    rc.read_done = std::chrono::steady_clock::now();
    rc.endpoint = "other";
    rc.keep_alive = false;
    if (hec) {
      if (hec == http::error::body_limit) {
        rc.request_id = NewRequestId();
        co_await WriteError(*conn, rc, http::status::payload_too_large,
                            common::StrCat("request body exceeds the limit of ",
                                           cfg->limits.max_body_bytes, " bytes"),
                            "invalid_request_error", "body_too_large");
        co_await LingeringClose(*conn);
      } else if (hec == http::error::header_limit) {
        rc.request_id = NewRequestId();
        co_await WriteError(
            *conn, rc, http::status::request_header_fields_too_large,
            common::StrCat("request header exceeds ", cfg->limits.max_header_bytes, " bytes"),
            "invalid_request_error", "header_too_large");
        co_await LingeringClose(*conn);
      } else if (hec.category() == http::make_error_code(http::error::bad_target).category() &&
                 hec != http::error::end_of_stream && hec != http::error::partial_message) {
        rc.request_id = NewRequestId();
        co_await WriteError(*conn, rc, http::status::bad_request,
                            common::StrCat("malformed HTTP request: ", hec.message()),
                            "invalid_request_error", "bad_request");
        co_await LingeringClose(*conn);
      }
      break;  // EOF, reset, idle timeout: just close
    }

    auto& header = parser.get();
    rc.version = header.version();
    rc.keep_alive = header.keep_alive();
    if (auto id = header.find("x-request-id");
        id != header.end() && !id->value().empty() && id->value().size() <= 256) {
      rc.request_id = std::string(id->value());
    } else {
      rc.request_id = NewRequestId();
    }
    rc.endpoint = EndpointLabel(PathOf(header.target()));

    if (parser.content_length() && *parser.content_length() > cfg->limits.max_body_bytes) {
      rc.keep_alive = false;
      co_await WriteError(
          *conn, rc, http::status::payload_too_large,
          common::StrCat("request body of ", *parser.content_length(),
                         " bytes exceeds the limit of ", cfg->limits.max_body_bytes, " bytes"),
          "invalid_request_error", "body_too_large");
      Finish(tc, header, rc);
      co_await LingeringClose(*conn);
      break;
    }
    if (auto expect = header.find(http::field::expect);
        expect != header.end() && beast::iequals(expect->value(), "100-continue")) {
      http::response<http::empty_body> cont{http::status::continue_, 11};
      conn->stream.expires_after(std::chrono::milliseconds(cfg->limits.write_timeout_ms));
      auto [cec, cn] = co_await http::async_write(conn->stream, cont, kNoThrow);
      if (cec) break;
    }
    if (!parser.is_done()) {
      conn->stream.expires_after(std::chrono::milliseconds(cfg->limits.read_timeout_ms));
      auto [bec, bn] = co_await http::async_read(conn->stream, conn->buffer, parser, kNoThrow);
      if (bec) {
        if (bec == http::error::body_limit) {
          rc.keep_alive = false;
          co_await WriteError(*conn, rc, http::status::payload_too_large,
                              common::StrCat("request body exceeds the limit of ",
                                             cfg->limits.max_body_bytes, " bytes"),
                              "invalid_request_error", "body_too_large");
          Finish(tc, header, rc);
          co_await LingeringClose(*conn);
        } else if (bec == beast::error::timeout) {
          rc.keep_alive = false;
          co_await WriteError(*conn, rc, http::status::request_timeout,
                              "timed out reading the request body", "invalid_request_error",
                              "request_timeout");
        }
        break;
      }
    }
    rc.read_done = std::chrono::steady_clock::now();
    http::request<http::string_body> req = parser.release();
    if (state.draining.load()) rc.keep_alive = false;
    co_await HandleRequest(tc, conn, req, rc);
    Finish(tc, req, rc);
    if (!rc.keep_alive || !conn->stream.socket().is_open()) break;
  }
  beast::error_code ignored;
  conn->stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  conn->stream.socket().close(ignored);
  tc.connections.erase(conn);
  state.open_connections.fetch_sub(1);
  state.metrics.open_connections().Decrement();
}

}  // namespace kvgate::router
