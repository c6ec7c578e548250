// File: transfer/shm/unix_socket.h
// Abstract-namespace AF_UNIX SOCK_SEQPACKET sockets for the shm transport, and the one message
// type they carry, optionally with a file descriptor attached (SCM_RIGHTS). SEQPACKET keeps
// message boundaries, so no framing is needed. Stateless helpers; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvgate::transfer::shm_internal {

enum class ShmOp : uint32_t {
  kGet = 1,     // client -> owner: the managed buffer containing `addr`, with its memfd
  kReply = 2,   // owner -> client: `status`, and the buffer (fd attached when ok)
  kRevoke = 3,  // owner -> client: buffer `id` was unregistered; unmap it
};
enum class ShmStatus : uint32_t { kOk = 0, kNotFound = 1, kNotShareable = 2 };

struct ShmMessage {
  ShmOp op = ShmOp::kGet;
  ShmStatus status = ShmStatus::kOk;
  uint64_t seq = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t id = 0;
};

/// Listening socket bound to the abstract name `name` (no filesystem entry). Returns the fd.
absl::StatusOr<int> ListenAbstract(const std::string& name);
/// Connected socket to `name`. @return kUnavailable when nothing listens there.
absl::StatusOr<int> ConnectAbstract(const std::string& name);
/// Sends one message, with `fd` attached when >= 0. @return kUnavailable on a closed peer.
absl::Status SendMessage(int sock, const ShmMessage& msg, int fd = -1);
/// Receives one message; `*fd` gets an attached descriptor or -1. @return kUnavailable at EOF
/// or on error, kInvalidArgument for a malformed message.
absl::Status ReceiveMessage(int sock, ShmMessage* msg, int* fd);

}  // namespace kvgate::transfer::shm_internal
