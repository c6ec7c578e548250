// File: transfer/transport_params.h
// Tunables of each transport, with units in the field names. Plain value types, defaults chosen
// for one host or a small cluster; TransferEngineOptions carries one of each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvgate::transfer {

struct ShmParams {
  uint32_t connect_timeout_ms = 1000;  // Connecting to a peer's socket and each fd request.
};

struct TcpParams {
  std::string listen_address = "0.0.0.0";
  uint16_t listen_port = 0;           // 0: any free port (published in the descriptor).
  std::string advertise_host;         // Host peers connect to; empty: the listen address, or the
                                      // hostname when listening on 0.0.0.0.
  uint32_t slice_bytes = 64 << 10;    // Requests are cut into slices of this size...
  uint32_t connections_per_peer = 4;  // ...striped over this many connections.
  uint32_t max_inflight_slices_per_connection = 64;      // Sent, not yet answered...
  uint32_t max_inflight_bytes_per_connection = 4 << 20;  // ...and their bytes: what a request
                                                         // sent later waits behind.
  uint32_t io_threads = 1;
  uint32_t connect_timeout_ms = 2000;
  uint32_t max_retries_per_slice = 2;        // After a broken connection, on a new connection.
  uint32_t watchdog_interval_ms = 10;        // How often a busy connection checks deadlines.
  uint32_t socket_buffer_bytes = 0;          // SO_SNDBUF/SO_RCVBUF; 0 leaves kernel autotuning.
  uint32_t server_stall_timeout_ms = 30000;  // Owner side: a peer that stops reading or sending
                                             // mid-slice for this long is disconnected.
  /// Owner side: every READ/WRITE must carry a capability (transfer/capability.h) signed for
  /// this segment and the peer's credential, from this engine's own secret. The store's data
  /// nodes set it when authentication is on; plain engines (P/D between workers) leave it off.
  bool require_capabilities = false;
};

struct RdmaParams {
  std::vector<std::string> devices;  // NIC names to use ("mlx5_0"); empty: every active port.
  uint8_t ib_port = 1;
  int gid_index = -1;                 // -1: first RoCE v2 / valid GID of the port.
  uint32_t qps_per_endpoint = 2;      // RC QPs per (local NIC, remote NIC) pair.
  uint32_t max_outstanding_wr = 256;  // Work requests in flight per QP.
  uint32_t slice_bytes = 64 << 10;    // Requests are cut into slices striped over NICs and QPs.
  std::string listen_address = "0.0.0.0";  // Handshake (QP exchange) listener.
  uint16_t handshake_port = 0;
  std::string advertise_host;
  uint32_t connect_timeout_ms = 2000;
  uint32_t mtu_bytes = 4096;
  uint32_t retry_count = 7;  // RC transport retries (ibv_modify_qp retry_cnt).
};

}  // namespace kvgate::transfer
