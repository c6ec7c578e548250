// File: kvindex/block_hash.h
// Chained block hashing of canonical prompts: h[i] = XXH3_64(block_i, seed = h[i-1]), with the
// root seed derived from the namespace (model, LoRA adapter, cache_salt) and the prompt kind.
// Only full blocks are hashed. All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "kvindex/canonicalize.h"
#include "kvindex/types.h"

namespace kvgate::kvindex {

struct HashOptions {
  uint32_t text_block_bytes = 64;    // ~16 tokens of English text.
  uint32_t token_block_tokens = 16;  // vLLM's default block size.
};

/// The cache namespace of a request. Requests in different namespaces never share blocks.
struct Namespace {
  std::string_view model;
  std::string_view lora;
  std::string_view cache_salt;
};

/// XXH3_64 of the length-prefixed (model, lora, cache_salt).
uint64_t NamespaceSeed(const Namespace& ns);

/// The seed of block 0 for prompts of `kind` in the namespace with seed `namespace_seed`.
uint64_t RootSeed(uint64_t namespace_seed, PromptKind kind);

/// Appends the chained hashes of the full `block_bytes`-sized blocks of `bytes` to `*out`;
/// the first block is hashed with `seed` (a root seed, or the hash of the preceding block).
void HashTextBlocks(std::string_view bytes, uint64_t seed, uint32_t block_bytes,
                    std::vector<BlockHash>* out);

/// Same for token ids (little-endian uint32 each), `block_tokens` tokens a block.
void HashTokenBlocks(absl::Span<const uint32_t> tokens, uint64_t seed, uint32_t block_tokens,
                     std::vector<BlockHash>* out);

/// Hashes one canonical prompt into `*out` (cleared first), choosing text or token mode by kind.
void HashPrompt(const CanonicalPrompt& prompt, uint64_t namespace_seed, const HashOptions& options,
                std::vector<BlockHash>* out);

std::vector<BlockHash> HashPrompt(const CanonicalPrompt& prompt, uint64_t namespace_seed,
                                  const HashOptions& options = {});

}  // namespace kvgate::kvindex
