#include "router/discovery/kube_client.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/strings.h"
#include "net/http_client.h"
#include "net/tls_socket.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {
namespace {

using std::chrono::milliseconds;

constexpr size_t kMaxLineBytes = 16u << 20;  // one watch event (a large EndpointSlice)
constexpr size_t kMaxBodyBytes = 64u << 20;  // a list of every slice in a namespace

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

// A response of the API server: the one HTTP client's, with discovery's size limits.
class Response : public KubeResponse {
 public:
  explicit Response(std::unique_ptr<HttpClientResponse> r) : r_(std::move(r)) {}
  int status() const override { return r_->status(); }
  net::awaitable<absl::StatusOr<std::optional<std::string>>> NextLine(milliseconds idle) override {
    return r_->NextLine(idle, kMaxLineBytes);
  }
  net::awaitable<absl::StatusOr<std::string>> ReadAll(milliseconds timeout) override {
    return r_->ReadAll(timeout, kMaxBodyBytes);
  }

 private:
  std::unique_ptr<HttpClientResponse> r_;
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
  HttpClientRequest request{.method = "GET", .target = std::move(path)};
  request.headers.emplace_back("accept", "application/json");
  if (s.tls) {
    const std::string token = ReadToken(s.options.token_file);
    if (!token.empty()) {
      request.headers.emplace_back("authorization", common::StrCat("Bearer ", token));
    } else if (!s.warned_token) {
      s.warned_token = true;
      spdlog::warn("discovery: no service account token in '{}'; calling {} without one",
                   s.options.token_file, s.options.server.ToString());
    }
  }
  auto r = co_await HttpOpen(s.ioc, s.options.server, std::move(request), s.options.timeout, s.tls);
  if (!r.ok()) co_return r.status();
  co_return std::unique_ptr<KubeResponse>(std::make_unique<Response>(*std::move(r)));
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
