#include "net/upstream_pool.h"

#include <array>

#include "common/strings.h"
#include "net/tls_socket.h"

namespace kvgate::router {

UpstreamConnection::UpstreamConnection(net::io_context& ioc) : socket(ioc) {}
UpstreamConnection::~UpstreamConnection() = default;

size_t UpstreamConnection::ReadSome(net::mutable_buffer buffer, error_code& ec) {
  return tls ? tls->ReadSome(buffer, ec) : socket.read_some(buffer, ec);
}

namespace {

// TLS: readiness, then a read of what decrypts (a record may need more bytes first).
net::awaitable<std::tuple<error_code, size_t>> TlsWaitAndRead(TlsSocket& tls, tcp::socket& socket,
                                                              net::mutable_buffer buffer) {
  for (;;) {
    auto [wec] = co_await socket.async_wait(tls.wait_type(), kNoThrow);
    if (wec) co_return std::make_tuple(wec, size_t{0});
    error_code ec;
    const size_t n = tls.ReadSome(buffer, ec);
    if (ec != net::error::would_block && ec != net::error::try_again) {
      co_return std::make_tuple(ec, n);
    }
  }
}

}  // namespace

net::awaitable<std::tuple<error_code, size_t>> UpstreamConnection::WaitAndRead(
    net::mutable_buffer buffer) {
  if (!tls) return socket.async_read_some(buffer, kNoThrow);
  return TlsWaitAndRead(*tls, socket, buffer);
}

net::awaitable<std::tuple<error_code, size_t>> UpstreamConnection::ReadAsync(
    net::mutable_buffer buffer) {
  if (!tls) co_return co_await socket.async_read_some(buffer, kNoThrow);
  error_code ec;
  const size_t n = tls->ReadSome(buffer, ec);
  if (ec != net::error::would_block && ec != net::error::try_again) {
    co_return std::make_tuple(ec, n);
  }
  co_return co_await TlsWaitAndRead(*tls, socket, buffer);
}

net::awaitable<error_code> UpstreamConnection::WriteAll(std::string_view head,
                                                        std::string_view body) {
  const std::array<net::const_buffer, 2> both = {net::buffer(head), net::buffer(body)};
  if (tls) co_return co_await TlsWriteAll(*tls, socket, both);
  auto [ec, n] = co_await net::async_write(socket, both, kNoThrow);
  co_return ec;
}

UpstreamPool::~UpstreamPool() { Clear(); }

UpstreamConnectionPtr UpstreamPool::TakeIdle(const std::string& authority) {
  auto it = idle_.find(authority);
  if (it == idle_.end() || it->second.empty()) return nullptr;
  UpstreamConnectionPtr c = std::move(it->second.back());
  it->second.pop_back();
  c->pooled = false;
  ++c->pooled_generation;
  if (c->watched) {
    c->watched = false;
    error_code ignored;
    c->socket.cancel(ignored);  // ends the idle watch
  }
  return c;
}

void UpstreamPool::PutIdle(UpstreamConnectionPtr conn, uint32_t max_idle) {
  auto& v = idle_[conn->authority];
  if (v.size() >= max_idle || !conn->socket.is_open()) {
    error_code ignored;
    conn->socket.close(ignored);
    return;
  }
  conn->pooled = true;
  conn->watched = false;
  ++conn->pooled_generation;
  v.push_back(std::move(conn));
}

void UpstreamPool::WatchIdle() {
  for (auto& [_, v] : idle_) {
    for (const UpstreamConnectionPtr& c : v) {
      if (c->watched) continue;
      c->watched = true;
      Watch(c);
    }
  }
}

void UpstreamPool::Watch(const UpstreamConnectionPtr& conn) {
  const uint64_t generation = conn->pooled_generation;
  conn->socket.async_wait(tcp::socket::wait_read, [this, conn, generation](const error_code& ec) {
    // Taken meanwhile (cancelled, or readable just before it was
    // taken): the request that took it handles its state.
    if (!conn->pooled || conn->pooled_generation != generation) return;
    if (ec == net::error::operation_aborted) return;
    // EOF or stray bytes from an idle worker connection: unusable.
    Drop(conn.get());
  });
}

void UpstreamPool::Drop(UpstreamConnection* conn) {
  auto it = idle_.find(conn->authority);
  if (it == idle_.end()) return;
  auto& v = it->second;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].get() != conn) continue;
    error_code ignored;
    v[i]->pooled = false;
    v[i]->socket.close(ignored);
    v.erase(v.begin() + static_cast<ptrdiff_t>(i));
    return;
  }
}

net::awaitable<absl::Status> ConnectTo(net::io_context& ioc, const common::HttpUrl& url,
                                       tcp::socket& socket) {
  std::vector<tcp::endpoint> endpoints;
  error_code ec;
  const auto addr = net::ip::make_address(url.host, ec);
  if (!ec) {
    endpoints.emplace_back(addr, url.port);
  } else {
    tcp::resolver resolver(ioc);
    auto [rec, results] =
        co_await resolver.async_resolve(url.host, std::to_string(url.port), kNoThrow);
    if (rec) {
      co_return absl::UnavailableError(
          common::StrCat("cannot resolve ", url.host, ": ", rec.message()));
    }
    for (const auto& r : results) endpoints.push_back(r.endpoint());
  }
  error_code last = net::error::host_not_found;
  for (const auto& ep : endpoints) {
    error_code ignored;
    socket.close(ignored);
    auto [cec] = co_await socket.async_connect(ep, kNoThrow);
    last = cec;
    if (!cec || cec == net::error::operation_aborted) break;
  }
  if (last) {
    co_return absl::UnavailableError(
        common::StrCat("connect to ", url.Authority(), ": ", last.message()));
  }
  co_return absl::OkStatus();
}

net::awaitable<absl::Status> ConnectUpstream(net::io_context& ioc, const common::HttpUrl& url,
                                             boost::asio::ssl::context* tls,
                                             UpstreamConnection& conn) {
  conn.authority = url.Authority();
  if (absl::Status connected = co_await ConnectTo(ioc, url, conn.socket); !connected.ok()) {
    co_return connected;
  }
  error_code ec;
  conn.socket.set_option(tcp::no_delay(true), ec);
  conn.socket.non_blocking(true, ec);
  if (url.scheme != "https") co_return absl::OkStatus();
  if (tls == nullptr) co_return absl::FailedPreconditionError("no TLS context for https");
  conn.tls = std::make_unique<TlsSocket>(*tls, conn.socket, TlsSocket::Role::kClient, url.host);
  if (const error_code hec = co_await conn.tls->Handshake(); hec) {
    co_return absl::FailedPreconditionError(
        common::StrCat("TLS handshake with ", url.Authority(), ": ", conn.tls->error()));
  }
  co_return absl::OkStatus();
}

net::awaitable<absl::StatusOr<UpstreamConnectionPtr>> UpstreamPool::Connect(
    const common::HttpUrl& url, boost::asio::ssl::context* tls, tcp::socket** socket_out) {
  auto conn = std::make_shared<UpstreamConnection>(ioc_);
  if (socket_out != nullptr) *socket_out = &conn->socket;
  const absl::Status connected = co_await ConnectUpstream(ioc_, url, tls, *conn);
  if (socket_out != nullptr) *socket_out = nullptr;
  if (!connected.ok()) co_return connected;
  co_return conn;
}

void UpstreamPool::Clear() {
  for (auto& [_, v] : idle_) {
    for (auto& c : v) {
      error_code ignored;
      c->pooled = false;
      c->socket.close(ignored);
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
