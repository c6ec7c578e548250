#include "kvindex/block_hash.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "kvindex/block_memo.h"

// Inlined (header-only xxHash): a prompt's thousands of 64-byte blocks each paid a library call
// and XXH3's length dispatch; inlined, the block size is a constant (issue 31).
#define XXH_INLINE_ALL
#include "xxhash.h"

namespace kvgate::kvindex {
namespace {

constexpr uint64_t kNamespaceSeedSalt = 0x6b76676174652d31ULL;  // "kvgate-1"

void AppendLengthPrefixed(std::string_view s, std::string* out) {
  const uint32_t len = static_cast<uint32_t>(s.size());
  char buf[4];
  for (int i = 0; i < 4; ++i) {
    buf[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  }
  out->append(buf, 4);
  out->append(s);
}

}  // namespace

uint64_t NamespaceSeed(const Namespace& ns) {
  std::string buf;
  buf.reserve(12 + ns.model.size() + ns.lora.size() + ns.cache_salt.size());
  AppendLengthPrefixed(ns.model, &buf);
  AppendLengthPrefixed(ns.lora, &buf);
  AppendLengthPrefixed(ns.cache_salt, &buf);
  return XXH3_64bits_withSeed(buf.data(), buf.size(), kNamespaceSeedSalt);
}

uint64_t RootSeed(uint64_t namespace_seed, PromptKind kind) {
  const unsigned char k = static_cast<unsigned char>(kind);
  return XXH3_64bits_withSeed(&k, 1, namespace_seed);
}

void HashTextBlocks(std::string_view bytes, uint64_t seed, uint32_t block_bytes,
                    std::vector<BlockHash>* out) {
  if (block_bytes == 0) {
    return;
  }
  const size_t n = bytes.size() / block_bytes;
  out->reserve(out->size() + n);
  const char* p = bytes.data();
  for (size_t i = 0; i < n; ++i, p += block_bytes) {
    seed = XXH3_64bits_withSeed(p, block_bytes, seed);
    out->push_back(seed);
  }
}

void HashTokenBlocks(absl::Span<const uint32_t> tokens, uint64_t seed, uint32_t block_tokens,
                     std::vector<BlockHash>* out) {
  if (block_tokens == 0) {
    return;
  }
  const size_t n = tokens.size() / block_tokens;
  out->reserve(out->size() + n);
  const uint32_t* p = tokens.data();
  if constexpr (std::endian::native == std::endian::little) {
    for (size_t i = 0; i < n; ++i, p += block_tokens) {
      seed = XXH3_64bits_withSeed(p, size_t{block_tokens} * 4, seed);
      out->push_back(seed);
    }
  } else {
    std::vector<unsigned char> buf(size_t{block_tokens} * 4);
    for (size_t i = 0; i < n; ++i, p += block_tokens) {
      for (uint32_t j = 0; j < block_tokens; ++j) {
        for (int b = 0; b < 4; ++b) {
          buf[j * 4 + b] = static_cast<unsigned char>((p[j] >> (8 * b)) & 0xff);
        }
      }
      seed = XXH3_64bits_withSeed(buf.data(), buf.size(), seed);
      out->push_back(seed);
    }
  }
}

void HashPrompt(const CanonicalPrompt& prompt, uint64_t namespace_seed, const HashOptions& options,
                std::vector<BlockHash>* out) {
  out->clear();
  const uint64_t root = RootSeed(namespace_seed, prompt.kind);
  if (prompt.kind == PromptKind::kTokens) {
    HashTokenBlocks(prompt.tokens, root, options.token_block_tokens, out);
    return;
  }
  const uint32_t block = options.text_block_bytes;
  // The blocks the previous turn had, when its prompt began with the same bytes: the chain
  // resumes after them.
  size_t known = 0;
  uint64_t seed = root;
  if (prompt.reused_blocks != nullptr && block > 0) {
    const absl::Span<const BlockHash> previous = prompt.reused_blocks->Get(root, block);
    known = std::min(previous.size(), std::min(prompt.reused_bytes, prompt.size()) / block);
    if (known > 0) {
      out->reserve(prompt.size() / block);
      out->assign(previous.begin(), previous.begin() + known);
      seed = previous[known - 1];
    }
  }
  // From the last known block on (past bytes a reused prompt borrowed, mostly).
  HashTextBlocks(prompt.From(known * block), seed, block, out);
  if (prompt.blocks_memo != nullptr) prompt.blocks_memo->Set(root, block, *out);
}

std::vector<BlockHash> HashPrompt(const CanonicalPrompt& prompt, uint64_t namespace_seed,
                                  const HashOptions& options) {
  std::vector<BlockHash> out;
  HashPrompt(prompt, namespace_seed, options, &out);
  return out;
}

}  // namespace kvgate::kvindex
