// File: tests/transfer/etcd_server.h
// A real etcd (Debian's etcd-server) on loopback for tests: one member, its data in a temp dir,
// killed on destruction. Used by the transfer and store tests. Thread-compatible.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "tests/transfer/test_support.h"

namespace kvgate::transfer::testing {

/// The etcd binary, or "" when it is not installed.
std::string FindEtcd();

class EtcdServer {
 public:
  /// Starts etcd and waits until it answers. Ports: etcd cannot bind port 0, so free ones are
  /// picked just before it starts.
  bool Start(const std::string& binary);
  ~EtcdServer();
  /// "etcd://127.0.0.1:PORT/prefix?ttl_s=N" (the transfer metadata URI).
  std::string Uri(const std::string& prefix, int ttl_s) const;
  uint16_t port() const { return client_port_; }

 private:
  TempDir dir_;
  std::string log_;
  pid_t pid_ = -1;
  uint16_t client_port_ = 0;
};

}  // namespace kvgate::transfer::testing
