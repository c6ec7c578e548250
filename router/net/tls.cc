#include "router/net/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <boost/asio/ssl/host_name_verification.hpp>

#include "common/strings.h"
#include "router/net/tls_socket.h"
#include "router/net/upstream_pool.h"

namespace kvgate::router {
namespace {

// OpenSSL's reason for the last failure, or the error code's message.
std::string OpenSslError(const error_code& ec) { return TakeOpenSslError(ec.message()); }

}  // namespace

absl::StatusOr<std::shared_ptr<ssl::context>> MakeTlsClientContext(const std::string& ca_file,
                                                                   const std::string& cert_file,
                                                                   const std::string& key_file) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  error_code ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1,
                   ec);
  if (ca_file.empty()) {
    ctx->set_default_verify_paths(ec);
  } else {
    ctx->load_verify_file(ca_file, ec);
  }
  if (ec) {
    return absl::InvalidArgumentError(common::StrCat("cannot load CA bundle '",
                                                     ca_file.empty() ? "(system)" : ca_file,
                                                     "': ", OpenSslError(ec)));
  }
  if (!cert_file.empty() && !key_file.empty()) {
    ctx->use_certificate_chain_file(cert_file, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          common::StrCat("cannot load certificate '", cert_file, "': ", OpenSslError(ec)));
    }
    ctx->use_private_key_file(key_file, ssl::context::pem, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          common::StrCat("cannot load key '", key_file, "': ", OpenSslError(ec)));
    }
  }
  ctx->set_verify_mode(ssl::verify_peer);
  // A peer that closes without close_notify ends the stream like EOF; HTTP framing still
  // tells a complete message from a cut one.
  SSL_CTX_set_options(ctx->native_handle(), SSL_OP_IGNORE_UNEXPECTED_EOF);
  return ctx;
}

ClientStream::ClientStream(net::io_context& ioc, std::shared_ptr<ssl::context> tls)
    : tls_context_(std::move(tls)) {
  if (tls_context_) {
    tls_ = std::make_unique<ssl::stream<tcp::socket>>(ioc, *tls_context_);
  } else {
    plain_ = std::make_unique<tcp::socket>(ioc);
  }
}

tcp::socket& ClientStream::lowest() { return tls_ ? tls_->next_layer() : *plain_; }

void ClientStream::Close() {
  error_code ignored;
  lowest().close(ignored);
}

net::awaitable<absl::Status> ClientStream::Connect(const common::HttpUrl& url) {
  auto& ioc = static_cast<net::io_context&>(lowest().get_executor().context());
  if (absl::Status s = co_await ConnectTo(ioc, url, lowest()); !s.ok()) co_return s;
  if (!tls_) co_return absl::OkStatus();
  // SNI for names, not for address literals (RFC 6066); the certificate must name the host.
  error_code not_ip;
  net::ip::make_address(url.host, not_ip);
  if (not_ip) SSL_set_tlsext_host_name(tls_->native_handle(), url.host.c_str());
  tls_->set_verify_callback(ssl::host_name_verification(url.host));
  auto [hec] = co_await tls_->async_handshake(ssl::stream_base::client, kNoThrow);
  if (hec) {
    co_return absl::UnavailableError(
        common::StrCat("TLS handshake with ", url.Authority(), ": ", OpenSslError(hec)));
  }
  co_return absl::OkStatus();
}

net::awaitable<std::tuple<error_code, size_t>> ClientStream::ReadSome(net::mutable_buffer buffer) {
  if (tls_) co_return co_await tls_->async_read_some(buffer, kNoThrow);
  co_return co_await plain_->async_read_some(buffer, kNoThrow);
}

net::awaitable<std::tuple<error_code, size_t>> ClientStream::WriteAll(net::const_buffer buffer) {
  if (tls_) co_return co_await net::async_write(*tls_, buffer, kNoThrow);
  co_return co_await net::async_write(*plain_, buffer, kNoThrow);
}

}  // namespace kvgate::router
