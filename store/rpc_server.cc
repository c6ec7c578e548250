// File: store/rpc_server.cc
// RpcServer on Asio: one io thread runs every connection as coroutines (accept, the keyed
// handshake, frames, deadlines), so an idle or slow peer costs a socket and a few hundred bytes,
// not a thread. Handlers run on two small fixed pools (see kCallThreads). The only translation
// unit of store/ that includes Asio.
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <boost/asio.hpp>
#include <future>
#include <thread>
#include <unordered_map>

#include "common/strings.h"
#include "spdlog/spdlog.h"
#include "store/rpc.h"

namespace kvgate::store {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
constexpr auto kNoThrow = net::as_tuple(net::use_awaitable);

// Handlers run off the io thread because they may block: every Master operation takes its one
// mutex (which the tick holds while it evicts), and WaitKeys parks its caller for up to 60 s by
// design. Waits get a pool of their own, so waiting clients never hold the threads every other
// request needs; a wait beyond kWaitThreads queues (the client's call time-out bounds it). The
// Master serialises on its mutex anyway, so more call threads would buy nothing.
constexpr int kCallThreads = 4;
constexpr int kWaitThreads = 8;
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);

// One connection. Its state is touched on the io thread only, except `closed`, which pool
// threads read before running a queued request.
struct Conn {
  explicit Conn(tcp::socket s) : socket(std::move(s)), timer(socket.get_executor()) {}
  tcp::socket socket;
  net::steady_timer timer;  // The watchdog's.
  Clock::time_point deadline = Clock::time_point::max();
  bool timed_out = false;
  std::atomic<bool> closed{false};

  void Close() {
    closed = true;
    boost::system::error_code ignored;
    socket.close(ignored);
    timer.cancel();
  }
  // The watchdog closes the connection at `t`; it re-arms itself when the deadline moves later.
  void SetDeadline(Clock::time_point t) {
    deadline = t;
    if (t < timer.expiry()) timer.cancel();
  }
};

net::awaitable<void> Watch(std::shared_ptr<Conn> c) {
  while (!c->closed) {
    c->timer.expires_at(c->deadline);
    co_await c->timer.async_wait(kNoThrow);
    if (!c->closed && Clock::now() >= c->deadline) {
      c->timed_out = true;
      c->Close();  // The serving coroutine's read or write fails and it ends.
    }
  }
}

}  // namespace

struct RpcServer::Impl {
  Impl(uint16_t port, std::shared_ptr<const transfer::CredentialSet> verifier, RpcHandler handler,
       RpcLimits limits)
      : port(port),
        verifier(std::move(verifier)),
        handler(std::move(handler)),
        limits(limits),
        acceptor(io),
        backoff(io),
        work(net::make_work_guard(io)) {}

  void Run() {
    net::co_spawn(io, Accept(), net::detached);
    io_thread = std::thread([this] { io.run(); });
  }
  void Stop();
  net::awaitable<void> Accept();
  net::awaitable<void> Serve(uint64_t id, std::shared_ptr<Conn> c);
  net::awaitable<absl::StatusOr<transfer::Principal>> Authenticate(Conn& c);
  net::awaitable<void> ServeFrames(Conn& c, const transfer::Principal& peer);
  net::awaitable<bool> Send(Conn& c, Op op, uint64_t id, std::string_view body);
  net::awaitable<std::string> Call(const Conn& c, const transfer::Principal& peer, Op op,
                                   std::string_view body);

  const uint16_t port;
  const std::shared_ptr<const transfer::CredentialSet> verifier;
  const RpcHandler handler;
  const RpcLimits limits;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> protocol_errors{0};
  std::atomic<uint64_t> auth_failures{0};
  std::atomic<uint64_t> refused{0};
  net::io_context io;
  tcp::acceptor acceptor;
  net::steady_timer backoff;  // Accept's, while out of descriptors.
  net::executor_work_guard<net::io_context::executor_type> work;
  net::thread_pool calls{kCallThreads};
  net::thread_pool waits{kWaitThreads};
  std::thread io_thread;
  // Io thread only.
  std::unordered_map<uint64_t, std::shared_ptr<Conn>> conns;
  uint64_t next_id = 0;
  size_t handshakes = 0;  // Connections not yet authenticated.
  uint64_t body_bytes = 0;
};

