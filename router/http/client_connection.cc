#include "router/http/client_connection.h"

#include <sys/socket.h>

#include <cerrno>

#include "net/tls_socket.h"
#include "router/http/thread_context.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {

using namespace std::chrono_literals;

ClientConnection::ClientConnection(tcp::socket s, bool admin)
    : socket(std::move(s)), admin_listener(admin) {
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  socket.non_blocking(true, ignored);
}

ClientConnection::~ClientConnection() = default;

namespace {

// A TLS record's header: content type, version, length (RFC 8446 section 5.1).
constexpr size_t kRecordHeaderBytes = 5;
constexpr uint8_t kHandshakeRecord = 22;
constexpr size_t kMaxRecordBytes = 16 * 1024;  // a longer one is OpenSSL's to refuse

// Waits until the socket holds the client's first TLS record whole, looking without taking
// (MSG_PEEK): until then the connection holds no TLS state and no buffer of ours. Returns at
// once when the bytes are not a handshake record (plain HTTP, garbage), for OpenSSL to refuse
// with its reason; eof when the client closed first.
net::awaitable<error_code> WaitForFirstRecord(ClientConnection& conn) {
  for (;;) {
    if (conn.deadline_expired || conn.reaped) co_return net::error::operation_aborted;
    uint8_t head[kRecordHeaderBytes];
    const ssize_t n =
        ::recv(conn.socket.native_handle(), head, sizeof(head), MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) co_return net::error::eof;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      co_return error_code(errno, boost::system::system_category());
    }
    if (n > 0 && head[0] != kHandshakeRecord) co_return error_code{};
    if (n == static_cast<ssize_t>(kRecordHeaderBytes)) {
      const size_t need = kRecordHeaderBytes + (size_t{head[3]} << 8 | head[4]);
      error_code ec;
      const size_t available = conn.socket.available(ec);
      if (ec) co_return ec;
      if (need > kRecordHeaderBytes + kMaxRecordBytes || available >= need) co_return ec;
    }
    // Safe against lost edge-triggered wake-ups: the peek just now saw all the socket holds,
    // and every arrival after it is a new edge.
    auto [wec] = co_await conn.socket.async_wait(tcp::socket::wait_read, kNoThrow);
    if (wec) co_return wec;
  }
}

}  // namespace

net::awaitable<bool> Handshake(ThreadContext& tc, ClientConnection& conn) {
  if (!conn.tls_context) co_return true;
  conn.SetDeadline(DeadlineKind::kClientRead,
                   std::chrono::milliseconds(tc.config().limits.tls_handshake_timeout_ms));
  error_code ec = co_await WaitForFirstRecord(conn);
  std::string reason;
  if (ec) {
    reason = ec == net::error::eof ? "the peer closed during the handshake" : ec.message();
  } else {
    conn.tls =
        std::make_unique<TlsSocket>(*conn.tls_context, conn.socket, TlsSocket::Role::kServer);
    conn.tls_context.reset();  // the session holds its own reference
    ec = co_await conn.tls->Handshake();
    if (ec) reason = conn.tls->error();
  }
  const bool expired = conn.deadline_expired;
  conn.ClearDeadline();
  if (!ec) co_return true;
  tc.CountClientTlsFailure();
  spdlog::debug("TLS handshake with client {} failed: {}", conn.peer,
                expired ? std::string("timed out") : reason);
  co_return false;
}

void CloseConnection(ClientConnection& conn) {
  if (conn.tls) conn.tls->Shutdown();
  error_code ignored;
  conn.socket.shutdown(tcp::socket::shutdown_send, ignored);
  conn.socket.close(ignored);
}

void ClientConnection::SetDeadline(DeadlineKind kind, std::chrono::milliseconds after) {
  deadline = SteadyClock::now() + after;
  deadline_kind = kind;
  deadline_expired = false;
}

void ClientConnection::ClearDeadline() {
  deadline = SteadyClock::time_point::max();
  deadline_kind = DeadlineKind::kNone;
  deadline_expired = false;
}

void ClientConnection::CancelUpstream() {
  error_code ignored;
  if (upstream_ != nullptr) upstream_->cancel(ignored);
}

void ClientConnection::CancelForDisconnect() {
  error_code ignored;
  if (upstream_ != nullptr) upstream_->cancel(ignored);
  if (side_upstream_ != nullptr) side_upstream_->cancel(ignored);
  if (queue_timer != nullptr) queue_timer->cancel();
}

void ClientConnection::Expire() {
  deadline_expired = true;
  deadline = SteadyClock::time_point::max();
  error_code ignored;
  if (deadline_kind == DeadlineKind::kUpstream) {
    CancelUpstream();
  } else if (deadline_kind != DeadlineKind::kNone) {
    socket.cancel(ignored);
  }
}

