// File: transfer/tcp/tcp_transport.h
// The `tcp` transport (Asio): requests are cut into slices (TcpParams::slice_bytes, 64 KiB by
// default) striped over several connections per owner; the owner serves one-sided READ/WRITE
// on its registered buffers, checking every range. Payloads go between the socket and
// registered memory directly (scatter/gather I/O, no staging copy) except device memory, which
// is bounced through pinned host chunks. A broken connection fails or resends its slices and is
// rebuilt on next use; a watchdog fails slices at their deadline. The class lives in
// tcp_client.cc; thread-safe.
#pragma once

#include "absl/status/statusor.h"
#include "transfer/transport.h"
#include "transfer/transport_params.h"

namespace kvgate::transfer {

absl::StatusOr<TransportPtr> CreateTcpTransport(const TcpParams& params);

}  // namespace kvgate::transfer
