// File: router/discovery/kube_client.h
// A client of the Kubernetes API server for discovery: GETs whose answer is read whole (a
// list, a pod) and watches whose chunked answer is read a line (one watch event) at a time,
// over HTTPS with the service account's bearer token and CA bundle — both re-read per call,
// as the kubelet rotates the projected token — or over plain HTTP (kubectl proxy, tests)
// without the token. Include only from .cc files (Asio). Thread-compatible: one coroutine at a
// time on the caller's io_context.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/url.h"
#include "net/asio.h"

namespace kvgate::router {

struct KubeClientOptions {
  common::HttpUrl server;  // http or https
  std::string token_file;  // https only; a missing file sends no token (and is logged)
  std::string ca_file;     // https only
  std::chrono::milliseconds timeout{5'000};  // connect + response head (+ whole body for Get)
};

/// One response being read: the status, then the body's lines as they arrive.
class KubeResponse {
 public:
  virtual ~KubeResponse() = default;
  virtual int status() const = 0;
  /// The next '\n'-terminated line of the body (without it; a last line without one too);
  /// nullopt once the body ended. Fails on transport errors, malformed framing, a line over
  /// 16 MiB, or `idle` without a byte.
  virtual net::awaitable<absl::StatusOr<std::optional<std::string>>> NextLine(
      std::chrono::milliseconds idle) = 0;
  /// The rest of the body (at most 64 MiB), within `timeout`.
  virtual net::awaitable<absl::StatusOr<std::string>> ReadAll(
      std::chrono::milliseconds timeout) = 0;
};

class KubeClient {
 public:
  /// Fails when the CA bundle of an https server cannot be loaded.
  static absl::StatusOr<std::unique_ptr<KubeClient>> Create(net::io_context& ioc,
                                                            KubeClientOptions options);
  ~KubeClient();

  /// Sends `GET path` (path with its query) and reads the response head.
  net::awaitable<absl::StatusOr<std::unique_ptr<KubeResponse>>> Open(std::string path);

  /// `GET path`, its body read whole: the status and the body.
  net::awaitable<absl::StatusOr<std::pair<int, std::string>>> Get(std::string path);

  const KubeClientOptions& options() const;

 private:
  struct Impl;
  explicit KubeClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT" inside a pod.
absl::StatusOr<common::HttpUrl> InClusterApiServer();

/// `s` percent-encoded for a URL query value (label selectors: '=', ',', '!').
std::string QueryEscape(std::string_view s);

}  // namespace kvgate::router
