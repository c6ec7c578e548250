// File: store/object_key.h
// An object's key: a namespace (model + LoRA + cache salt + KV-cache group, so that hybrid
// models' groups never collide) and the engine's chained block hash. Value type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "common/strings.h"

namespace kvgate::store {

struct ObjectKey {
  std::string ns;
  uint64_t hash = 0;

  friend bool operator==(const ObjectKey&, const ObjectKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const ObjectKey& k) {
    return H::combine(std::move(h), k.ns, k.hash);
  }
};

/// "model|lora|salt|group": '|' in a part is escaped as "\|" (and '\' as "\\") so that distinct
/// part lists never give the same namespace.
inline std::string MakeNamespace(std::string_view model, std::string_view lora,
                                 std::string_view cache_salt, uint32_t kv_group) {
  std::string out;
  for (std::string_view part : {model, lora, cache_salt}) {
    for (char c : part) {
      if (c == '|' || c == '\\') out.push_back('\\');
      out.push_back(c);
    }
    out.push_back('|');
  }
  common::StrAppend(&out, kv_group);
  return out;
}

/// For logs and messages: "ns/0123456789abcdef".
inline std::string KeyName(const ObjectKey& k) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = k.ns;
  out.push_back('/');
  for (int shift = 60; shift >= 0; shift -= 4) out.push_back(kHex[(k.hash >> shift) & 0xf]);
  return out;
}

}  // namespace kvgate::store