absl::StatusOr<std::unique_ptr<RpcServer>> RpcServer::Start(
    const std::string& host, uint16_t port, std::shared_ptr<const transfer::CredentialSet> verifier,
    RpcHandler handler, RpcLimits limits) {
  auto l = ListenTcp(host, port, "store");
  if (!l.ok()) return l.status();
  auto impl = std::make_unique<Impl>(l->second, std::move(verifier), std::move(handler), limits);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(l->first, reinterpret_cast<sockaddr*>(&ss), &len);
  boost::system::error_code ec;
  impl->acceptor.assign(ss.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), l->first, ec);
  if (ec) {
    ::close(l->first);
    return absl::UnavailableError(
        common::StrCat("store: cannot listen on ", host, ":", port, ": ", ec.message()));
  }
  impl->Run();
  return std::unique_ptr<RpcServer>(new RpcServer(std::move(impl)));
}

RpcServer::RpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RpcServer::~RpcServer() { impl_->Stop(); }
uint16_t RpcServer::port() const { return impl_->port; }
uint64_t RpcServer::protocol_errors() const { return impl_->protocol_errors.load(); }
uint64_t RpcServer::auth_failures() const { return impl_->auth_failures.load(); }
uint64_t RpcServer::refused_connections() const { return impl_->refused.load(); }

// Closes everything on the io thread, waits for the handlers in progress (queued ones see
// `closed` and do not run), then lets the coroutines finish and the io thread run out of work.
void RpcServer::Impl::Stop() {
  stopping = true;
  std::promise<void> closed;
  net::post(io, [&] {
    boost::system::error_code ignored;
    acceptor.close(ignored);
    backoff.cancel();
    for (auto& [id, c] : conns) c->Close();
    closed.set_value();
  });
  closed.get_future().wait();
  calls.join();
  waits.join();
  work.reset();
  io_thread.join();
}

net::awaitable<void> RpcServer::Impl::Accept() {
  bool out_of_fds = false;
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(kNoThrow);
    if (stopping || ec == net::error::operation_aborted) co_return;
    if (ec == net::error::connection_aborted || ec == net::error::interrupted) continue;
    if (ec) {
      // Out of descriptors (EMFILE, ENFILE) or memory: the pending connection stays queued, so
      // accept would fail again at once; wait instead of spinning, and say so once per episode.
      if (!out_of_fds) spdlog::warn("store: accept failed: {}; retrying", ec.message());
      out_of_fds = true;
      backoff.expires_after(kAcceptBackoff);
      co_await backoff.async_wait(kNoThrow);
      continue;
    }
    out_of_fds = false;
    if (conns.size() >= limits.max_connections || handshakes >= limits.max_handshakes) {
      refused.fetch_add(1);  // Over a limit: hang up at once.
      boost::system::error_code ignored;
      socket.close(ignored);
      continue;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto c = std::make_shared<Conn>(std::move(socket));
    const uint64_t id = next_id++;
    conns.emplace(id, c);
    ++handshakes;
    net::co_spawn(io, Watch(c), net::detached);
    net::co_spawn(io, Serve(id, std::move(c)), net::detached);
  }
}

net::awaitable<void> RpcServer::Impl::Serve(uint64_t id, std::shared_ptr<Conn> c) {
  transfer::Principal peer{transfer::PeerRole::kClient, "anonymous", {"*"}, /*unrestricted=*/true};
  bool authenticated = verifier == nullptr;
  if (!authenticated) {
    c->SetDeadline(Clock::now() + limits.handshake_timeout);
    auto who = co_await Authenticate(*c);
    if (who.ok()) {
      peer = std::move(*who);
      authenticated = true;
    } else if (!stopping) {
      auth_failures.fetch_add(1);
      // One line per refused connection: they cost a handshake each, so the rate is bounded by
      // max_handshakes and the handshake timeout.
      spdlog::warn("store: refused a connection: {}", who.status().message());
    }
  }
  --handshakes;
  if (authenticated) co_await ServeFrames(*c, peer);
  c->Close();
  conns.erase(id);
}

// The keyed challenge of transfer/peer_auth.h, message by message, so a slow peer holds no
// thread; the watchdog ends it at the handshake deadline.
net::awaitable<absl::StatusOr<transfer::Principal>> RpcServer::Impl::Authenticate(Conn& c) {
  transfer::AuthServerHandshake hs(verifier, "master");
  std::string fixed(transfer::kAuthHelloFixed, '\0'), rest, proof(transfer::kAuthMacBytes, '\0');
  auto lost = [&c](std::string_view what) {
    return absl::UnauthenticatedError(
        common::StrCat(what, c.timed_out ? " (handshake timed out)" : ""));
  };
  auto [ec, n] = co_await net::async_read(c.socket, net::buffer(fixed), kNoThrow);
  if (ec) co_return lost("no authentication hello");
  auto more = hs.HelloRest(fixed);
  if (!more.ok()) co_return more.status();
  rest.resize(*more);
  std::tie(ec, n) = co_await net::async_read(c.socket, net::buffer(rest), kNoThrow);
  if (ec) co_return lost("truncated authentication hello");
  auto challenge = hs.Challenge(fixed, rest);
  if (!challenge.ok()) co_return challenge.status();
  std::tie(ec, n) = co_await net::async_write(c.socket, net::buffer(*challenge), kNoThrow);
  if (!ec) std::tie(ec, n) = co_await net::async_read(c.socket, net::buffer(proof), kNoThrow);
  if (ec) co_return lost("no authentication proof");
  auto who = hs.Verify(proof);
  const char verdict =
      static_cast<char>(who.ok() ? transfer::kAuthAccepted : transfer::kAuthRefused);
  std::tie(ec, n) = co_await net::async_write(c.socket, net::buffer(&verdict, 1), kNoThrow);
  if (ec && who.ok()) co_return lost("no verdict sent");
  co_return who;
}

