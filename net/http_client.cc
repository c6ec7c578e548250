#include "net/http_client.h"

#include "common/strings.h"
#include "net/body_framing.h"
#include "net/http1.h"
#include "net/tls_socket.h"
#include "net/upstream_pool.h"

namespace kvgate::router {
namespace {

using std::chrono::milliseconds;

constexpr size_t kMaxCallBytes = 4u << 20;

// A connection and the timer that closes it when an operation overruns. The timer's handler
// holds the call weakly, so a response dropped by its reader is freed at once.
struct Call {
  Call(net::io_context& ioc, std::string authority)
      : conn(std::make_shared<UpstreamConnection>(ioc)),
        timer(ioc),
        authority(std::move(authority)) {}

  void Arm(const std::shared_ptr<Call>& self, milliseconds d) {
    expired = false;
    timer.expires_after(d);
    timer.async_wait([weak = std::weak_ptr<Call>(self)](const error_code& ec) {
      if (ec) return;
      if (auto c = weak.lock()) {
        c->expired = true;
        c->Close();
      }
    });
  }
  void Disarm() { timer.cancel(); }
  void Close() {
    error_code ignored;
    conn->socket.close(ignored);
  }
  // `st`, or kDeadlineExceeded when the timer closed the connection under it.
  absl::Status Failed(absl::Status st, std::string_view what) const {
    if (expired) return absl::DeadlineExceededError(common::StrCat(authority, ": ", what));
    return st;
  }

  UpstreamConnectionPtr conn;
  net::steady_timer timer;
  const std::string authority;
  bool expired = false;
};

class Response : public HttpClientResponse {
 public:
  Response(std::shared_ptr<Call> call, int status, http1::BodyKind kind, uint64_t length)
      : call_(std::move(call)), status_(status), framing_(kind, length) {}
  ~Response() override {
    call_->Disarm();
    call_->Close();
  }

  int status() const override { return status_; }

  // Feeds bytes that followed the head.
  absl::Status Feed(std::string_view bytes) {
    size_t consumed = 0;
    const auto st =
        framing_.Feed(bytes, &consumed, [this](std::string_view d) { payload_.append(d); });
    if (st == http1::BodyFraming::Status::kError) {
      return absl::UnavailableError(
          common::StrCat(call_->authority, ": malformed response body: ", framing_.error()));
    }
    ended_ = st == http1::BodyFraming::Status::kDone;
    return absl::OkStatus();
  }

  net::awaitable<absl::StatusOr<std::optional<std::string>>> NextLine(milliseconds idle,
                                                                      size_t max_line) override {
    for (;;) {
      if (const size_t nl = payload_.find('\n', scanned_); nl != std::string::npos) {
        std::string line = payload_.substr(0, nl);
        payload_.erase(0, nl + 1);
        scanned_ = 0;
        co_return std::optional<std::string>(std::move(line));
      }
      scanned_ = payload_.size();
      if (payload_.size() > max_line) {
        co_return absl::UnavailableError(
            common::StrCat(call_->authority, ": a line of over ", max_line, " bytes"));
      }
      if (ended_) {
        if (payload_.empty()) co_return std::optional<std::string>();
        std::string rest = std::move(payload_);
        payload_.clear();
        scanned_ = 0;
        co_return std::optional<std::string>(std::move(rest));
      }
      call_->Arm(call_, idle);
      absl::Status s = co_await Fill();
      call_->Disarm();
      if (!s.ok()) co_return s;
    }
  }

  net::awaitable<absl::StatusOr<std::string>> ReadAll(milliseconds timeout,
                                                      size_t max_bytes) override {
    call_->Arm(call_, timeout);
    while (!ended_ && payload_.size() <= max_bytes) {
      if (absl::Status s = co_await Fill(); !s.ok()) {
        call_->Disarm();
        co_return s;
      }
    }
    call_->Disarm();
    if (payload_.size() > max_bytes) {
      co_return absl::UnavailableError(
          common::StrCat(call_->authority, ": response larger than ", max_bytes, " bytes"));
    }
    scanned_ = 0;
    co_return std::move(payload_);
  }

 private:
  // Reads what the server sent next into payload_ (the timer is armed by the caller).
  net::awaitable<absl::Status> Fill() {
    char buf[16384];
    auto [ec, n] = co_await call_->conn->ReadAsync(net::buffer(buf));
    if (n > 0) {
      if (absl::Status s = Feed(std::string_view(buf, n)); !s.ok()) co_return s;
    }
    if (!ec || ended_) co_return absl::OkStatus();
    if (ec == net::error::eof) {
      if (framing_.OnEof() == http1::BodyFraming::Status::kDone) {
        ended_ = true;
        co_return absl::OkStatus();
      }
      co_return absl::UnavailableError(
          common::StrCat(call_->authority, ": connection closed mid-body: ", framing_.error()));
    }
    co_return call_->Failed(absl::UnavailableError(common::StrCat("reading from ", call_->authority,
                                                                  ": ", ec.message())),
                            "no data in time");
  }

