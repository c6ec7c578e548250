#include "router/discovery/kube_client.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/strings.h"
#include "router/net/body_framing.h"
#include "router/net/http1.h"
#include "router/net/tls.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {
namespace {

using std::chrono::milliseconds;

constexpr size_t kMaxLineBytes = 16u << 20;  // one watch event (a large EndpointSlice)
constexpr size_t kMaxBodyBytes = 64u << 20;  // a list of every slice in a namespace

// A connection and the timer that closes it when an operation overruns. The timer's handler
// holds the connection weakly, so a connection dropped by its reader is freed at once.
struct Conn {
  Conn(net::io_context& ioc, std::shared_ptr<ssl::context> tls)
      : stream(ioc, std::move(tls)), timer(ioc) {}

  void Arm(const std::shared_ptr<Conn>& self, milliseconds d) {
    expired = false;
    timer.expires_after(d);
    timer.async_wait([weak = std::weak_ptr<Conn>(self)](const error_code& ec) {
      if (ec) return;
      if (auto c = weak.lock()) {
        c->expired = true;
        c->stream.Close();
      }
    });
  }
  void Disarm() { timer.cancel(); }

  ClientStream stream;
  net::steady_timer timer;
  bool expired = false;
};

// The service account token, trimmed; empty when the file cannot be read.
std::string ReadToken(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string t = ss.str();
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  return t;
}

class Response : public KubeResponse {
 public:
  Response(std::shared_ptr<Conn> conn, int status, http1::BodyKind kind, uint64_t length,
           std::string authority)
      : conn_(std::move(conn)),
        status_(status),
        framing_(kind, length),
        authority_(std::move(authority)) {}
  ~Response() override {
    conn_->Disarm();
    conn_->stream.Close();
  }

  int status() const override { return status_; }

  // Feeds bytes that followed the head.
  absl::Status Feed(std::string_view bytes) {
    size_t consumed = 0;
    const auto st =
        framing_.Feed(bytes, &consumed, [this](std::string_view d) { payload_.append(d); });
    if (st == http1::BodyFraming::Status::kError) {
      return absl::UnavailableError(
          common::StrCat(authority_, ": malformed response body: ", framing_.error()));
    }
    ended_ = st == http1::BodyFraming::Status::kDone;
    return absl::OkStatus();
  }

  net::awaitable<absl::StatusOr<std::optional<std::string>>> NextLine(milliseconds idle) override {
    for (;;) {
      if (const size_t nl = payload_.find('\n', scanned_); nl != std::string::npos) {
        std::string line = payload_.substr(0, nl);
        payload_.erase(0, nl + 1);
        scanned_ = 0;
        co_return std::optional<std::string>(std::move(line));
      }
      scanned_ = payload_.size();
      if (payload_.size() > kMaxLineBytes) {
        co_return absl::UnavailableError(
            common::StrCat(authority_, ": a line of over ", kMaxLineBytes, " bytes"));
      }
      if (ended_) {
        if (payload_.empty()) co_return std::optional<std::string>();
        std::string rest = std::move(payload_);
        payload_.clear();
        scanned_ = 0;
        co_return std::optional<std::string>(std::move(rest));
      }
      conn_->Arm(conn_, idle);
      absl::Status s = co_await Fill();
      conn_->Disarm();
      if (!s.ok()) co_return s;
    }
  }

  net::awaitable<absl::StatusOr<std::string>> ReadAll(milliseconds timeout) override {
    conn_->Arm(conn_, timeout);
    while (!ended_) {
      if (absl::Status s = co_await Fill(); !s.ok()) {
        conn_->Disarm();
        co_return s;
      }
      if (payload_.size() > kMaxBodyBytes) {
        conn_->Disarm();
        co_return absl::UnavailableError(
            common::StrCat(authority_, ": response larger than ", kMaxBodyBytes, " bytes"));
      }
    }
    conn_->Disarm();
    scanned_ = 0;
    co_return std::move(payload_);
  }

 private:
  // Reads what the server sent next into payload_ (the timer is armed by the caller).
  net::awaitable<absl::Status> Fill() {
    char buf[16384];
    auto [ec, n] = co_await conn_->stream.ReadSome(net::buffer(buf));
    if (n > 0) {
      if (absl::Status s = Feed(std::string_view(buf, n)); !s.ok()) co_return s;
    }
    if (!ec || ended_) co_return absl::OkStatus();
    if (conn_->expired) {
      co_return absl::DeadlineExceededError(common::StrCat(authority_, ": no data in time"));
    }
    if (ec == net::error::eof || ec == ssl::error::stream_truncated) {
      if (framing_.OnEof() == http1::BodyFraming::Status::kDone) {
        ended_ = true;
        co_return absl::OkStatus();
      }
      co_return absl::UnavailableError(
          common::StrCat(authority_, ": connection closed mid-body: ", framing_.error()));
    }
    co_return absl::UnavailableError(
        common::StrCat("reading from ", authority_, ": ", ec.message()));
  }

