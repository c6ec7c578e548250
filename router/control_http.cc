#include "router/control_http.h"

#include "router/upstream_pool.h"

namespace kvgate::router {

net::awaitable<absl::StatusOr<HttpResult>> HttpCall(
    net::io_context& ioc, const common::HttpUrl& url, http::verb method, std::string path,
    std::string body, std::chrono::milliseconds timeout,
    std::vector<std::pair<std::string, std::string>> headers) {
  UpstreamPool pool(ioc);
  auto stream = co_await pool.Connect(url, timeout);
  if (!stream.ok()) co_return stream.status();
  http::request<http::string_body> req{method, url.base_path + path, 11};
  req.set(http::field::host, url.Authority());
  req.set(http::field::user_agent, "kvgate-control");
  for (const auto& [name, value] : headers) req.set(name, value);
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = std::move(body);
  }
  req.keep_alive(false);
  req.prepare_payload();
  stream->expires_after(timeout);
  auto [wec, wn] = co_await http::async_write(*stream, req, kNoThrow);
  if (wec) co_return absl::UnavailableError(wec.message());
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(4 << 20);
  auto [rec, rn] = co_await http::async_read(*stream, buffer, parser, kNoThrow);
  if (rec == beast::error::timeout) co_return absl::DeadlineExceededError("no answer in time");
  if (rec) co_return absl::UnavailableError(rec.message());
  beast::error_code ignored;
  stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
  co_return HttpResult{static_cast<int>(parser.get().result_int()), std::move(parser.get().body())};
}

}  // namespace kvgate::router
