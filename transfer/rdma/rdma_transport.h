// File: transfer/rdma/rdma_transport.h
// The `rdma` transport: ibverbs RC queue pairs, one-sided RDMA READ/WRITE. Every registered
// buffer gets a memory region per NIC (ibv_reg_mr; ibv_reg_dmabuf_mr with a dma-buf exported by
// the GPU runtime for device memory, i.e. GPUDirect RDMA). Requests are cut into slices striped
// over (local NIC, remote NIC) endpoints and their QPs; endpoints are created on first use by a
// TCP handshake with the owner and rebuilt after an error. One CQ-polling thread per NIC, outside
// Asio. Built when libibverbs is found (KVGATE_WITH_RDMA); CreateRdmaTransport() probes the
// hardware and returns kUnavailable "no RDMA device ..." without it. The class lives in the .cc;
// thread-safe.
#pragma once

#include "absl/status/statusor.h"
#include "transfer/transport.h"
#include "transfer/transport_params.h"

namespace kvgate::transfer {

absl::StatusOr<TransportPtr> CreateRdmaTransport(const RdmaParams& params);

}  // namespace kvgate::transfer
