#include "net/tls_socket.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <cerrno>
#include <cstring>

#include "common/strings.h"

namespace kvgate::router {
std::string TakeOpenSslError(std::string_view fallback) {
  std::string out(fallback);
  if (const unsigned long e = ERR_peek_last_error(); e != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    out = buf;
  }
  ERR_clear_error();
  return out;
}

namespace {

int SelectHttp11(SSL*, const unsigned char** out, unsigned char* out_len, const unsigned char* in,
                 unsigned int in_len, void*) {
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, out_len, kHttp11, sizeof(kHttp11), in, in_len) ==
      OPENSSL_NPN_NEGOTIATED) {
    *out = selected;
    return SSL_TLSEXT_ERR_OK;
  }
  return SSL_TLSEXT_ERR_NOACK;  // a client without http/1.1 in its list gets no ALPN answer
}

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

absl::StatusOr<std::shared_ptr<ssl::context>> MakeTlsServerContext(
    const std::string& cert_file, const std::string& key_file, const std::string& client_ca_file) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* c = ctx->native_handle();
  SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
  SSL_CTX_set_options(c, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                             SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_COMPRESSION);
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(c, cert_file.c_str()) != 1) {
    return absl::InvalidArgumentError(common::StrCat("tls.cert_file: cannot load '", cert_file,
                                                     "': ", TakeOpenSslError("unreadable")));
  }
  if (SSL_CTX_use_PrivateKey_file(c, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return absl::InvalidArgumentError(common::StrCat("tls.key_file: cannot load '", key_file,
                                                     "': ", TakeOpenSslError("unreadable")));
  }
  if (SSL_CTX_check_private_key(c) != 1) {
    return absl::InvalidArgumentError(
        common::StrCat("tls: the key in '", key_file, "' does not match the certificate in '",
                       cert_file, "': ", TakeOpenSslError("mismatch")));
  }
  if (!client_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(c, client_ca_file.c_str(), nullptr) != 1) {
      return absl::InvalidArgumentError(common::StrCat("tls.client_ca_file: cannot load '",
                                                       client_ca_file,
                                                       "': ", TakeOpenSslError("unreadable")));
    }
    SSL_CTX_set_client_CA_list(c, SSL_load_client_CA_file(client_ca_file.c_str()));
    SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  static const unsigned char kSessionContext[] = "kvgate";
  SSL_CTX_set_session_id_context(c, kSessionContext, sizeof(kSessionContext) - 1);
  SSL_CTX_set_alpn_select_cb(c, &SelectHttp11, nullptr);
  // Read whatever the socket holds, not a record header and then its body: one read(2) per
  // request instead of two. Safe with the wait discipline: OpenSSL asks for more (WANT_READ)
  // only after the socket said EAGAIN.
  SSL_CTX_set_read_ahead(c, 1);
  ERR_clear_error();
  return ctx;
}

absl::StatusOr<std::shared_ptr<const TlsContexts>> MakeTlsContexts(const TlsFiles& files) {
  auto out = std::make_shared<TlsContexts>();
  if (!files.server_cert_file.empty()) {
    auto server =
        MakeTlsServerContext(files.server_cert_file, files.server_key_file, files.client_ca_file);
    if (!server.ok()) return server.status();
    out->server = *std::move(server);
  }
  auto upstream = MakeTlsClientContext(files.upstream_ca_file, files.upstream_cert_file,
                                       files.upstream_key_file);
  if (!upstream.ok()) {
    return absl::InvalidArgumentError(
        common::StrCat("upstream.tls: ", upstream.status().message()));
  }
  out->upstream = *std::move(upstream);
  return out;
}

TlsSocket::TlsSocket(ssl::context& context, tcp::socket& socket, Role role, std::string_view host)
    : socket_(socket) {
  ssl_ = SSL_new(context.native_handle());
  if (ssl_ == nullptr) {
    error_ = TakeOpenSslError("out of memory");
    return;
  }
  SSL_set_fd(ssl_, static_cast<int>(socket.native_handle()));  // the socket keeps the fd
  SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                         SSL_MODE_RELEASE_BUFFERS);
  if (role == Role::kServer) {
    SSL_set_accept_state(ssl_);
    return;
  }
  SSL_set_connect_state(ssl_);
  const std::string name(host);
  error_code not_ip;
  net::ip::make_address(name, not_ip);
  if (not_ip) {
    SSL_set_tlsext_host_name(ssl_, name.c_str());  // SNI is for names only (RFC 6066)
    SSL_set1_host(ssl_, name.c_str());
  } else {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), name.c_str());
  }
  ERR_clear_error();
}

TlsSocket::~TlsSocket() {
  if (ssl_ != nullptr) SSL_free(ssl_);
}

