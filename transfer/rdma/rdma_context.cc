#include "transfer/rdma/rdma_context.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "common/strings.h"

namespace kvgate::transfer::rdma_internal {
namespace {

ibv_mtu MtuFromBytes(uint32_t bytes) {
  switch (bytes) {
    case 256:
      return IBV_MTU_256;
    case 512:
      return IBV_MTU_512;
    case 1024:
      return IBV_MTU_1024;
    case 2048:
      return IBV_MTU_2048;
    default:
      return IBV_MTU_4096;
  }
}

bool GidIsZero(const ibv_gid& gid) {
  static const ibv_gid kZero{};
  return std::memcmp(&gid, &kZero, sizeof(gid)) == 0;
}

absl::StatusOr<std::unique_ptr<RdmaDevice>> OpenOne(ibv_device* d, const RdmaParams& params,
                                                    std::string* why) {
  auto dev = std::make_unique<RdmaDevice>();
  dev->name = ibv_get_device_name(d);
  dev->port = params.ib_port;
  dev->context = ibv_open_device(d);
  if (dev->context == nullptr) {
    *why = common::StrCat(dev->name, ": ibv_open_device failed");
    return absl::UnavailableError(*why);
  }
  ibv_port_attr port{};
  if (ibv_query_port(dev->context, dev->port, &port) != 0 || port.state != IBV_PORT_ACTIVE) {
    *why = common::StrCat(dev->name, " port ", dev->port, " is not active");
    return absl::UnavailableError(*why);
  }
  ibv_device_attr attr{};
  if (ibv_query_device(dev->context, &attr) == 0) {
    dev->max_rd_atomic = std::max(1, std::min(16, attr.max_qp_rd_atom));
    dev->max_qp_wr = static_cast<uint32_t>(std::max(16, attr.max_qp_wr));
  }
  dev->lid = port.lid;
  dev->roce = port.link_layer == IBV_LINK_LAYER_ETHERNET;
  dev->mtu = std::min(port.active_mtu, MtuFromBytes(params.mtu_bytes));
  dev->gid_index = params.gid_index;
  if (dev->gid_index < 0) {
    // The first non-zero GID; on RoCE an operator pins the v2 index with gid_index.
    dev->gid_index = 0;
    for (int i = 0; i < port.gid_tbl_len; ++i) {
      ibv_gid g{};
      if (ibv_query_gid(dev->context, dev->port, i, &g) == 0 && !GidIsZero(g)) {
        dev->gid_index = i;
        break;
      }
    }
  }
  if (ibv_query_gid(dev->context, dev->port, dev->gid_index, &dev->gid) != 0) {
    *why = common::StrCat(dev->name, ": cannot read GID ", dev->gid_index);
    return absl::UnavailableError(*why);
  }
  if (dev->roce && GidIsZero(dev->gid)) {
    *why = common::StrCat(dev->name, ": RoCE port without a GID (no IP address?)");
    return absl::UnavailableError(*why);
  }
  dev->pd = ibv_alloc_pd(dev->context);
  dev->cq = dev->pd ? ibv_create_cq(dev->context, kCqEntries, nullptr, nullptr, 0) : nullptr;
  if (dev->cq == nullptr) {
    *why = common::StrCat(dev->name, ": cannot allocate PD/CQ");
    return absl::UnavailableError(*why);
  }
  return dev;
}

}  // namespace

RdmaDevice::~RdmaDevice() {
  if (cq != nullptr) ibv_destroy_cq(cq);
  if (pd != nullptr) ibv_dealloc_pd(pd);
  if (context != nullptr) ibv_close_device(context);
}

absl::StatusOr<std::vector<std::unique_ptr<RdmaDevice>>> OpenDevices(const RdmaParams& params) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n == 0) {
    if (list != nullptr) ibv_free_device_list(list);
    return absl::UnavailableError("no RDMA device (ibv_get_device_list found none)");
  }
  std::vector<std::unique_ptr<RdmaDevice>> out;
  std::vector<std::string> reasons;
  for (int i = 0; i < n; ++i) {
    const std::string name = ibv_get_device_name(list[i]);
    if (!params.devices.empty() &&
        std::find(params.devices.begin(), params.devices.end(), name) == params.devices.end()) {
      continue;
    }
    std::string why;
    auto dev = OpenOne(list[i], params, &why);
    if (dev.ok()) {
      out.push_back(std::move(*dev));
    } else {
      reasons.push_back(why);
    }
  }
  ibv_free_device_list(list);
  if (out.empty()) {
    return absl::UnavailableError(common::StrCat(
        "no RDMA device usable (",
        reasons.empty() ? "none matches the filter" : common::StrJoin(reasons, "; "), ")"));
  }
  return out;
}

