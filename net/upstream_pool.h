// File: net/upstream_pool.h
// Keep-alive connections from one gateway thread to the workers. A connection idle across one
// of the owner's periodic WatchIdle calls (the thread's sweep, every 100 ms) is watched from
// then on (an async_wait on its socket): when the worker closes it — vLLM drops idle
// keep-alives after 5 s — or sends stray bytes, it leaves the pool at once, so a request rarely
// meets a dead connection. One reused before that is never watched: under load a connection
// goes back to work within milliseconds, and arming a watch is an epoll_ctl (Asio re-arms an
// async_wait's edge-triggered registration), which was one of each request's six system calls
// (issue 31). A worker that closed a connection before its watch is met by the stale-connection
// retry of the request that takes it. Thread-compatible: each gateway thread owns one pool,
// used only from its own io_context.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/url.h"
#include "net/asio.h"

namespace boost::asio::ssl {
class context;
}

namespace kvgate::router {

class TlsSocket;

/// One connection to a worker: plain, or TLS for an https:// worker.
struct UpstreamConnection {
  explicit UpstreamConnection(net::io_context& ioc);
  ~UpstreamConnection();

  /// Reads what has arrived (decrypted over TLS); `would_block` when nothing has: then
  /// WaitAndRead.
  size_t ReadSome(net::mutable_buffer buffer, error_code& ec);
  /// Waits for bytes and reads them into `buffer` (a caller's deadline cancels the socket). On
  /// a plain connection the read itself waits in the reactor, which the socket's edge-triggered
  /// registration already covers (no coroutine frame either); a readiness wait (`async_wait`)
  /// costs an epoll_ctl each time in Boost 1.81's reactor. The buffer must stay valid until
  /// the wait ends.
  net::awaitable<std::tuple<error_code, size_t>> WaitAndRead(net::mutable_buffer buffer);
  /// Whether a WaitAndRead that read `n` bytes into `size` drained the socket: a short read on
  /// a plain connection, so nothing more has arrived, and the next read can wait at once (a
  /// ReadSome first would only hear would_block).
  bool Drained(const error_code& ec, size_t n, size_t size) const {
    return !tls && !ec && n < size;
  }
  /// Some bytes, waiting for them as long as it takes (a caller's timer closes the socket).
  net::awaitable<std::tuple<error_code, size_t>> ReadAsync(net::mutable_buffer buffer);
  /// Writes `head` then `body` (over TLS when the connection has it), waiting as needed.
  net::awaitable<error_code> WriteAll(std::string_view head, std::string_view body);

  tcp::socket socket;
  std::unique_ptr<TlsSocket> tls;
  std::string authority;           // the pool key
  uint64_t pooled_generation = 0;  // bumped on every pool entry and exit (stale watch guard)
  bool pooled = false;
  bool watched = false;  // idle with its watch armed
};
using UpstreamConnectionPtr = std::shared_ptr<UpstreamConnection>;

/// Connects `socket` (of `ioc`, not open) to `url`: its address literal, else each address the
/// resolver returns (asynchronously), in order, until one accepts. Cancelling or closing the
/// socket meanwhile ends it. @return kUnavailable naming the stage that failed.
net::awaitable<absl::Status> ConnectTo(net::io_context& ioc, const common::HttpUrl& url,
                                       tcp::socket& socket);

/// Connects `conn` (new) to `url` like ConnectTo, with TCP_NODELAY and a non-blocking socket;
/// for an https:// URL it then handshakes with `tls` (SNI for a name, and the certificate must
/// name the host). Closing `conn.socket` meanwhile ends it.
/// @return kUnavailable on refusal, unreachable or cancellation; kFailedPrecondition when the
/// TLS handshake failed (a certificate the gateway does not trust, say) or `tls` is null.
net::awaitable<absl::Status> ConnectUpstream(net::io_context& ioc, const common::HttpUrl& url,
                                             boost::asio::ssl::context* tls,
                                             UpstreamConnection& conn);

class UpstreamPool {
 public:
  explicit UpstreamPool(net::io_context& ioc) : ioc_(ioc) {}
  ~UpstreamPool();

  /// An idle connection to `authority`, most recently used first; null when none.
  UpstreamConnectionPtr TakeIdle(const std::string& authority);

  /// Returns a connection whose last response was fully read; kept when fewer than `max_idle`
  /// are idle for that worker, closed otherwise.
  void PutIdle(UpstreamConnectionPtr conn, uint32_t max_idle);

  /// Watches every idle connection not watched yet (call it periodically).
  void WatchIdle();

  /// Opens a new connection (async DNS unless the host is an address literal) with
  /// TCP_NODELAY and a non-blocking socket; for an https:// URL it then handshakes with
  /// `tls` (the snapshot's upstream context). `*socket_out`, when given, points to the socket
  /// while it connects (so a deadline can cancel it).
  /// @return kUnavailable on refusal, unreachable or cancellation; kFailedPrecondition when
  /// the TLS handshake failed (a certificate the gateway does not trust, say).
  net::awaitable<absl::StatusOr<UpstreamConnectionPtr>> Connect(const common::HttpUrl& url,
                                                                boost::asio::ssl::context* tls,
                                                                tcp::socket** socket_out = nullptr);

  /// Closes every idle connection (drain, worker removal).
  void Clear();
  size_t idle_count() const;

 private:
  void Watch(const UpstreamConnectionPtr& conn);
  void Drop(UpstreamConnection* conn);

  net::io_context& ioc_;
  absl::flat_hash_map<std::string, std::vector<UpstreamConnectionPtr>> idle_;
};

}  // namespace kvgate::router
