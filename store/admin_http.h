// File: store/admin_http.h
// kvgate-store's HTTP listener: GET /health, /metrics (Prometheus text format) and
// /admin/store (JSON). One thread multiplexes the connections (at most 64 waiting, the oldest
// giving way; a request head must arrive within 2 s), answers one request on each and closes it;
// the pages are small and scraped every few seconds. Anything else is a 404 with a JSON body. Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace kvgate::store {

struct AdminPages {
  std::function<std::pair<int, std::string>()> health;  // Status and JSON body.
  std::function<std::string()> metrics;
  std::function<std::string()> admin;  // JSON.
};

class AdminHttpServer {
 public:
  static absl::StatusOr<std::unique_ptr<AdminHttpServer>> Start(const std::string& host,
                                                                uint16_t port, AdminPages pages);
  ~AdminHttpServer();
  uint16_t port() const { return port_; }

 private:
  AdminHttpServer(int fd, uint16_t port, AdminPages pages);
  void Run();
  void Respond(int fd, const std::string& head);

  const int fd_;
  const uint16_t port_;
  const AdminPages pages_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvgate::store
