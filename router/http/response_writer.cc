#include "router/http/response_writer.h"

#include "common/json_util.h"
#include "common/strings.h"
#include "router/http/thread_context.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {

std::string_view ReasonPhrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 413:
      return "Content Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Content";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

// The one writer of ResponseState (exchange.h names it its friend).
struct ResponseStateWriter {
  static void SetStatus(Exchange& ex, int status) { ex.response.status_ = status; }
  static void SetKeepAlive(Exchange& ex, bool keep) { ex.response.keep_alive_ = keep; }
  static void MarkStarted(Exchange& ex) { ex.response.started_ = true; }
  static void AddBytes(Exchange& ex, uint64_t n) { ex.response.bytes_sent_ += n; }
};

namespace {

using W = ResponseStateWriter;

// The client's wish, unless something forces a close.
bool KeepAlive(ThreadContext& tc, const Exchange& ex) {
  return ex.response.keep_alive() && !tc.draining();
}

void AppendStatusLine(const Exchange& ex, int status, std::string_view reason, std::string* out) {
  common::StrAppend(out, ex.head.version_minor == 0 ? "HTTP/1.0 " : "HTTP/1.1 ", status, " ",
                    reason.empty() ? ReasonPhrase(status) : reason, "\r\n");
}

void AppendConnection(const Exchange& ex, std::string* out) {
  if (!ex.response.keep_alive()) {
    out->append("connection: close\r\n");
  } else if (ex.head.version_minor == 0) {
    out->append("connection: keep-alive\r\n");
  }
}

// The allowed Origin a browser sent (router/http/cors.h), and the headers its script may read.
void AppendCors(const Exchange& ex, std::string* out) {
  if (ex.cors_origin.empty()) return;
  common::StrAppend(out, "access-control-allow-origin: ", ex.cors_origin,
                    "\r\nvary: origin\r\naccess-control-expose-headers: x-request-id, "
                    "x-kvgate-worker\r\n");
}

}  // namespace

void StartResponse(Exchange& ex) { W::SetKeepAlive(ex, ex.head.keep_alive); }

void CloseAfterResponse(Exchange& ex) { W::SetKeepAlive(ex, false); }

void RecordClientGone(Exchange& ex) {
  W::SetStatus(ex, 499);
  W::SetKeepAlive(ex, false);
}

void RecordBrokenRelay(Exchange& ex) {
  W::SetStatus(ex, 502);
  W::SetKeepAlive(ex, false);
}

void CountBodyBytes(Exchange& ex, uint64_t bytes) { W::AddBytes(ex, bytes); }

net::awaitable<bool> WriteResponse(ThreadContext& tc, Exchange& ex, int status,
                                   std::string_view content_type, std::string_view body,
                                   std::string_view extra_headers) {
  W::SetStatus(ex, status);
  W::SetKeepAlive(ex, KeepAlive(tc, ex));
  std::string head;
  head.reserve(256);
  AppendStatusLine(ex, status, {}, &head);
  common::StrAppend(&head, "server: kvgate\r\ncontent-type: ", content_type,
                    "\r\nx-request-id: ", ex.request_id, "\r\ncontent-length: ", body.size(),
                    "\r\n", extra_headers);
  AppendCors(ex, &head);
  AppendConnection(ex, &head);
  head.append("\r\n");
  const bool with_body = ex.head.method != http1::Method::kHead;
  const net::const_buffer buffers[] = {net::buffer(head), net::buffer(body.data(), body.size())};
  W::MarkStarted(ex);
  const auto timeout = std::chrono::milliseconds(tc.config().limits.write_timeout_ms);
  const error_code ec =
      co_await WriteAll(ex.conn, absl::MakeConstSpan(buffers, with_body ? 2 : 1), timeout);
  if (ec) {
    W::SetKeepAlive(ex, false);
    co_return false;
  }
  if (with_body) W::AddBytes(ex, body.size());
  co_return true;
}

net::awaitable<bool> WriteError(ThreadContext& tc, Exchange& ex, int status,
                                std::string_view message, std::string_view type,
                                std::string_view code, std::string_view extra_headers, bool log) {
  if (log) spdlog::info("request {}: {} {}", ex.request_id, status, message);
  // Each API's clients expect its own error shape: Anthropic's for /v1/messages*. (Named
  // first: GCC 12 destroys a conditional's temporary twice inside a co_await.)
  std::string body = ex.head.path.starts_with("/v1/messages")
                         ? common::AnthropicErrorBody(status, message)
                         : common::OpenAiErrorBody(message, type, code);
  co_return co_await WriteResponse(tc, ex, status, "application/json", std::move(body),
                                   extra_headers);
}

void BeginRelayedHead(ThreadContext& tc, Exchange& ex, int status, std::string_view reason,
                      bool delimited, std::string* out) {
  W::SetStatus(ex, status);
  W::SetKeepAlive(ex, KeepAlive(tc, ex) && delimited);
  W::MarkStarted(ex);
  AppendStatusLine(ex, status, reason, out);
  common::StrAppend(out, "x-request-id: ", ex.request_id, "\r\nx-kvgate-worker: ", ex.worker,
                    "\r\n");
  if (!ex.prediction.empty())
    common::StrAppend(out, "x-kvgate-prediction: ", ex.prediction, "\r\n");
  if (ex.predicted_cached_tokens >= 0) {
    common::StrAppend(out, "x-kvgate-predicted-cached-tokens: ", ex.predicted_cached_tokens,
                      "\r\n");
  }
  AppendCors(ex, out);
  AppendConnection(ex, out);
}

}  // namespace kvgate::router
