// File: router/net/tls.h
// TLS client contexts for the gateway's own outgoing calls (the Kubernetes API server), and a
// TLS-or-plain connection that control-plane clients read and write the same way. Include only
// from .cc files (Asio, OpenSSL). Thread-compatible.
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/url.h"
#include "router/net/asio.h"

namespace kvgate::router {

namespace ssl = boost::asio::ssl;

/// A TLS 1.2+ client context that verifies servers against the PEM bundle `ca_file` (empty: the
/// system's default store) and presents `cert_file`/`key_file` when both are set.
/// @return kInvalidArgument naming the file OpenSSL could not load.
absl::StatusOr<std::shared_ptr<ssl::context>> MakeTlsClientContext(const std::string& ca_file,
                                                                   const std::string& cert_file,
                                                                   const std::string& key_file);

/// One connection to a server, over TLS when made with a context. Timeouts close the TCP
/// socket underneath, failing whatever read or write is pending.
class ClientStream {
 public:
  /// `tls` null: plain TCP.
  ClientStream(net::io_context& ioc, std::shared_ptr<ssl::context> tls);

  /// Connects to `url`'s host and port (a name is resolved) and, over TLS, handshakes with SNI
  /// and checks that the certificate names the host (a DNS name or an IP address).
  net::awaitable<absl::Status> Connect(const common::HttpUrl& url);
  net::awaitable<std::tuple<error_code, size_t>> ReadSome(net::mutable_buffer buffer);
  net::awaitable<std::tuple<error_code, size_t>> WriteAll(net::const_buffer buffer);
  /// The TCP socket underneath (to close it from a timer).
  tcp::socket& lowest();
  void Close();

 private:
  std::shared_ptr<ssl::context> tls_context_;
  std::unique_ptr<tcp::socket> plain_;
  std::unique_ptr<ssl::stream<tcp::socket>> tls_;
};

}  // namespace kvgate::router
