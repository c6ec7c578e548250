#include "router/upstream_pool.h"

#include <sys/socket.h>

#include <cerrno>

#include "common/strings.h"

namespace kvgate::router {
namespace {

// A pooled connection the worker closed while idle reads as EOF; one with unexpected bytes is
// out of sync. Either way it must not carry the next request.
bool LooksReusable(beast::tcp_stream& s) {
  if (!s.socket().is_open()) return false;
  char c;
  const ssize_t n = ::recv(s.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

}  // namespace

std::optional<beast::tcp_stream> UpstreamPool::TakeIdle(const std::string& authority) {
  auto it = idle_.find(authority);
  if (it == idle_.end()) return std::nullopt;
  auto& v = it->second;
  while (!v.empty()) {
    beast::tcp_stream s = std::move(v.back());
    v.pop_back();
    if (LooksReusable(s)) return s;
    beast::error_code ignored;
    s.socket().close(ignored);
  }
  return std::nullopt;
}

void UpstreamPool::PutIdle(const std::string& authority, beast::tcp_stream stream,
                           uint32_t max_idle) {
  auto& v = idle_[authority];
  if (v.size() >= max_idle) {
    beast::error_code ignored;
    stream.socket().close(ignored);
    return;
  }
  stream.expires_never();
  v.push_back(std::move(stream));
}

net::awaitable<absl::StatusOr<beast::tcp_stream>> UpstreamPool::Connect(
    const common::HttpUrl& url, std::chrono::milliseconds timeout) {
  beast::tcp_stream stream(ioc_);
  std::vector<tcp::endpoint> endpoints;
  beast::error_code ec;
  const auto addr = net::ip::make_address(url.host, ec);
  if (!ec) {
    endpoints.emplace_back(addr, url.port);
  } else {
    tcp::resolver resolver(ioc_);
    auto [rec, results] =
        co_await resolver.async_resolve(url.host, std::to_string(url.port), kNoThrow);
    if (rec) {
      co_return absl::UnavailableError(
          common::StrCat("cannot resolve ", url.host, ": ", rec.message()));
    }
    for (const auto& r : results) endpoints.push_back(r.endpoint());
  }
  stream.expires_after(timeout);
  auto [cec, ep] = co_await stream.async_connect(endpoints, kNoThrow);
  if (cec == beast::error::timeout) {
    co_return absl::DeadlineExceededError(common::StrCat(
        "connect to ", url.Authority(), " timed out after ", timeout.count(), " ms"));
  }
  if (cec) {
    co_return absl::UnavailableError(
        common::StrCat("connect to ", url.Authority(), ": ", cec.message()));
  }
  stream.socket().set_option(tcp::no_delay(true), ec);
  stream.expires_never();
  co_return std::move(stream);
}

void UpstreamPool::Clear() {
  for (auto& [_, v] : idle_) {
    for (auto& s : v) {
      beast::error_code ignored;
      s.socket().close(ignored);
    }
  }
  idle_.clear();
}

size_t UpstreamPool::idle_count() const {
  size_t n = 0;
  for (const auto& [_, v] : idle_) n += v.size();
  return n;
}

}  // namespace kvgate::router