  std::shared_ptr<Conn> conn_;
  const int status_;
  http1::BodyFraming framing_;
  const std::string authority_;
  std::string payload_;  // de-chunked body bytes not yet returned
  size_t scanned_ = 0;   // payload_ bytes known to hold no '\n'
  bool ended_ = false;
};

}  // namespace

struct KubeClient::Impl {
  net::io_context& ioc;
  KubeClientOptions options;
  std::shared_ptr<ssl::context> tls;  // null for http
  bool warned_token = false;
};

KubeClient::KubeClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KubeClient::~KubeClient() = default;

const KubeClientOptions& KubeClient::options() const { return impl_->options; }

absl::StatusOr<std::unique_ptr<KubeClient>> KubeClient::Create(net::io_context& ioc,
                                                               KubeClientOptions options) {
  auto impl = std::unique_ptr<Impl>(new Impl{ioc, std::move(options), nullptr});
  if (impl->options.server.scheme == "https") {
    auto ctx = MakeTlsClientContext(impl->options.ca_file, "", "");
    if (!ctx.ok()) return ctx.status();
    impl->tls = *std::move(ctx);
  }
  return std::unique_ptr<KubeClient>(new KubeClient(std::move(impl)));
}

net::awaitable<absl::StatusOr<std::unique_ptr<KubeResponse>>> KubeClient::Open(std::string path) {
  Impl& s = *impl_;
  const common::HttpUrl& url = s.options.server;
  auto conn = std::make_shared<Conn>(s.ioc, s.tls);
  conn->Arm(conn, s.options.timeout);
  auto fail = [&](absl::Status st) -> absl::Status {
    conn->Disarm();
    conn->stream.Close();
    if (conn->expired) {
      return absl::DeadlineExceededError(
          common::StrCat(url.Authority(), ": no answer within ", s.options.timeout.count(), " ms"));
    }
    return st;
  };
  if (absl::Status c = co_await conn->stream.Connect(url); !c.ok()) co_return fail(c);

  std::string request =
      common::StrCat("GET ", url.base_path, path, " HTTP/1.1\r\nhost: ", url.Authority(),
                     "\r\nuser-agent: kvgate\r\naccept: application/json\r\n");
  if (s.tls) {
    const std::string token = ReadToken(s.options.token_file);
    if (!token.empty()) {
      common::StrAppend(&request, "authorization: Bearer ", token, "\r\n");
    } else if (!s.warned_token) {
      s.warned_token = true;
      spdlog::warn("discovery: no service account token in '{}'; calling {} without one",
                   s.options.token_file, url.ToString());
    }
  }
  request += "connection: close\r\n\r\n";
  if (auto [wec, wn] = co_await conn->stream.WriteAll(net::buffer(request)); wec) {
    co_return fail(absl::UnavailableError(
        common::StrCat("writing to ", url.Authority(), ": ", wec.message())));
  }

  std::string in;
  char buf[16384];
  for (;;) {
    auto [ec, n] = co_await conn->stream.ReadSome(net::buffer(buf));
    if (n > 0) in.append(buf, n);
    http1::ResponseHead head;
    const auto pr = http1::ParseResponseHead(in, http1::Method::kGet, {}, &head);
    if (pr.status == http1::ParseStatus::kError) {
      co_return fail(absl::UnavailableError(
          common::StrCat(url.Authority(), ": malformed response: ", pr.error)));
    }
    if (pr.status == http1::ParseStatus::kComplete) {
      if (head.status < 200) {  // informational: the real head follows
        in.erase(0, pr.head_bytes);
        continue;
      }
      auto r = std::make_unique<Response>(conn, head.status, head.body, head.content_length,
                                          url.Authority());
      conn->Disarm();
      if (absl::Status f = r->Feed(std::string_view(in).substr(pr.head_bytes)); !f.ok()) {
        co_return f;
      }
      co_return std::unique_ptr<KubeResponse>(std::move(r));
    }
    if (ec) {
      co_return fail(absl::UnavailableError(common::StrCat(
          url.Authority(), ": connection closed before a response: ", ec.message())));
    }
  }
}

net::awaitable<absl::StatusOr<std::pair<int, std::string>>> KubeClient::Get(std::string path) {
  auto r = co_await Open(std::move(path));
  if (!r.ok()) co_return r.status();
  auto body = co_await (*r)->ReadAll(impl_->options.timeout);
  if (!body.ok()) co_return body.status();
  co_return std::make_pair((*r)->status(), *std::move(body));
}

absl::StatusOr<common::HttpUrl> InClusterApiServer() {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0') {
    return absl::FailedPreconditionError(
        "KUBERNETES_SERVICE_HOST is not set (not in a pod): set discovery.kubernetes[].api_server");
  }
  const std::string h(host);
  const bool v6 = h.find(':') != std::string::npos;
  return common::ParseHttpUrl(common::StrCat("https://", v6 ? "[" : "", h, v6 ? "]" : "", ":",
                                             port != nullptr && *port != '\0' ? port : "443"),
                              /*allow_https=*/true);
}

std::string QueryEscape(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace kvgate::router
