// File: router/http/client_connection.h
// One client connection and the I/O every stage does on it. Reads and writes are tried
// synchronously first (non-blocking sockets) and wait on the reactor only when the socket is
// not ready, so a request whose bytes are already there costs no suspension, and a connection
// waiting for bytes holds no buffer (it waits for readability, then reads). One deadline per
// connection covers whatever it waits on now — the client's next request, the rest of a
// request, a write to the client, or the worker's answer — and the thread's sweep enforces it
// (server/thread_context.h): setting it is a store, not a timer operation. Thread-compatible:
// used only on the connection's own gateway thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>

#include "absl/types/span.h"
#include "net/asio.h"
#include "router/http/input_buffer.h"
#include "router/policies/routing_policy.h"  // SteadyClock

namespace boost::asio::ssl {
class context;
}

namespace kvgate::router {

class ThreadContext;
class TlsSocket;

/// What a deadline covers, and so what its expiry cancels.
enum class DeadlineKind : uint8_t {
  kNone,
  kIdle,         // waiting for the next request: expiry closes silently
  kClientRead,   // the rest of a request: expiry answers 408
  kClientWrite,  // the client stopped reading: expiry closes
  kUpstream,     // connect, request write, response wait, stream gap: expiry fails the attempt
};

struct ClientConnection : std::enable_shared_from_this<ClientConnection> {
  ClientConnection(tcp::socket socket, bool admin_listener);
  ~ClientConnection();

  tcp::socket socket;
  // On a TLS listener: the certificates it was accepted under, and the session over `socket`,
  // made by Handshake() only once the client's first TLS record is there (issue 27: a
  // half-open handshake held ~45 KB of OpenSSL state).
  std::shared_ptr<boost::asio::ssl::context> tls_context;
  std::unique_ptr<TlsSocket> tls;
  const bool admin_listener;  // accepted on the separate admin listener
  std::string peer;           // the client's address (per-client limits, logs)
  bool reserve = false;       // accepted beyond max_connections: probes only, then closed
  InputBuffer in;
  bool idle = true;  // between requests (closed at once on drain)
  // Its place in the thread's idle list (ThreadContext::MarkIdle), oldest first, from which a
  // full connection table takes the connection that has waited longest.
  std::list<ClientConnection*>::iterator idle_pos;
  bool in_idle_list = false;
  bool holds_place = false;  // counted in open_connections and the per-client count
  bool reaped = false;       // closed to make room for a new connection

  // The deadline, checked by the thread's sweep.
  SteadyClock::time_point deadline = SteadyClock::time_point::max();
  DeadlineKind deadline_kind = DeadlineKind::kNone;
  bool deadline_expired = false;             // set by the sweep; cleared by the next SetDeadline()
  net::steady_timer* queue_timer = nullptr;  // a wait in the admission queue, which a client
                                             // disconnect ends too
  // The disconnect watch: while a request is served, a client that closes its side cancels
  // the worker connection, so the worker stops generating for nobody.
  bool client_gone = false;
  uint32_t watch_generation = 0;
  bool watch_armed = false;
  bool watch_wanted = false;  // the sweep arms the watch (WatchForDisconnect)

  void SetDeadline(DeadlineKind kind, std::chrono::milliseconds after);
  void ClearDeadline();
  /// Called by the sweep when the deadline passed: cancels what the deadline covers.
  void Expire();
  /// Cancels the main stage's worker socket, when one is linked (a concurrent P/D prefill
  /// failed, so the decode waits for nothing).
  void CancelUpstream();
  /// The client left: cancels every linked worker socket and the admission queue wait.
  void CancelForDisconnect();

