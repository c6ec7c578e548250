// File: transfer/shm/shm_transport.h
// The `shm` transport, for peers on the same host: a peer's managed (memfd) buffers are mapped
// into this process once, after their descriptors arrive over the owner's Unix socket
// (SCM_RIGHTS); READ and WRITE are then plain copies on the engine's copy workers. Only managed
// buffers (TransferEngine::AllocateManagedMemory) are shareable; requests to other buffers fall
// through to the next transport. The class lives in the .cc; thread-safe.
#pragma once

#include "absl/status/statusor.h"
#include "transfer/transport.h"
#include "transfer/transport_params.h"

namespace kvgate::transfer {

absl::StatusOr<TransportPtr> CreateShmTransport(const ShmParams& params);

}  // namespace kvgate::transfer
