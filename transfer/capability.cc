// File: transfer/capability.cc
#include "transfer/capability.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "common/strings.h"

namespace kvgate::transfer {
namespace {

constexpr std::string_view kKeyLabel = "kvgate-transfer-capability-v1";
constexpr size_t kSignedBytes = 32;  // The record before its MAC.

// An HMAC-SHA256 context with `key` set, to be duplicated per message.
EVP_MAC_CTX* KeyedContext(const uint8_t* key, size_t key_len) {
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = mac != nullptr ? EVP_MAC_CTX_new(mac) : nullptr;
  EVP_MAC_free(mac);  // The context holds its own reference.
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  if (ctx == nullptr || EVP_MAC_init(ctx, key, key_len, params) != 1) {
    std::abort();  // OpenSSL without HMAC-SHA256 is not a state to run in.
  }
  return ctx;
}

// The full 32-byte HMAC of `parts` (each length-prefixed) under a copy of `keyed`.
std::array<uint8_t, 32> Hmac(EVP_MAC_CTX* keyed, std::initializer_list<std::string_view> parts,
                             bool prefix_lengths) {
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_dup(keyed);
  bool ok = ctx != nullptr;
  for (std::string_view p : parts) {
    const uint32_t n = static_cast<uint32_t>(p.size());
    if (prefix_lengths) {
      ok = ok && EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(&n), sizeof(n)) == 1;
    }
    ok = ok && EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(p.data()), p.size()) == 1;
  }
  std::array<uint8_t, 32> out{};
  size_t len = 0;
  ok = ok && EVP_MAC_final(ctx, out.data(), &len, out.size()) == 1 && len == out.size();
  EVP_MAC_CTX_free(ctx);
  if (!ok) std::abort();
  return out;
}

std::array<uint8_t, kCapabilityMacBytes> RecordMac(EVP_MAC_CTX* keyed,
                                                   const RangeCapability& record,
                                                   std::string_view segment,
                                                   std::string_view client) {
  const std::string_view head(reinterpret_cast<const char*>(record.record.data()), kSignedBytes);
  const auto full = Hmac(keyed, {head, segment, client}, /*prefix_lengths=*/true);
  std::array<uint8_t, kCapabilityMacBytes> mac{};
  std::memcpy(mac.data(), full.data(), mac.size());
  return mac;
}

void Put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }  // Little-endian hosts only.
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, 8);
  return v;
}

absl::Status Denied(std::string_view why) {
  return absl::PermissionDeniedError(common::StrCat("capability ", why));
}

}  // namespace

AuthSecret CapabilityKey(const AuthSecret& node_secret) {
  EVP_MAC_CTX* ctx = KeyedContext(node_secret.data(), node_secret.size());
  const auto key = Hmac(ctx, {kKeyLabel}, /*prefix_lengths=*/false);
  EVP_MAC_CTX_free(ctx);
  return key;
}

RangeCapability EncodeCapability(const Capability& c) {
  RangeCapability r;
  r.present = true;
  r.record[0] = kCapabilityVersion;
  r.record[1] = c.modes;
  Put64(&r.record[8], c.base);
  Put64(&r.record[16], c.length);
  Put64(&r.record[24], c.expires);
  std::memcpy(&r.record[kSignedBytes], c.mac.data(), c.mac.size());
  return r;
}

absl::StatusOr<Capability> DecodeCapability(const RangeCapability& record) {
  const uint8_t* p = record.record.data();
  if (!record.present) return absl::InvalidArgumentError("capability: none");
  if (p[0] != kCapabilityVersion) {
    return absl::InvalidArgumentError(common::StrCat("capability: version ", p[0], ", not 1"));
  }
  Capability c;
  c.modes = p[1];
  if (c.modes == 0 || (c.modes & ~(kCapabilityRead | kCapabilityWrite)) != 0) {
    return absl::InvalidArgumentError(common::StrCat("capability: unknown modes ", c.modes));
  }
  for (size_t i = 2; i < 8; ++i) {
    if (p[i] != 0) return absl::InvalidArgumentError("capability: reserved bytes set");
  }
  c.base = Get64(p + 8);
  c.length = Get64(p + 16);
  c.expires = Get64(p + 24);
  if (c.length == 0 || c.base + c.length < c.base) {
    return absl::InvalidArgumentError("capability: empty or wrapping range");
  }
  std::memcpy(c.mac.data(), p + kSignedBytes, c.mac.size());
  return c;
}

Capability SignCapability(const AuthSecret& key, std::string_view segment, std::string_view client,
                          uint8_t modes, uint64_t base, uint64_t length, uint64_t expires) {
  return CapabilitySigner(key, std::string(segment)).Sign(client, modes, base, length, expires);
}

uint64_t UnixSeconds() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

CapabilitySigner::CapabilitySigner(const AuthSecret& key, std::string segment)
    : segment_(std::move(segment)), ctx_(KeyedContext(key.data(), key.size())) {}

CapabilitySigner::~CapabilitySigner() { EVP_MAC_CTX_free(ctx_); }

Capability CapabilitySigner::Sign(std::string_view client, uint8_t modes, uint64_t base,
                                  uint64_t length, uint64_t expires) const {
  Capability c{modes, base, length, expires, {}};
  c.mac = RecordMac(ctx_, EncodeCapability(c), segment_, client);
  return c;
}

CapabilityVerifier::CapabilityVerifier(const AuthSecret& key, std::string segment)
    : segment_(std::move(segment)), ctx_(KeyedContext(key.data(), key.size())) {}

CapabilityVerifier::~CapabilityVerifier() { EVP_MAC_CTX_free(ctx_); }

absl::Status CapabilityVerifier::Verify(const RangeCapability& record, std::string_view client,
                                        TransferOp op, uint64_t addr, uint64_t length,
                                        uint64_t now) {
  if (!record.present) return Denied("missing: the owner requires one for every request");
  auto c = DecodeCapability(record);
  if (!c.ok()) return Denied(common::StrCat("malformed: ", c.status().message()));
  // The MAC first: whatever else a forged record says is not worth reporting.
  const bool seen = last_.present && record == last_ && client == last_client_;
  if (!seen) {
    const auto mac = RecordMac(ctx_, record, segment_, client);
    if (CRYPTO_memcmp(mac.data(), c->mac.data(), mac.size()) != 0) {
      return Denied(
          common::StrCat("forged, or issued for another segment or client than '", client, "'"));
    }
    last_ = record;
    last_client_.assign(client);
  }
  if (now > c->expires) {
    return Denied(common::StrCat("expired ", now - c->expires, " s ago"));
  }
  const uint8_t need = op == TransferOp::kRead ? kCapabilityRead : kCapabilityWrite;
  if ((c->modes & need) == 0) {
    return Denied(common::StrCat("does not allow ", OpName(op)));
  }
  if (addr < c->base || length > c->length || addr - c->base > c->length - length) {
    return Denied(common::StrCat("covers [", c->base, ", +", c->length, "), not [", addr, ", +",
                                 length, ")"));
  }
  return absl::OkStatus();
}

}  // namespace kvgate::transfer
