// File: transfer/tcp/wire.h
// The tcp transport's frames. Every connection starts with a kHello naming the owner instance it
// expects (a restarted owner on the same port is refused, never read from); then each request
// is a 40-byte header, followed by a capability record when flagged and for kWrite by `length`
// payload bytes; each response is a 32-byte header, followed for a successful kRead by `length`
// payload bytes. The owner answers requests in order, so responses match the oldest unanswered
// request (`seq` double-checks it).
// Little-endian hosts only (x86-64, arm64): headers are sent as they lie in memory.
#pragma once

#include <bit>
#include <cstdint>

#include "transfer/crc32c.h"

namespace kvgate::transfer::tcp_internal {

static_assert(std::endian::native == std::endian::little, "tcp wire format is little-endian");

inline constexpr uint32_t kWireMagic = 0x5254564B;  // "KVTR"
// With kFlagCrc32c every header carries header_crc (CRC32C of the header with header_crc = 0)
// and payloads carry crc. The kHello's flag sets the connection's mode; a later header whose flag
// differs is refused, so a flipped flag bit cannot switch verification off.
inline constexpr uint8_t kFlagCrc32c = 1;
// A READ/WRITE header with kFlagCapability is followed by kCapabilityBytes of capability record
// (transfer/capability.h), before a WRITE's payload.
inline constexpr uint8_t kFlagCapability = 2;
inline constexpr uint32_t kMaxWirePayload = 64u << 20;
inline constexpr uint32_t kMaxHelloBytes = 256;

enum class WireOp : uint8_t { kHello = 1, kRead = 2, kWrite = 3 };
enum class WireStatus : uint8_t {
  kOk = 0,
  kOutOfRange = 1,   // Not inside one buffer the owner registered.
  kCrcMismatch = 2,  // WRITE payload arrived corrupted (the range's bytes are undefined).
  kBadRequest = 3,   // Unknown op, oversized length, bad header CRC; the owner closes.
  kWrongPeer = 4,    // kHello named another instance.
  kDeviceError = 5,  // The owner's GPU runtime failed a bounce copy.
  kDenied = 6,       // No valid capability for the range (memory untouched; the owner stays).
};

struct RequestHeader {
  uint32_t magic = kWireMagic;
  WireOp op = WireOp::kRead;
  uint8_t flags = 0;
  uint16_t reserved = 0;
  uint32_t length = 0;
  uint32_t crc = 0;  // Of the WRITE payload, with kFlagCrc32c.
  uint64_t addr = 0;
  uint64_t seq = 0;
  uint32_t header_crc = 0;
  uint32_t reserved2 = 0;
};

struct ResponseHeader {
  uint32_t magic = kWireMagic;
  WireStatus status = WireStatus::kOk;
  uint8_t flags = 0;
  uint16_t reserved = 0;
  uint32_t length = 0;  // READ payload bytes that follow.
  uint32_t crc = 0;     // Of the READ payload, with kFlagCrc32c.
  uint64_t seq = 0;
  uint32_t header_crc = 0;
  uint32_t reserved2 = 0;
};

static_assert(sizeof(RequestHeader) == 40 && sizeof(ResponseHeader) == 32);

/// CRC32C of a header with its header_crc field taken as 0.
template <typename Header>
uint32_t HeaderCrc(const Header& h) {
  Header copy = h;
  copy.header_crc = 0;
  return Crc32c(0, &copy, sizeof(copy));
}

}  // namespace kvgate::transfer::tcp_internal
