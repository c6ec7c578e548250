// File: tests/support/etcd_server.h
// A real etcd (Debian's etcd-server) on loopback for tests: one member, its data in a temp dir,
// killed on destruction. Used by the transfer and store tests. Thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tests/support/child_process.h"
#include "tests/support/temp_files.h"

namespace kvgate::testing {

/// The etcd binary, or "" when it is not installed.
std::string FindEtcd();

class EtcdServer {
 public:
  /// Starts etcd and waits until it answers. Ports: etcd cannot bind port 0, so free ones are
  /// picked just before it starts.
  bool Start(const std::string& binary);
  /// "etcd://127.0.0.1:PORT/prefix?ttl_s=N" (the transfer metadata URI).
  std::string Uri(const std::string& prefix, int ttl_s) const;
  uint16_t port() const { return client_port_; }

 private:
  TempDir dir_{"kvgate-etcd"};
  std::unique_ptr<ChildProcess> process_;  // Killed on destruction, before dir_ goes.
  uint16_t client_port_ = 0;
};

}  // namespace kvgate::testing
