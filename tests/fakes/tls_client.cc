#include "tests/fakes/tls_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace kvgate::testing {
namespace {

std::string LastSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "TLS failure";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

void SetTimeout(int fd, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = t.count() / 1000;
  tv.tv_usec = (t.count() % 1000) * 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

}  // namespace

struct TlsClient::Impl {
  TlsClientOptions options;
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  int fd = -1;
  std::string pending;  // bytes read past the last response

  ~Impl() {
    if (ssl != nullptr) SSL_free(ssl);
    if (ctx != nullptr) SSL_CTX_free(ctx);
    if (fd >= 0) ::close(fd);
  }

  // Appends what one SSL_read returns; false at close or failure.
  bool ReadMore() {
    char buf[16384];
    const int n = SSL_read(ssl, buf, sizeof(buf));
    if (n <= 0) {
      ERR_clear_error();
      return false;
    }
    pending.append(buf, static_cast<size_t>(n));
    return true;
  }
};

TlsClient::TlsClient(TlsClientOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
}

TlsClient::~TlsClient() = default;

bool TlsClient::Connect(uint16_t port, std::chrono::milliseconds timeout) {
  Impl& s = *impl_;
  s.ctx = SSL_CTX_new(TLS_client_method());
  if (SSL_CTX_load_verify_locations(s.ctx, s.options.ca_file.c_str(), nullptr) != 1) {
    error_ = "cannot load CA " + s.options.ca_file + ": " + LastSslError();
    return false;
  }
  SSL_CTX_set_verify(s.ctx, SSL_VERIFY_PEER, nullptr);
  if (!s.options.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(s.ctx, s.options.cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(s.ctx, s.options.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      error_ = "cannot load client certificate: " + LastSslError();
      return false;
    }
  }
  s.fd = ::socket(AF_INET, SOCK_STREAM, 0);
  SetTimeout(s.fd, timeout);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    error_ = std::string("connect: ") + std::strerror(errno);
    return false;
  }
  s.ssl = SSL_new(s.ctx);
  SSL_set_fd(s.ssl, s.fd);
  SSL_set_tlsext_host_name(s.ssl, s.options.host.c_str());
  SSL_set1_host(s.ssl, s.options.host.c_str());
  if (SSL_connect(s.ssl) != 1) {
    error_ = "handshake: " + LastSslError();
    return false;
  }
  // Server errors on a completed TLS 1.3 handshake (a refused client certificate) arrive
  // with the first read; Send/Read report them.
  return true;
}

bool TlsClient::Send(const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const int n = SSL_write(impl_->ssl, bytes.data() + done, static_cast<int>(bytes.size() - done));
    if (n <= 0) {
      error_ = "write: " + LastSslError();
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string TlsClient::ReadResponse(std::chrono::milliseconds timeout) {
  Impl& s = *impl_;
  SetTimeout(s.fd, timeout);
  size_t head_end;
  while ((head_end = s.pending.find("\r\n\r\n")) == std::string::npos) {
    if (!s.ReadMore()) {
      error_ = "no response head";
      return "";
    }
  }
  head_end += 4;
  std::string lower = s.pending.substr(0, head_end);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t cl = lower.find("\r\ncontent-length:");
  if (cl == std::string::npos) return ReadAll(timeout);
  const size_t length = std::strtoull(lower.c_str() + cl + 17, nullptr, 10);
  while (s.pending.size() < head_end + length) {
    if (!s.ReadMore()) {
      error_ = "body cut short";
      return "";
    }
  }
  std::string out = s.pending.substr(0, head_end + length);
  s.pending.erase(0, head_end + length);
  return out;
}

std::string TlsClient::ReadAll(std::chrono::milliseconds timeout) {
  Impl& s = *impl_;
  SetTimeout(s.fd, timeout);
  while (s.ReadMore()) {
  }
  std::string out;
  out.swap(s.pending);
  return out;
}

std::string TlsExchange(uint16_t port, const TlsClientOptions& options, const std::string& request,
                        std::string* error) {
  TlsClient c(options);
  if (!c.Connect(port) || !c.Send(request)) {
    if (error != nullptr) *error = c.error();
    return "";
  }
  std::string out = c.ReadAll();
  if (out.empty() && error != nullptr) *error = "closed without a response";
  return out;
}

}  // namespace kvgate::testing