absl::StatusOr<ibv_qp*> CreateQp(const RdmaDevice& dev, uint32_t max_wr) {
  ibv_qp_init_attr init{};
  init.send_cq = dev.cq;
  init.recv_cq = dev.cq;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;
  init.cap.max_send_wr = std::min(max_wr, dev.max_qp_wr);
  init.cap.max_recv_wr = 1;  // One-sided only: nothing is ever received.
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(dev.pd, &init);
  if (qp == nullptr) {
    return absl::ResourceExhaustedError(
        common::StrCat("rdma ", dev.name, ": ibv_create_qp failed"));
  }
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = dev.port;
  attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(qp, &attr,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    ibv_destroy_qp(qp);
    return absl::InternalError(common::StrCat("rdma ", dev.name, ": QP to INIT failed"));
  }
  return qp;
}

absl::Status ConnectQp(ibv_qp* qp, const RdmaDevice& dev, const QpEndpointInfo& local,
                       const QpEndpointInfo& remote, const RdmaParams& params) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = std::min(local.mtu, remote.mtu);
  attr.dest_qp_num = remote.qpn;
  attr.rq_psn = remote.psn;
  attr.max_dest_rd_atomic = static_cast<uint8_t>(dev.max_rd_atomic);
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = dev.port;
  attr.ah_attr.dlid = remote.lid;
  attr.ah_attr.sl = 0;
  static const ibv_gid kZero{};
  if (dev.roce || std::memcmp(&remote.gid, &kZero, sizeof(kZero)) != 0) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = remote.gid;
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(dev.gid_index);
    attr.ah_attr.grh.hop_limit = 64;
  }
  if (ibv_modify_qp(qp, &attr,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
    return absl::UnavailableError(common::StrCat("rdma ", dev.name, ": QP to RTR failed"));
  }
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;  // 4.096 us * 2^14 = 67 ms per try.
  attr.retry_cnt = static_cast<uint8_t>(std::min<uint32_t>(7, params.retry_count));
  attr.rnr_retry = 7;
  attr.sq_psn = local.psn;
  attr.max_rd_atomic = static_cast<uint8_t>(dev.max_rd_atomic);
  if (ibv_modify_qp(qp, &attr,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
    return absl::UnavailableError(common::StrCat("rdma ", dev.name, ": QP to RTS failed"));
  }
  return absl::OkStatus();
}

void ErrorQp(ibv_qp* qp) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ibv_modify_qp(qp, &attr, IBV_QP_STATE);
}

std::string GidToHex(const ibv_gid& gid) {
  std::string out;
  for (uint8_t b : gid.raw) out.append(fmt::format("{:02x}", b));
  return out;
}

bool GidFromHex(const std::string& hex, ibv_gid* gid) {
  if (hex.size() != 32) return false;
  for (int i = 0; i < 16; ++i) {
    unsigned v = 0;
    for (int k = 0; k < 2; ++k) {
      const char c = hex[2 * i + k];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) return false;
      v = v * 16 + static_cast<unsigned>(d);
    }
    gid->raw[i] = static_cast<uint8_t>(v);
  }
  return true;
}

}  // namespace kvgate::transfer::rdma_internal
