#include "tests/fakes/fake_upstream.h"

#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <thread>

#include "common/mutex.h"
#include "common/strings.h"

namespace kvgate::testing {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
constexpr auto kNoThrow = net::as_tuple(net::use_awaitable);

uint32_t HeaderUint(const http::request<http::string_body>& req, const char* name,
                    uint32_t fallback) {
  auto it = req.find(name);
  if (it == req.end()) return fallback;
  uint64_t v = 0;
  return common::ParseUint64(std::string_view(it->value().data(), it->value().size()), &v)
             ? static_cast<uint32_t>(v)
             : fallback;
}

std::string EventContent(uint32_t i, uint32_t chunk_bytes) {
  std::string s = common::StrCat("tok", i, " ");
  if (s.size() < chunk_bytes) s.append(chunk_bytes - s.size(), 'x');
  return s;
}

std::string Event(uint32_t i, uint32_t chunk_bytes, const std::string& model,
                  const std::string& id) {
  return common::StrCat("data: {\"id\":\"chatcmpl-", id, "\",\"object\":\"chat.completion.chunk\",",
                        "\"model\":\"", model,
                        "\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"",
                        EventContent(i, chunk_bytes), "\"},\"finish_reason\":null}]}\n\n");
}

std::string FinalEvents(uint32_t chunks, const std::string& model, const std::string& id,
                        uint32_t cached = 64) {
  return common::StrCat(
      "data: {\"id\":\"chatcmpl-", id, "\",\"object\":\"chat.completion.chunk\",\"model\":\"",
      model, "\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],",
      "\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":", chunks,
      ",\"prompt_tokens_details\":{\"cached_tokens\":", cached, "}}}\n\ndata: [DONE]\n\n");
}

bool PeerClosed(tcp::socket& s) {
  char c;
  const ssize_t n = ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

}  // namespace

struct FakeUpstream::Impl {
  explicit Impl(Options o) : options(std::move(o)) {}

  net::awaitable<void> Serve(tcp::socket socket) {
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // events go out at once, like a real worker
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(256u << 20);
      auto [ec, n] = co_await http::async_read(stream, buffer, parser, kNoThrow);
      if (ec) break;
      auto req = parser.release();
      const bool keep = co_await Handle(stream, req);
      if (!keep) break;
    }
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  }

  net::awaitable<bool> Send(beast::tcp_stream& stream, http::status status, std::string type,
                            std::string body, const http::request<http::string_body>& req) {
    http::response<http::string_body> res{status, 11};
    res.set(http::field::content_type, type);
    if (auto id = req.find("x-request-id"); id != req.end()) res.set("x-request-id", id->value());
    res.keep_alive(req.keep_alive());
    res.body() = std::move(body);
    res.prepare_payload();
    auto [ec, n] = co_await http::async_write(stream, res, kNoThrow);
    co_return !ec && req.keep_alive();
  }