 private:
  friend class UpstreamLink;
  // Set only through an UpstreamLink, which clears its slot when it ends.
  tcp::socket* upstream_ = nullptr;       // the worker connection a kUpstream deadline (and a
                                          // client disconnect) cancels; null when none
  tcp::socket* side_upstream_ = nullptr;  // a P/D prefill stage's connection, which a client
                                          // disconnect cancels too
};

/// Links a worker socket to a client connection for as long as the link lives: the client's
/// disconnect cancels it, and for the main stage (kMain) so does a kUpstream deadline. The
/// link clears itself when it ends, so no way out of a stage (an error, a retry, a coroutine
/// destroyed mid-wait) can leave the connection pointing at a closed socket. Not copyable;
/// one per stage and connection at a time.
class UpstreamLink {
 public:
  enum class Role : uint8_t {
    kMain,  // the response the client gets: deadline and disconnect
    kSide,  // a P/D prefill stage beside it: disconnect only
  };
  UpstreamLink() = default;  // linked to nothing (a fetch that outlives its client)
  UpstreamLink(ClientConnection& conn, Role role)
      : slot_(role == Role::kMain ? &conn.upstream_ : &conn.side_upstream_) {}
  ~UpstreamLink() { Set(nullptr); }
  UpstreamLink(const UpstreamLink&) = delete;
  UpstreamLink& operator=(const UpstreamLink&) = delete;

  /// Points the link at `socket` (null: at none for now).
  void Set(tcp::socket* socket) {
    if (slot_ != nullptr) *slot_ = socket;
  }
  /// The slot UpstreamPool::Connect points at the socket it is connecting (null when unlinked).
  tcp::socket** connecting() { return slot_; }

 private:
  tcp::socket** slot_ = nullptr;
};

using ClientConnectionPtr = std::shared_ptr<ClientConnection>;

/// On a TLS listener, waits (holding no TLS state) until the client's first record has arrived
/// whole, then makes the session and runs the handshake, all under
/// limits.tls_handshake_timeout_ms from accept; false (counted, logged at debug) when it failed.
/// True at once on a plain one.
net::awaitable<bool> Handshake(ThreadContext& tc, ClientConnection& conn);

/// Ends the connection: close_notify on TLS, then the socket closed.
void CloseConnection(ClientConnection& conn);

/// Reads what the socket holds now into `conn.in` (at most `max_bytes`), without waiting:
/// would_block when nothing is there (the buffer, if empty, is given back), operation_aborted
/// when the deadline expired or the connection was reaped, eof, or another error.
error_code ReadAvailable(ThreadContext& tc, ClientConnection& conn, size_t max_bytes);
/// What to wait for after ReadAvailable said would_block: readability, or over TLS whatever
/// the session needs next.
tcp::socket::wait_type ReadinessWait(const ClientConnection& conn);

/// Reads at least one more byte into `conn.in` (waiting for readability when none is there;
/// `max_bytes` bounds how much one call reads). Returns eof, an error, or operation_aborted
/// when the deadline expired (`conn.deadline_expired`) or the connection was closed.
net::awaitable<error_code> ReadMore(ThreadContext& tc, ClientConnection& conn, size_t max_bytes);

/// Writes all of `buffers` to the client under a kClientWrite deadline of `timeout`. The
/// buffers need to live only until the first suspension: what cannot be written at once is
/// copied first.
net::awaitable<error_code> WriteAll(ClientConnection& conn,
                                    absl::Span<const net::const_buffer> buffers,
                                    std::chrono::milliseconds timeout);

/// Starts / stops the disconnect watch (idempotent). The watch is an async_wait on the client
/// socket, not a coroutine; when the client closes it sets `client_gone` and cancels the
/// linked worker sockets (UpstreamLink). A client that sends more bytes (a pipelined request) is
/// still there; over TLS the bytes are looked at through the session, since a close_notify is bytes
/// too.
void ArmDisconnectWatch(ClientConnection& conn);
void DisarmDisconnectWatch(ClientConnection& conn);
/// Asks for the watch from the thread's next sweep (within 100 ms) on, if the request is still
/// being served then: most answers are done sooner, and each watch armed costs an epoll_ctl
/// (Asio re-arms an async_wait's edge-triggered registration), one of a request's six system
/// calls (issue 31). A client that left before is found when the watch is armed: its socket is
/// readable (EOF) at once. DisarmDisconnectWatch ends the wish too.
void WatchForDisconnect(ClientConnection& conn);

/// After an error that leaves unread request bytes (an oversized body, bad framing): stops
/// sending and discards what the client still sends for a moment, so that it reads the
/// response instead of a connection reset; then closes.
net::awaitable<void> LingeringClose(ThreadContext& tc, ClientConnection& conn);

}  // namespace kvgate::router
