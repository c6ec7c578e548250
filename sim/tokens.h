// File: sim/tokens.h
// The simulator's tokeniser and block hashing. Without a vocabulary, bytes map to tokens four at a
// time (BytesToTokens4); kvgate's `bytes4` tokenizer reuses the same rule so that the gateway and
// the simulator agree on every token. Stateless; thread-safe.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

namespace kvgate::sim {

static_assert(std::endian::native == std::endian::little, "kvgate-sim assumes little-endian");

/// Bytes per token of the default tokeniser.
inline constexpr size_t kBytesPerToken = 4;

/// Tokens of `bytes`: each consecutive 4-byte group read as a little-endian uint32; a final
/// partial group is zero-padded into one more token. "abcdefg" -> {0x64636261, 0x00676665}.
/// The empty string has no tokens.
std::vector<uint32_t> BytesToTokens4(std::string_view bytes);

/// Appends the tokens of `bytes` (same rule) to `*out`.
void AppendBytesToTokens4(std::string_view bytes, std::vector<uint32_t>* out);

/// Root of every hash chain of one model: XXH3_64 of the model name, seed 0.
uint64_t RootBlockHash(std::string_view model);

/// One link of the chain: XXH3_64 over the block's token ids as little-endian uint32, seeded with
/// the parent hash (RootBlockHash() for the first block).
uint64_t ChainBlockHash(uint64_t parent, absl::Span<const uint32_t> block_tokens);

/// Hashes of the full blocks of `tokens` starting at block `first_block`, whose parent is
/// `parent` (the root for block 0). Appends to `*out`.
void AppendBlockHashes(uint64_t parent, absl::Span<const uint32_t> tokens, uint32_t block_size,
                       size_t first_block, std::vector<uint64_t>* out);

/// Hash of a whole prompt, the per-request input of output generation.
uint64_t PromptHash(absl::Span<const uint32_t> tokens);

/// The output token at `position` of a request: four printable bytes ("abc ", three lowercase
/// letters and a space) read as a little-endian uint32, derived from (seed, prompt_hash,
/// position) only, so replays reproduce it.
uint32_t OutputToken(uint64_t seed, uint64_t prompt_hash, uint32_t position);

/// The 4 bytes of `token` (little-endian), e.g. OutputToken()'s text.
std::string TokenText(uint32_t token);

}  // namespace kvgate::sim