net::awaitable<bool> RpcServer::Impl::Send(Conn& c, Op op, uint64_t id, std::string_view body) {
  uint8_t header[kFrameHeaderSize];
  EncodeFrameHeader({static_cast<uint32_t>(body.size()), kProtocolVersion, op, id}, header);
  // A peer that stops reading cannot hold the connection: the reply goes out within
  // frame_timeout too.
  c.SetDeadline(Clock::now() + limits.frame_timeout);
  const std::array<net::const_buffer, 2> out = {net::buffer(header), net::buffer(body)};
  auto [ec, n] = co_await net::async_write(c.socket, out, kNoThrow);
  co_return !ec;
}

// Runs on a pool thread: the handler, unless the connection went away while it was queued
// (then nothing: a reply always holds at least its status).
net::awaitable<std::string> RpcServer::Impl::Call(const Conn& c, const transfer::Principal& peer,
                                                  Op op, std::string_view body) {
  if (stopping || c.closed) co_return std::string();
  co_return handler(peer, op, body);
}

net::awaitable<void> RpcServer::Impl::ServeFrames(Conn& c, const transfer::Principal& peer) {
  std::string body;
  uint8_t raw[kFrameHeaderSize];
  for (;;) {
    // Between frames a peer may be idle up to idle_timeout; a frame, once begun, must arrive
    // whole within frame_timeout.
    c.SetDeadline(Clock::now() + limits.idle_timeout);
    auto [ec, got] = co_await c.socket.async_read_some(net::buffer(raw), kNoThrow);
    if (ec) {
      if (ec != net::error::eof && !stopping) protocol_errors.fetch_add(1);
      break;
    }
    c.SetDeadline(Clock::now() + limits.frame_timeout);
    if (got < sizeof(raw)) {
      std::tie(ec, got) =
          co_await net::async_read(c.socket, net::buffer(raw + got, sizeof(raw) - got), kNoThrow);
      if (ec) {
        if (!stopping) protocol_errors.fetch_add(1);
        break;
      }
    }
    auto header = DecodeFrameHeader(raw);
    if (!header.ok()) {
      // Answer once (the peer may be another version), then hang up: the stream is unframed.
      protocol_errors.fetch_add(1);
      spdlog::warn("store: closing a connection of '{}': {}", peer.name, header.status().message());
      co_await Send(c, Op::kHello, 0, EncodeStatus(header.status()));
      break;
    }
    // Bodies are reserved against the server-wide budget before they are allocated.
    const uint64_t need = header->body_length;
    if (body_bytes + need > limits.max_body_bytes_in_flight) {
      protocol_errors.fetch_add(1);
      spdlog::warn(
          "store: closing a connection of '{}': a {}-byte frame while the server holds "
          "its limit of request bytes",
          peer.name, need);
      co_await Send(c, header->op, header->request_id,
                    EncodeStatus(absl::ResourceExhaustedError("store: too many request bytes in "
                                                              "flight; retry")));
      break;
    }
    body_bytes += need;
    body.resize(need);
    std::tie(ec, got) = co_await net::async_read(c.socket, net::buffer(body), kNoThrow);
    std::string reply;
    if (!ec) {
      c.SetDeadline(Clock::time_point::max());  // The handler's time is not the peer's.
      if (!stopping && !c.closed) {
        net::thread_pool& pool = header->op == Op::kWaitKeys ? waits : calls;
        auto [ep, r] = co_await net::co_spawn(pool, Call(c, peer, header->op, body), kNoThrow);
        if (ep) spdlog::error("store: a {} request failed: exception", OpName(header->op));
        if (!ep) reply = std::move(r);
      }
    }
    body_bytes -= need;
    if (body.capacity() > (1u << 20)) std::string().swap(body);  // Keep big frames' memory short.
    if (ec) {
      if (!stopping) protocol_errors.fetch_add(1);
      break;
    }
    if (reply.empty() || !co_await Send(c, header->op, header->request_id, reply)) break;
  }
}

}  // namespace kvgate::store
