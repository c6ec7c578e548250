// File: router/server/address_claim.h
// One kvgate per listen address. The gateway's threads each bind the port with SO_REUSEPORT,
// and the kernel lets any process of the same user join such a group: a second kvgate started
// by mistake on the same address would take part of the traffic with its own config and
// index, silently. Before binding, the gateway claims the address: an abstract Unix socket
// named after it (scoped, like the port, to the network namespace, and released by the kernel
// when the process dies, however it dies), and a bind without SO_REUSEPORT that fails when
// anything else already listens there.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kvgate::router {

class AddressClaim {
 public:
  /// Claims host:port (an IP address and a port other than 0). @return kUnavailable naming the
  /// other kvgate's pid, or the process already listening there, when the address is taken.
  static absl::StatusOr<AddressClaim> Claim(const std::string& host, uint16_t port);

  AddressClaim(AddressClaim&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  AddressClaim& operator=(AddressClaim&& other) noexcept;
  AddressClaim(const AddressClaim&) = delete;
  AddressClaim& operator=(const AddressClaim&) = delete;
  ~AddressClaim();

 private:
  explicit AddressClaim(int fd) : fd_(fd) {}
  int fd_ = -1;  // the abstract socket, held for the process's life
};

}  // namespace kvgate::router
