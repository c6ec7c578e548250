// File: tests/fakes/tls_client.h
// A blocking TLS client for tests (OpenSSL over a loopback socket): it verifies the server
// against a CA file (and its name), may present a client certificate, and sends raw HTTP/1.1
// bytes. Thread-compatible; one per test thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace kvgate::testing {

struct TlsClientOptions {
  std::string ca_file;          // the CA the server's certificate must chain to
  std::string host = "localhost";  // SNI and the name the certificate must carry
  std::string cert_file;        // a client certificate (mutual TLS); empty: none
  std::string key_file;
};

class TlsClient {
 public:
  explicit TlsClient(TlsClientOptions options);
  ~TlsClient();

  /// Connects to 127.0.0.1:`port` and handshakes; false with error() on failure.
  bool Connect(uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(5));
  /// Sends `bytes`; false on failure.
  bool Send(const std::string& bytes);
  /// One response with a Content-Length body (head and body), or everything until the server
  /// closes when the response has no length; empty on failure or timeout.
  std::string ReadResponse(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  /// Everything until the server closes the connection.
  std::string ReadAll(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  const std::string& error() const { return error_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string error_;
};

/// One request on a new TLS connection ("connection: close" is the caller's to send):
/// everything the server sent, or "" with `*error` set when the handshake failed.
std::string TlsExchange(uint16_t port, const TlsClientOptions& options, const std::string& request,
                        std::string* error = nullptr);

}  // namespace kvgate::testing