error_code ReadAvailable(ThreadContext& tc, ClientConnection& conn, size_t max_bytes) {
  if (conn.deadline_expired || conn.reaped) return net::error::operation_aborted;
  auto [p, n] = conn.in.Prepare(1, std::min(max_bytes, BufferPool::kBlockBytes), tc.buffers);
  error_code ec;
  const net::mutable_buffer into(p, std::min(n, max_bytes));
  const size_t got = conn.tls ? conn.tls->ReadSome(into, ec) : conn.socket.read_some(into, ec);
  if (!ec) {
    conn.in.Commit(got);
    return ec;
  }
  if (ec != net::error::would_block && ec != net::error::try_again) return ec;
  // Nothing there: hold no buffer while waiting.
  if (conn.in.empty()) conn.in.Release(tc.buffers);
  return net::error::would_block;
}

net::awaitable<error_code> ReadMore(ThreadContext& tc, ClientConnection& conn, size_t max_bytes) {
  for (;;) {
    const error_code ec = ReadAvailable(tc, conn, max_bytes);
    if (ec != net::error::would_block) co_return ec;
    // Safe against lost edge-triggered wake-ups, since the read just now drained the socket
    // and nothing ran since.
    auto [wec] = co_await conn.socket.async_wait(ReadinessWait(conn), kNoThrow);
    if (wec) co_return wec;
  }
}

tcp::socket::wait_type ReadinessWait(const ClientConnection& conn) {
  return conn.tls ? conn.tls->wait_type() : tcp::socket::wait_read;
}

net::awaitable<error_code> WriteAll(ClientConnection& conn,
                                    absl::Span<const net::const_buffer> buffers,
                                    std::chrono::milliseconds timeout) {
  // Most writes complete at once; only a client that is not reading makes us wait (and only
  // then does the write deadline replace the caller's).
  error_code ec;
  size_t total = 0;
  for (const auto& b : buffers) total += b.size();
  size_t written =
      conn.tls ? conn.tls->WriteSome(buffers, ec) : conn.socket.write_some(buffers, ec);
  if (!ec && written == total) co_return error_code{};
  if (ec && ec != net::error::would_block && ec != net::error::try_again) co_return ec;
  if (ec) written = 0;
  // The rest is copied: callers may pass buffers (a thread's scratch) that other requests
  // reuse while this one waits.
  const std::string rest = UnwrittenBytes(buffers, written);
  conn.SetDeadline(DeadlineKind::kClientWrite, timeout);
  error_code wec;
  if (conn.tls) {
    const net::const_buffer b[] = {net::buffer(rest)};
    wec = co_await TlsWriteAll(*conn.tls, conn.socket, b);
  } else {
    std::tie(wec, std::ignore) =
        co_await net::async_write(conn.socket, net::buffer(rest), kNoThrow);
  }
  const bool expired = conn.deadline_expired;
  conn.ClearDeadline();
  if (expired) co_return net::error::timed_out;
  co_return wec;
}

void ArmDisconnectWatch(ClientConnection& conn) {
  conn.watch_wanted = false;  // granted: the sweep does not arm it again
  if (conn.watch_armed) return;
  conn.watch_armed = true;
  const uint32_t generation = ++conn.watch_generation;
  conn.socket.async_wait(
      tcp::socket::wait_read, [c = conn.shared_from_this(), generation](const error_code& ec) {
        if (generation != c->watch_generation) return;  // a newer watch superseded this one
        c->watch_armed = false;
        if (ec) return;  // cancelled: the request ended
        if (c->tls && !c->tls->PeerClosed()) return;
        char byte;
        const ssize_t n =
            c->tls ? 0 : ::recv(c->socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) {
          return;  // a pipelined request: the client is still there
        }
        c->client_gone = true;
        c->CancelForDisconnect();
      });
}

void WatchForDisconnect(ClientConnection& conn) { conn.watch_wanted = true; }

void DisarmDisconnectWatch(ClientConnection& conn) {
  conn.watch_wanted = false;
  if (!conn.watch_armed) return;
  conn.watch_armed = false;
  ++conn.watch_generation;  // the cancelled handler, when it runs, finds itself superseded
  error_code ignored;
  conn.socket.cancel(ignored);
}

net::awaitable<void> LingeringClose(ThreadContext& tc, ClientConnection& conn) {
  error_code ec;
  if (conn.tls) conn.tls->Shutdown();
  conn.socket.shutdown(tcp::socket::shutdown_send, ec);
  conn.SetDeadline(DeadlineKind::kClientRead, 1s);
  size_t total = 0;
  while (total < (64u << 20) && !conn.deadline_expired) {
    const size_t n =
        conn.socket.read_some(net::buffer(tc.scratch(), ThreadContext::kScratchBytes), ec);
    if (!ec) {
      total += n;
      continue;
    }
    if (ec != net::error::would_block && ec != net::error::try_again) break;
    auto [wec] = co_await conn.socket.async_wait(tcp::socket::wait_read, kNoThrow);
    if (wec) break;
  }
  conn.ClearDeadline();
  conn.socket.close(ec);
}

}  // namespace kvgate::router
