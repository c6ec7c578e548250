// File: transfer/rdma/rdma_context.h
// ibverbs plumbing for the rdma transport: opening the NICs (probe), RC queue pairs and their
// INIT -> RTR -> RTS transitions, and the fixed-size handshake messages two engines exchange
// over TCP to connect QPs. Private to transfer/rdma/. RdmaDevice is immutable after Open() and
// ibverbs calls on it are thread-safe.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transfer/transport_params.h"

namespace kvgate::transfer::rdma_internal {

inline constexpr uint32_t kMaxQpsPerEndpoint = 16;
inline constexpr int kCqEntries = 4096;

/// One active NIC port: context, protection domain, one CQ shared by its QPs.
struct RdmaDevice {
  std::string name;
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  uint8_t port = 1;
  int gid_index = 0;
  ibv_gid gid{};
  uint16_t lid = 0;
  bool roce = false;  // Ethernet link layer: route by GID.
  ibv_mtu mtu = IBV_MTU_4096;
  int max_rd_atomic = 16;
  uint32_t max_qp_wr = 256;

  RdmaDevice() = default;
  RdmaDevice(const RdmaDevice&) = delete;
  RdmaDevice& operator=(const RdmaDevice&) = delete;
  ~RdmaDevice();
};

/// Opens every active port named in params.devices (all when empty).
/// @return kUnavailable "no RDMA device ..." when there is none, naming why.
absl::StatusOr<std::vector<std::unique_ptr<RdmaDevice>>> OpenDevices(const RdmaParams& params);

/// One side of an RC connection, as exchanged in the handshake.
struct QpEndpointInfo {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  ibv_gid gid{};
  ibv_mtu mtu = IBV_MTU_4096;
};

/// Creates an RC QP on `dev` in state INIT with remote read/write access.
absl::StatusOr<ibv_qp*> CreateQp(const RdmaDevice& dev, uint32_t max_wr);
/// Moves an INIT QP to RTR then RTS against `remote`.
absl::Status ConnectQp(ibv_qp* qp, const RdmaDevice& dev, const QpEndpointInfo& local,
                       const QpEndpointInfo& remote, const RdmaParams& params);
/// Moves a QP to ERR: outstanding work requests complete flushed (with an error).
void ErrorQp(ibv_qp* qp);

/// "fe800000000000000000000000000001"
std::string GidToHex(const ibv_gid& gid);
bool GidFromHex(const std::string& hex, ibv_gid* gid);

// Handshake messages (little-endian, sent as they lie in memory). The client connects to the
// owner's rdma_endpoint, sends RdmaHello, gets RdmaHelloReply, and keeps the TCP connection open:
// the owner destroys its QPs when it closes.
inline constexpr uint32_t kRdmaHelloMagic = 0x4D445652;  // "RVDM"

struct RdmaHello {
  uint32_t magic = kRdmaHelloMagic;
  uint32_t remote_device = 0;  // Index into the owner's rdma_devices.
  char instance[64] = {};      // The owner instance the client expects.
  uint32_t qp_count = 0;
  uint32_t psn = 0;
  uint32_t lid = 0;
  uint32_t mtu = 0;
  uint8_t gid[16] = {};
  std::array<uint32_t, kMaxQpsPerEndpoint> qpn{};
};

struct RdmaHelloReply {
  uint32_t magic = kRdmaHelloMagic;
  uint32_t status = 0;  // 0 ok, 1 wrong instance, 2 bad device, 3 QP creation failed.
  uint32_t qp_count = 0;
  uint32_t psn = 0;
  uint32_t lid = 0;
  uint32_t mtu = 0;
  uint8_t gid[16] = {};
  std::array<uint32_t, kMaxQpsPerEndpoint> qpn{};
};

}  // namespace kvgate::transfer::rdma_internal
