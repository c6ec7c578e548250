// File: net/tls_socket.h
// TLS on the request path, both ways: the client listener and https:// workers. OpenSSL runs
// straight on the connection's non-blocking socket, driven the way the gateway drives a plain
// socket — try the read or write now, and wait for readiness only when it would block — so TLS
// adds no Asio layer, no extra buffer copy and no suspension when bytes are ready (the design
// HAProxy and nginx use). Idle connections release OpenSSL's buffers (SSL_MODE_RELEASE_BUFFERS).
// Include only from .cc files (Asio, OpenSSL). Thread-compatible: one connection's thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "net/asio.h"

namespace boost::asio::ssl {
class context;
}

typedef struct ssl_st SSL;

namespace kvgate::router {

namespace ssl = boost::asio::ssl;

/// The certificates the gateway holds, made from the config's files; a snapshot keeps them
/// (server/gateway_state.h) so SIGHUP reloads them with the rest. Connections made under an
/// older set keep it until they close (OpenSSL counts the references).
struct TlsContexts {
  std::shared_ptr<ssl::context> server;    // tls.cert_file/key_file; null: the listener is plain
  std::shared_ptr<ssl::context> upstream;  // https:// workers (upstream.tls); null: none
};

/// OpenSSL's last queued reason, or `fallback` when none; clears the queue, which is per thread
/// and would otherwise confuse the next connection's SSL_get_error.
std::string TakeOpenSslError(std::string_view fallback);

/// A TLS 1.2+ client context that verifies servers against the PEM bundle `ca_file` (empty: the
/// system's default store) and presents `cert_file`/`key_file` when both are set.
/// @return kInvalidArgument naming the file OpenSSL could not load.
absl::StatusOr<std::shared_ptr<ssl::context>> MakeTlsClientContext(const std::string& ca_file,
                                                                   const std::string& cert_file,
                                                                   const std::string& key_file);

/// The certificate files behind TlsContexts: net's own copy of the config's tls and
/// upstream.tls sections, so that net/ sits below config/ (the gateway fills it in).
struct TlsFiles {
  std::string server_cert_file;  // tls.cert_file; empty: the listener is plain
  std::string server_key_file;
  std::string client_ca_file;    // set: clients must present a certificate it signed (mTLS)
  std::string upstream_ca_file;  // upstream.tls.ca_file; empty: the system's store
  std::string upstream_cert_file;
  std::string upstream_key_file;
};

/// The contexts `files` asks for: the listener's when server_cert_file is set, and always one
/// for https:// workers. @return kInvalidArgument naming a file that failed.
absl::StatusOr<std::shared_ptr<const TlsContexts>> MakeTlsContexts(const TlsFiles& files);

/// A TLS server context for the client listener: TLS 1.2+, the certificate chain and key from
/// PEM files (checked to match), ALPN http/1.1, no renegotiation. With `client_ca_file`, clients
/// must present a certificate that bundle signed (mutual TLS).
/// @return kInvalidArgument naming the file and OpenSSL's reason.
absl::StatusOr<std::shared_ptr<ssl::context>> MakeTlsServerContext(
    const std::string& cert_file, const std::string& key_file, const std::string& client_ca_file);

class TlsSocket {
 public:
  enum class Role : uint8_t { kServer, kClient };

  /// Binds a TLS session to `socket` (connected and non-blocking; it must outlive this). A
  /// client sends SNI for `host` when it is a name and checks that the certificate names it.
  TlsSocket(ssl::context& context, tcp::socket& socket, Role role, std::string_view host = {});
  ~TlsSocket();
  TlsSocket(const TlsSocket&) = delete;
  TlsSocket& operator=(const TlsSocket&) = delete;

  /// Runs the handshake to its end, waiting for readiness when it must. Cancelling or closing
  /// the socket ends it. @return an error whose reason error() describes.
  net::awaitable<error_code> Handshake();

  /// Decrypted bytes into `buffer`; `would_block` when the socket has none yet (then wait for
  /// wait_type() and call again), `eof` at the peer's close.
  size_t ReadSome(net::mutable_buffer buffer, error_code& ec);

  /// Encrypts and sends as much of `buffers` as the socket takes now (small pieces are joined
  /// into one record); `would_block` when it took none. After a partial or blocked write the
  /// next call must start with the bytes not yet taken (OpenSSL's retry rule).
  size_t WriteSome(absl::Span<const net::const_buffer> buffers, error_code& ec);

  /// What the last `would_block` waits for: usually readability for a read and writability for
  /// a write, but TLS may need the other direction (a key update, a handshake message).
  tcp::socket::wait_type wait_type() const { return wait_; }

  /// Whether the peer closed its side, judged without consuming application data: for the
  /// disconnect watch, where a TLS close_notify is bytes on the socket, not an EOF.
  bool PeerClosed();

  /// Sends close_notify if the socket takes it at once; never waits.
  void Shutdown();

  /// OpenSSL's reason for the last failure, for logs and error messages.
  const std::string& error() const { return error_; }

 private:
  // Maps an OpenSSL result to an error code, remembering the wait and the reason.
  error_code Fail(int result);
  size_t WriteOne(const void* data, size_t size, error_code& ec);

  static constexpr size_t kJoinBytes = 16 * 1024;  // one TLS record's payload

  SSL* ssl_ = nullptr;
  tcp::socket& socket_;
  tcp::socket::wait_type wait_ = tcp::socket::wait_read;
  std::string error_;
};

/// Writes all of `data` through `tls`, waiting for readiness as needed (under whatever deadline
/// the caller set: it cancels the socket).
net::awaitable<error_code> TlsWriteAll(TlsSocket& tls, tcp::socket& socket,
                                       absl::Span<const net::const_buffer> buffers);

}  // namespace kvgate::router