  std::shared_ptr<Call> call_;
  const int status_;
  http1::BodyFraming framing_;
  std::string payload_;  // decoded body bytes not yet returned
  size_t scanned_ = 0;   // payload_ bytes known to hold no '\n'
  bool ended_ = false;
};

std::string RequestHead(const common::HttpUrl& url, const HttpClientRequest& r) {
  std::string head =
      common::StrCat(r.method, " ", url.base_path, r.target, " HTTP/1.1\r\nhost: ", url.Authority(),
                     "\r\nuser-agent: ", r.user_agent, "\r\n");
  for (const auto& [name, value] : r.headers) common::StrAppend(&head, name, ": ", value, "\r\n");
  if (!r.body.empty()) head += "content-type: application/json\r\n";
  if (!r.body.empty() || r.method != "GET") {
    common::StrAppend(&head, "content-length: ", r.body.size(), "\r\n");
  }
  head += "connection: close\r\n\r\n";
  return head;
}

// Reads until a final (non-1xx) response head; `in` keeps what followed it.
net::awaitable<absl::StatusOr<http1::ResponseHead>> ReadHead(Call& call, http1::Method method,
                                                             std::string& in, size_t& head_bytes) {
  char buf[16384];
  for (;;) {
    auto [ec, n] = co_await call.conn->ReadAsync(net::buffer(buf));
    if (n > 0) in.append(buf, n);
    http1::ResponseHead head;
    const auto pr = http1::ParseResponseHead(in, method, {}, &head);
    if (pr.status == http1::ParseStatus::kError) {
      co_return absl::UnavailableError(
          common::StrCat(call.authority, ": malformed response: ", pr.error));
    }
    if (pr.status == http1::ParseStatus::kComplete) {
      if (head.status < 200) {  // informational: the real head follows
        in.erase(0, pr.head_bytes);
        continue;
      }
      head_bytes = pr.head_bytes;
      co_return head;
    }
    if (in.size() > kMaxCallBytes) {
      co_return absl::UnavailableError(common::StrCat(call.authority, ": response head too large"));
    }
    if (ec) {
      co_return absl::UnavailableError(
          common::StrCat(call.authority, ": connection closed before a response: ", ec.message()));
    }
  }
}

}  // namespace

net::awaitable<absl::StatusOr<std::unique_ptr<HttpClientResponse>>> HttpOpen(
    net::io_context& ioc, const common::HttpUrl& url, HttpClientRequest request,
    milliseconds timeout, std::shared_ptr<boost::asio::ssl::context> tls) {
  auto call = std::make_shared<Call>(ioc, url.Authority());
  call->Arm(call, timeout);
  const std::string when = common::StrCat("no answer within ", timeout.count(), " ms");
  auto fail = [&](absl::Status st) -> absl::Status {
    call->Disarm();
    call->Close();
    return call->Failed(std::move(st), when);
  };
  if (url.scheme == "https" && tls == nullptr) {
    co_return fail(
        absl::UnavailableError(common::StrCat(url.Authority(), ": no TLS context for https")));
  }
  if (absl::Status c = co_await ConnectUpstream(ioc, url, tls.get(), *call->conn); !c.ok()) {
    co_return fail(absl::UnavailableError(c.message()));
  }
  const std::string request_head = RequestHead(url, request);
  if (error_code wec = co_await call->conn->WriteAll(request_head, request.body); wec) {
    co_return fail(absl::UnavailableError(
        common::StrCat("writing to ", url.Authority(), ": ", wec.message())));
  }
  std::string in;
  size_t head_bytes = 0;
  const auto method = request.method == "HEAD" ? http1::Method::kHead : http1::Method::kGet;
  auto head = co_await ReadHead(*call, method, in, head_bytes);
  if (!head.ok()) co_return fail(head.status());
  call->Disarm();
  auto r = std::make_unique<Response>(call, head->status, head->body, head->content_length);
  if (absl::Status f = r->Feed(std::string_view(in).substr(head_bytes)); !f.ok()) co_return f;
  co_return std::unique_ptr<HttpClientResponse>(std::move(r));
}

net::awaitable<absl::StatusOr<HttpResult>> HttpCall(
    net::io_context& ioc, const common::HttpUrl& url, std::string_view method, std::string path,
    std::string body, milliseconds timeout,
    std::vector<std::pair<std::string, std::string>> headers,
    std::shared_ptr<boost::asio::ssl::context> tls) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  HttpClientRequest request{std::string(method), std::move(path), std::move(headers),
                            std::move(body), "kvgate-control"};
  auto r = co_await HttpOpen(ioc, url, std::move(request), timeout, std::move(tls));
  if (!r.ok()) co_return r.status();
  const auto left =
      std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
  auto body_read = co_await (*r)->ReadAll(std::max(left, milliseconds(1)), kMaxCallBytes);
  if (!body_read.ok()) co_return body_read.status();
  co_return HttpResult{(*r)->status(), *std::move(body_read)};
}

absl::StatusOr<HttpResult> HttpCallBlocking(
    const common::HttpUrl& url, std::string_view method, std::string path, std::string body,
    milliseconds timeout, std::vector<std::pair<std::string, std::string>> headers,
    std::shared_ptr<boost::asio::ssl::context> tls) {
  net::io_context ioc(1);
  std::optional<absl::StatusOr<HttpResult>> out;
  // `url` and `method` outlive the coroutine: ioc.run() returns only once it has ended.
  net::co_spawn(ioc,
                HttpCall(ioc, url, method, std::move(path), std::move(body), timeout,
                         std::move(headers), std::move(tls)),
                [&out, &url](std::exception_ptr e, absl::StatusOr<HttpResult> r) {
                  // Asio reports errors as values here; an exception is an allocation failure.
                  if (e) {
                    out = absl::InternalError(
                        common::StrCat(url.Authority(), ": the call failed with an exception"));
                  } else {
                    out = std::move(r);
                  }
                });
  ioc.run();
  if (!out.has_value()) {
    return absl::InternalError(common::StrCat(url.Authority(), ": the call never completed"));
  }
  return *std::move(out);
}

}  // namespace kvgate::router