  net::awaitable<bool> Handle(beast::tcp_stream& stream, http::request<http::string_body>& req) {
    const std::string target(req.target());
    if (req.method() == http::verb::get && target == "/health") {
      health_checks.fetch_add(1);
      co_return co_await Send(stream,
                              healthy.load() ? http::status::ok : http::status::service_unavailable,
                              "application/json", "{}", req);
    }
    if (req.method() == http::verb::get && target == "/metrics") {
      co_return co_await Send(
          stream, http::status::ok, "text/plain; version=0.0.4",
          common::StrCat("vllm:num_requests_running{model_name=\"", options.model, "\"} ",
                         active_count.load(), "\nvllm:num_requests_waiting{model_name=\"",
                         options.model, "\"} 0\nvllm:kv_cache_usage_perc{model_name=\"",
                         options.model, "\"} 0.0\n"),
          req);
    }
    if (req.method() == http::verb::get && target == "/v1/models") {
      co_return co_await Send(
          stream, http::status::ok, "application/json",
          common::StrCat("{\"object\":\"list\",\"data\":[{\"id\":\"", options.model,
                         "\",\"object\":\"model\",\"owned_by\":\"fake\"}]}"),
          req);
    }
    requests_count.fetch_add(1);
    const std::string id = [&] {
      auto it = req.find("x-request-id");
      return it == req.end() ? std::string("none") : std::string(it->value());
    }();
    {
      common::MutexLock lock(&mu);
      last_request_id = id;
      last_body = req.body();
      last_headers.clear();
      for (const auto& f : req) {
        last_headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
      }
    }
    active_count.fetch_add(1);
    struct Done {
      std::atomic<int64_t>& a;
      ~Done() { a.fetch_sub(1); }
    } done{active_count};

    const uint32_t status = HeaderUint(req, "x-fake-status", force_status.load());
    if (status != 0) {
      co_return co_await Send(
          stream, static_cast<http::status>(status), "application/json",
          R"({"error":{"message":"fake failure","type":"server_error","code":null}})", req);
    }
    std::string mode;
    if (auto it = req.find("x-fake-mode"); it != req.end()) mode = std::string(it->value());
    if (mode == "hang") {
      // Wait for the client to go away; count it as a cancellation.
      char sink[256];
      for (;;) {
        auto [ec, n] = co_await stream.async_read_some(net::buffer(sink), kNoThrow);
        if (ec) break;
      }
      cancelled_count.fetch_add(1);
      co_return false;
    }
    const uint32_t chunks = HeaderUint(req, "x-fake-chunks", options.chunks);
    const uint32_t delay = HeaderUint(req, "x-fake-delay-ms", options.delay_ms);
    const uint32_t chunk_bytes = HeaderUint(req, "x-fake-chunk-bytes", 0);
    const uint32_t cached = HeaderUint(req, "x-fake-cached-tokens", 64);
    const bool streaming = req.body().find("\"stream\":true") != std::string::npos ||
                           req.body().find("\"stream\": true") != std::string::npos;
    if (!streaming) {
      std::string text;
      for (uint32_t i = 0; i < chunks; ++i) text += EventContent(i, chunk_bytes);
      co_return co_await Send(
          stream, http::status::ok, "application/json",
          common::StrCat("{\"id\":\"cmpl-", id, "\",\"object\":\"chat.completion\",\"model\":\"",
                         options.model,
                         "\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",",
                         "\"content\":\"", text, "\"},\"finish_reason\":\"stop\"}],",
                         "\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":", chunks,
                         ",\"total_tokens\":", 100 + chunks,
                         ",\"prompt_tokens_details\":{\"cached_tokens\":", cached, "}}}"),
          req);
    }

    http::response<http::empty_body> head{http::status::ok, 11};
    head.set(http::field::content_type, "text/event-stream");
    head.set(http::field::cache_control, "no-cache");
    if (auto it = req.find("x-request-id"); it != req.end()) head.set("x-request-id", it->value());
    head.chunked(true);
    head.keep_alive(req.keep_alive());
    http::response_serializer<http::empty_body> hsr{head};
    auto [hec, hn] = co_await http::async_write_header(stream, hsr, kNoThrow);
    if (hec) {
      cancelled_count.fetch_add(1);
      co_return false;
    }
    net::steady_timer timer(stream.get_executor());
    const uint32_t cut = mode == "close-mid" ? chunks / 2 : chunks;
    uint64_t released_seen = 0;
    for (uint32_t i = 0; i < cut; ++i) {
      if (mode == "lockstep") {
        // Wait until the test released this event; poll the counter on a short timer.
        while (released.load() <= released_seen) {
          if (PeerClosed(stream.socket())) {
            cancelled_count.fetch_add(1);
            co_return false;
          }
          timer.expires_after(std::chrono::milliseconds(1));
          co_await timer.async_wait(kNoThrow);
        }
        ++released_seen;
      } else if (delay > 0) {
        timer.expires_after(std::chrono::milliseconds(delay));
        co_await timer.async_wait(kNoThrow);
      }
      if (PeerClosed(stream.socket())) {
        cancelled_count.fetch_add(1);
        co_return false;
      }
      const std::string ev = Event(i, chunk_bytes, options.model, id);
      auto [ec, n] = co_await net::async_write(stream, http::make_chunk(net::buffer(ev)), kNoThrow);
      if (ec) {
        cancelled_count.fetch_add(1);
        co_return false;
      }
      streamed_bytes.fetch_add(ev.size());
    }
    if (mode == "close-mid") {
      beast::error_code ignored;
      stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
      stream.socket().close(ignored);
      co_return false;
    }
    const std::string fin = FinalEvents(chunks, options.model, id, cached);
    auto [ec1, n1] =
        co_await net::async_write(stream, http::make_chunk(net::buffer(fin)), kNoThrow);
    auto [ec2, n2] = co_await net::async_write(stream, http::make_chunk_last(), kNoThrow);
    if (ec1 || ec2) {
      cancelled_count.fetch_add(1);
      co_return false;
    }
    completed.fetch_add(1);
    co_return req.keep_alive();
  }

  net::awaitable<void> AcceptLoop() {
    for (;;) {
      auto& target = *contexts[next++ % contexts.size()];
      auto [ec, socket] = co_await acceptor->async_accept(target, kNoThrow);
      if (ec) co_return;
      connections_count.fetch_add(1);
      net::co_spawn(target, Serve(std::move(socket)), net::detached);
    }
  }

