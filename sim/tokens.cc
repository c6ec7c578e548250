#include "sim/tokens.h"

#include <xxhash.h>

#include <cstring>

namespace kvgate::sim {

void AppendBytesToTokens4(std::string_view bytes, std::vector<uint32_t>* out) {
  out->reserve(out->size() + (bytes.size() + kBytesPerToken - 1) / kBytesPerToken);
  size_t i = 0;
  for (; i + kBytesPerToken <= bytes.size(); i += kBytesPerToken) {
    uint32_t t;
    std::memcpy(&t, bytes.data() + i, sizeof(t));
    out->push_back(t);
  }
  if (i < bytes.size()) {
    uint32_t t = 0;
    std::memcpy(&t, bytes.data() + i, bytes.size() - i);
    out->push_back(t);
  }
}

std::vector<uint32_t> BytesToTokens4(std::string_view bytes) {
  std::vector<uint32_t> out;
  AppendBytesToTokens4(bytes, &out);
  return out;
}

uint64_t RootBlockHash(std::string_view model) {
  return XXH3_64bits_withSeed(model.data(), model.size(), 0);
}

uint64_t ChainBlockHash(uint64_t parent, absl::Span<const uint32_t> block_tokens) {
  // Little-endian host (static_assert in the header): the in-memory layout is the wire layout.
  return XXH3_64bits_withSeed(block_tokens.data(), block_tokens.size() * sizeof(uint32_t), parent);
}

void AppendBlockHashes(uint64_t parent, absl::Span<const uint32_t> tokens, uint32_t block_size,
                       size_t first_block, std::vector<uint64_t>* out) {
  for (size_t b = first_block; (b + 1) * block_size <= tokens.size(); ++b) {
    parent = ChainBlockHash(parent, tokens.subspan(b * block_size, block_size));
    out->push_back(parent);
  }
}

uint64_t PromptHash(absl::Span<const uint32_t> tokens) {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size() * sizeof(uint32_t), 0x5eed);
}

uint32_t OutputToken(uint64_t seed, uint64_t prompt_hash, uint32_t position) {
  const uint64_t in[3] = {seed, prompt_hash, position};
  uint64_t h = XXH3_64bits(in, sizeof(in));
  uint32_t t = 0;
  for (int i = 0; i < 3; ++i) {
    t |= static_cast<uint32_t>('a' + h % 26) << (8 * i);
    h /= 26;
  }
  return t | (uint32_t{' '} << 24);
}

std::string TokenText(uint32_t token) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &token, 4);
  return s;
}

}  // namespace kvgate::sim
