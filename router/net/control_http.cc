#include "router/net/control_http.h"

#include <optional>

#include "common/strings.h"
#include "router/net/body_framing.h"
#include "router/net/http1.h"
#include "router/net/tls_socket.h"
#include "router/net/upstream_pool.h"

namespace kvgate::router {
namespace {

constexpr size_t kMaxResponseBytes = 4u << 20;

// Some bytes of the response, waiting for them; over TLS when `tls` is set.
net::awaitable<std::tuple<error_code, size_t>> ReadFrom(tcp::socket& socket, TlsSocket* tls,
                                                        net::mutable_buffer buffer) {
  if (tls == nullptr) co_return co_await socket.async_read_some(buffer, kNoThrow);
  for (;;) {
    error_code ec;
    const size_t n = tls->ReadSome(buffer, ec);
    if (ec != net::error::would_block) co_return std::make_tuple(ec, n);
    auto [wec] = co_await socket.async_wait(tls->wait_type(), kNoThrow);
    if (wec) co_return std::make_tuple(wec, size_t{0});
  }
}

}  // namespace

net::awaitable<absl::StatusOr<HttpResult>> HttpCall(
    net::io_context& ioc, const common::HttpUrl& url, std::string_view method, std::string path,
    std::string body, std::chrono::milliseconds timeout,
    std::vector<std::pair<std::string, std::string>> headers,
    std::shared_ptr<boost::asio::ssl::context> tls_context) {
  // The socket is shared with the timer's handler, which may run after this returns.
  auto socket_ptr = std::make_shared<tcp::socket>(ioc);
  tcp::socket& socket = *socket_ptr;
  // One timer for the whole call: it closes the socket, failing whatever is pending.
  auto expired = std::make_shared<bool>(false);
  net::steady_timer timer(ioc);
  timer.expires_after(timeout);
  timer.async_wait([socket_ptr, expired](const error_code& ec) {
    if (ec) return;
    *expired = true;
    error_code ignored;
    socket_ptr->close(ignored);
  });
  auto fail = [&](std::string_view what, const error_code& ec) -> absl::Status {
    if (*expired) return absl::DeadlineExceededError(common::StrCat(what, ": no answer in time"));
    return absl::UnavailableError(common::StrCat(what, ": ", ec.message()));
  };
  struct CancelTimer {
    net::steady_timer& t;
    ~CancelTimer() { t.cancel(); }
  } cancel{timer};

  if (const absl::Status c = co_await ConnectTo(ioc, url, socket); !c.ok()) {
    if (*expired) {
      co_return absl::DeadlineExceededError(common::StrCat(c.message(), ": no answer in time"));
    }
    co_return c;
  }
  std::unique_ptr<TlsSocket> tls;
  if (url.scheme == "https") {
    if (!tls_context) co_return absl::UnavailableError("no TLS context for https");
    error_code ignored;
    socket.non_blocking(true, ignored);
    tls = std::make_unique<TlsSocket>(*tls_context, socket, TlsSocket::Role::kClient, url.host);
    if (const error_code hec = co_await tls->Handshake(); hec) {
      co_return fail(common::StrCat("TLS handshake with ", url.Authority(), ": ", tls->error()),
                     hec);
    }
  }

  std::string request =
      common::StrCat(method, " ", url.base_path, path, " HTTP/1.1\r\nhost: ", url.Authority(),
                     "\r\nuser-agent: kvgate-control\r\nconnection: close\r\n");
  for (const auto& [name, value] : headers) common::StrAppend(&request, name, ": ", value, "\r\n");
  if (!body.empty()) request += "content-type: application/json\r\n";
  common::StrAppend(&request, "content-length: ", body.size(), "\r\n\r\n", body);
  error_code wec;
  if (tls) {
    const net::const_buffer b[] = {net::buffer(request)};
    wec = co_await TlsWriteAll(*tls, socket, b);
  } else {
    std::tie(wec, std::ignore) = co_await net::async_write(socket, net::buffer(request), kNoThrow);
  }
  if (wec) co_return fail(common::StrCat("writing to ", url.Authority()), wec);

  std::string in;
  HttpResult result;
  http1::ResponseHead head;
  std::optional<http1::BodyFraming> framing;
  size_t fed = 0;
  char buf[16384];
  for (;;) {
    auto [rec, n] = co_await ReadFrom(socket, tls.get(), net::buffer(buf));
    if (rec && rec != net::error::eof)
      co_return fail(common::StrCat("reading from ", url.Authority()), rec);
    if (n > 0) in.append(buf, n);
    if (in.size() > kMaxResponseBytes) {
      co_return absl::UnavailableError(
          common::StrCat(url.Authority(), ": response larger than ", kMaxResponseBytes, " bytes"));
    }
    if (!framing) {
      const auto pr = http1::ParseResponseHead(
          in, method == "HEAD" ? http1::Method::kHead : http1::Method::kGet, {}, &head);
      if (pr.status == http1::ParseStatus::kError) {
        co_return absl::UnavailableError(
            common::StrCat(url.Authority(), ": malformed response: ", pr.error));
      }
      if (pr.status == http1::ParseStatus::kIncomplete) {
        if (rec == net::error::eof) {
          co_return absl::UnavailableError(
              common::StrCat(url.Authority(), ": connection closed before a response"));
        }
        continue;
      }
      if (head.status < 200) {  // informational: the real head follows
        in.erase(0, pr.head_bytes);
        continue;
      }
      result.status = head.status;
      framing.emplace(head.body, head.content_length);
      fed = pr.head_bytes;
    }
    size_t consumed = 0;
    const auto status = framing->Feed(std::string_view(in).substr(fed), &consumed,
                                      [&](std::string_view d) { result.body.append(d); });
    fed += consumed;
    if (status == http1::BodyFraming::Status::kError) {
      co_return absl::UnavailableError(
          common::StrCat(url.Authority(), ": malformed response body: ", framing->error()));
    }
    if (status == http1::BodyFraming::Status::kDone) break;
    if (rec == net::error::eof) {
      if (framing->OnEof() == http1::BodyFraming::Status::kDone) break;
      co_return absl::UnavailableError(common::StrCat(url.Authority(), ": ", framing->error()));
    }
  }
  error_code ignored;
  socket.shutdown(tcp::socket::shutdown_both, ignored);
  co_return result;
}

}  // namespace kvgate::router
