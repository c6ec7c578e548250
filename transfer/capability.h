// File: transfer/capability.h
// Per-range capabilities (docs/store.md, "Authentication"): the store's master signs, with every
// address it hands out, what the requesting client may do there; the data node that owns the
// range checks it on each tcp request. A capability names a range of the node's segment, the
// modes (read, write), an expiry (wall-clock Unix seconds) and, through its MAC only, the
// segment and the client credential it was issued to:
//
//   record (48 bytes): u8 version=1, u8 modes, u16 0, u32 0, u64 base, u64 length,
//                      u64 expires, mac[16]
//   mac = HMAC-SHA256(key, record[0..32) | segment | client)[0..16), each part preceded by its
//         u32 length
//   key = HMAC-SHA256(node secret, "kvgate-transfer-capability-v1")
//
// The master knows the node's secret (its credentials set) and the node knows its own, so no
// key travels. Pure functions are thread-safe; a CapabilityVerifier is thread-compatible (one
// per connection).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transfer/peer_auth.h"
#include "transfer/types.h"

struct evp_mac_ctx_st;  // OpenSSL's EVP_MAC_CTX, kept out of this header.

namespace kvgate::transfer {

inline constexpr uint8_t kCapabilityVersion = 1;
inline constexpr size_t kCapabilityMacBytes = 16;
inline constexpr uint8_t kCapabilityRead = 1;  // Bits of Capability::modes.
inline constexpr uint8_t kCapabilityWrite = 2;

struct Capability {
  uint8_t modes = 0;
  uint64_t base = 0;  // The owner's virtual address, as in TransferRequest::remote_offset.
  uint64_t length = 0;
  uint64_t expires = 0;  // Unix seconds; refused once the owner's clock is past it.
  std::array<uint8_t, kCapabilityMacBytes> mac{};
};

/// The key both sides derive from the data node's credential secret.
AuthSecret CapabilityKey(const AuthSecret& node_secret);

/// A capability for `client` on `segment`, signed with `key` (CapabilityKey()).
Capability SignCapability(const AuthSecret& key, std::string_view segment, std::string_view client,
                          uint8_t modes, uint64_t base, uint64_t length, uint64_t expires);

RangeCapability EncodeCapability(const Capability& c);
/// @return kInvalidArgument for another version, unknown modes, non-zero reserved bytes, an
/// empty range or one that wraps around the address space.
absl::StatusOr<Capability> DecodeCapability(const RangeCapability& record);

/// Wall-clock Unix seconds, the clock capabilities expire by.
uint64_t UnixSeconds();

/// The master's side for one node: signs with the HMAC key set up once. Thread-compatible.
class CapabilitySigner {
 public:
  CapabilitySigner(const AuthSecret& key, std::string segment);
  ~CapabilitySigner();
  CapabilitySigner(const CapabilitySigner&) = delete;
  CapabilitySigner& operator=(const CapabilitySigner&) = delete;

  /// What SignCapability(key, segment, ...) gives.
  Capability Sign(std::string_view client, uint8_t modes, uint64_t base, uint64_t length,
                  uint64_t expires) const;

 private:
  const std::string segment_;
  evp_mac_ctx_st* ctx_ = nullptr;
};

/// The owner's check, keeping its HMAC key set up between requests. Thread-compatible.
class CapabilityVerifier {
 public:
  CapabilityVerifier(const AuthSecret& key, std::string segment);
  ~CapabilityVerifier();
  CapabilityVerifier(const CapabilityVerifier&) = delete;
  CapabilityVerifier& operator=(const CapabilityVerifier&) = delete;

  /// Whether `record` lets `client` do `op` on [addr, addr + length) at `now` (Unix seconds).
  /// @return kPermissionDenied naming the reason (malformed, forged or for another segment or
  /// client, expired, wrong mode, range outside).
  absl::Status Verify(const RangeCapability& record, std::string_view client, TransferOp op,
                      uint64_t addr, uint64_t length, uint64_t now);

 private:
  const std::string segment_;
  evp_mac_ctx_st* ctx_ = nullptr;  // Keyed once; duplicated per MAC.
  // The last record whose MAC checked out, and for whom: slices of one object repeat it.
  RangeCapability last_{};
  std::string last_client_;
};

}  // namespace kvgate::transfer