  Options options;
  std::vector<std::unique_ptr<net::io_context>> contexts;
  std::vector<std::thread> threads;
  std::unique_ptr<tcp::acceptor> acceptor;
  uint64_t next = 0;
  uint16_t port = 0;
  std::atomic<int> force_status{0};
  std::atomic<bool> healthy{true};
  std::atomic<uint64_t> released{0};
  std::atomic<uint64_t> requests_count{0};
  std::atomic<uint64_t> connections_count{0};
  std::atomic<uint64_t> health_count{0};
  std::atomic<uint64_t> health_checks{0};
  std::atomic<uint64_t> cancelled_count{0};
  std::atomic<uint64_t> completed{0};
  std::atomic<uint64_t> streamed_bytes{0};
  std::atomic<int64_t> active_count{0};
  mutable common::Mutex mu;
  std::string last_request_id ABSL_GUARDED_BY(mu);
  std::string last_body ABSL_GUARDED_BY(mu);
  std::vector<std::pair<std::string, std::string>> last_headers ABSL_GUARDED_BY(mu);
  bool running = false;
};

FakeUpstream::FakeUpstream(Options options) : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->force_status = impl_->options.force_status;
  impl_->healthy = impl_->options.healthy;
}

FakeUpstream::~FakeUpstream() { Stop(); }

void FakeUpstream::Start() {
  Impl& s = *impl_;
  const uint32_t n = std::max(1u, s.options.threads);
  for (uint32_t i = 0; i < n; ++i) s.contexts.push_back(std::make_unique<net::io_context>(1));
  s.acceptor = std::make_unique<tcp::acceptor>(*s.contexts[0]);
  const tcp::endpoint ep(net::ip::make_address(s.options.host), s.options.port);
  s.acceptor->open(ep.protocol());
  s.acceptor->set_option(net::socket_base::reuse_address(true));
  s.acceptor->bind(ep);
  s.acceptor->listen(net::socket_base::max_listen_connections);
  s.port = s.acceptor->local_endpoint().port();
  net::co_spawn(*s.contexts[0], s.AcceptLoop(), net::detached);
  for (auto& ctx : s.contexts) {
    s.threads.emplace_back([c = ctx.get()] {
      auto guard = net::make_work_guard(*c);
      c->run();
    });
  }
  s.running = true;
}

void FakeUpstream::Stop() {
  Impl& s = *impl_;
  if (!s.running) return;
  s.running = false;
  for (auto& c : s.contexts) c->stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
  s.acceptor.reset();
  s.contexts.clear();
}

uint16_t FakeUpstream::port() const { return impl_->port; }
std::string FakeUpstream::url() const {
  return common::StrCat("http://", impl_->options.host, ":", impl_->port);
}
void FakeUpstream::set_force_status(int status) { impl_->force_status = status; }
void FakeUpstream::set_healthy(bool healthy) { impl_->healthy = healthy; }
void FakeUpstream::ReleaseChunk() { impl_->released.fetch_add(1); }
uint64_t FakeUpstream::requests() const { return impl_->requests_count.load(); }
uint64_t FakeUpstream::connections() const { return impl_->connections_count.load(); }
uint64_t FakeUpstream::health_checks() const { return impl_->health_checks.load(); }
uint64_t FakeUpstream::cancelled() const { return impl_->cancelled_count.load(); }
uint64_t FakeUpstream::completed_streams() const { return impl_->completed.load(); }
uint64_t FakeUpstream::streamed_bytes() const { return impl_->streamed_bytes.load(); }
int64_t FakeUpstream::active() const { return impl_->active_count.load(); }
std::string FakeUpstream::last_request_id() const {
  common::MutexLock lock(&impl_->mu);
  return impl_->last_request_id;
}
std::string FakeUpstream::last_body() const {
  common::MutexLock lock(&impl_->mu);
  return impl_->last_body;
}
std::string FakeUpstream::last_header(const std::string& name) const {
  common::MutexLock lock(&impl_->mu);
  for (const auto& [k, v] : impl_->last_headers) {
    if (beast::iequals(k, name)) return v;
  }
  return "";
}

std::string FakeUpstream::ExpectedStream(uint32_t chunks, uint32_t chunk_bytes,
                                         const std::string& model, const std::string& id) {
  std::string out;
  for (uint32_t i = 0; i < chunks; ++i) out += Event(i, chunk_bytes, model, id);
  out += FinalEvents(chunks, model, id);
  return out;
}

}  // namespace kvgate::testing