error_code TlsSocket::Fail(int result) {
  const int e = SSL_get_error(ssl_, result);
  switch (e) {
    case SSL_ERROR_WANT_READ:
      wait_ = tcp::socket::wait_read;
      return net::error::would_block;
    case SSL_ERROR_WANT_WRITE:
      wait_ = tcp::socket::wait_write;
      return net::error::would_block;
    case SSL_ERROR_ZERO_RETURN:
      ERR_clear_error();
      return net::error::eof;
    case SSL_ERROR_SYSCALL: {
      const int err = errno;
      error_ = TakeOpenSslError(err == 0 ? "connection closed" : std::strerror(err));
      if (err == 0) return net::error::eof;
      return error_code(err, boost::system::system_category());
    }
    default: {
      const unsigned long code = ERR_peek_last_error();
      error_ = TakeOpenSslError("TLS failure");
      return error_code(static_cast<int>(code == 0 ? 1 : code), net::error::get_ssl_category());
    }
  }
}

net::awaitable<error_code> TlsSocket::Handshake() {
  if (ssl_ == nullptr) co_return net::error::no_memory;
  for (;;) {
    const int r = SSL_do_handshake(ssl_);
    if (r == 1) co_return error_code{};
    const error_code ec = Fail(r);
    if (ec != net::error::would_block) {
      if (ec == net::error::eof && error_.empty()) error_ = "the peer closed during the handshake";
      co_return ec;
    }
    // OpenSSL read or wrote until the socket would block: a readiness edge will come.
    auto [wec] = co_await socket_.async_wait(wait_, kNoThrow);
    if (wec) {
      error_ = wec.message();
      co_return wec;
    }
  }
}

size_t TlsSocket::ReadSome(net::mutable_buffer buffer, error_code& ec) {
  size_t n = 0;
  const int r = SSL_read_ex(ssl_, buffer.data(), buffer.size(), &n);
  if (r == 1) {
    ec = {};
    return n;
  }
  ec = Fail(r);
  return 0;
}

size_t TlsSocket::WriteSome(absl::Span<const net::const_buffer> buffers, error_code& ec) {
  ec = {};
  size_t total = 0;
  for (const auto& b : buffers) total += b.size();
  if (buffers.size() > 1 && total <= kJoinBytes) {
    // One record for a chunk header, its payload and CRLF rather than three.
    static thread_local std::string joined;
    joined.clear();
    for (const auto& b : buffers) joined.append(static_cast<const char*>(b.data()), b.size());
    return WriteOne(joined.data(), joined.size(), ec);
  }
  size_t done = 0;
  for (const auto& b : buffers) {
    if (b.size() == 0) continue;
    const size_t n = WriteOne(b.data(), b.size(), ec);
    done += n;
    if (ec || n < b.size()) break;
  }
  // Bytes taken count; the error, if any, comes back on the next call, which starts after them.
  if (done > 0) ec = {};
  return done;
}

size_t TlsSocket::WriteOne(const void* data, size_t size, error_code& ec) {
  size_t n = 0;
  const int r = SSL_write_ex(ssl_, data, size, &n);
  if (r == 1) return n;
  ec = Fail(r);
  return 0;
}

bool TlsSocket::PeerClosed() {
  char byte;
  size_t n = 0;
  const int r = SSL_peek_ex(ssl_, &byte, 1, &n);
  if (r == 1) return false;  // application data: a pipelined request
  const int e = SSL_get_error(ssl_, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return false;  // a record's start
  ERR_clear_error();
  return true;  // close_notify, EOF or a broken session
}

void TlsSocket::Shutdown() {
  if (ssl_ == nullptr || SSL_is_init_finished(ssl_) != 1) return;
  SSL_shutdown(ssl_);
  ERR_clear_error();
}

net::awaitable<error_code> TlsWriteAll(TlsSocket& tls, tcp::socket& socket,
                                       absl::Span<const net::const_buffer> buffers) {
  size_t total = 0;
  for (const auto& b : buffers) total += b.size();
  error_code ec;
  size_t written = tls.WriteSome(buffers, ec);
  if (ec && ec != net::error::would_block) co_return ec;
  if (written == total) co_return error_code{};
  // The rest, copied: the caller's buffers may be reused while this waits, and OpenSSL wants
  // the same bytes again (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER lets them move).
  const std::string rest = UnwrittenBytes(buffers, written);
  size_t done = 0;
  while (done < rest.size()) {
    if (ec == net::error::would_block) {
      auto [wec] = co_await socket.async_wait(tls.wait_type(), kNoThrow);
      if (wec) co_return wec;
    }
    const net::const_buffer piece[] = {net::buffer(rest.data() + done, rest.size() - done)};
    done += tls.WriteSome(piece, ec);
    if (ec && ec != net::error::would_block) co_return ec;
  }
  co_return error_code{};
}

}  // namespace kvgate::router
