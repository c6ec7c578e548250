#include "tokenizer/hf_word_cache.h"

#include <xxhash.h>

#include <cstring>
#include <utility>

namespace kvgate::tokenizer::hf {
namespace {

constexpr size_t kHeaderUnits = 2;  // the word's length and its id count

size_t RecordUnits(size_t word_bytes, size_t ids) {
  return kHeaderUnits + ids + (word_bytes + sizeof(uint32_t) - 1) / sizeof(uint32_t);
}

}  // namespace

bool WordCache::FindIn(const Generation& g, uint64_t hash, std::string_view word,
                       std::vector<uint32_t>* out) {
  auto it = g.index.find(hash);
  if (it == g.index.end()) return false;
  const uint32_t* record = g.arena.data() + it->second;
  const uint32_t n = record[1];
  if (record[0] != word.size() ||
      (!word.empty() && std::memcmp(record + kHeaderUnits + n, word.data(), word.size()) != 0)) {
    return false;
  }
  out->insert(out->end(), record + kHeaderUnits, record + kHeaderUnits + n);
  return true;
}

bool WordCache::Find(std::string_view word, std::vector<uint32_t>* out) {
  const uint64_t hash = XXH3_64bits(word.data(), word.size());
  if (FindIn(young_, hash, word, out)) return true;
  const size_t before = out->size();
  if (!FindIn(old_, hash, word, out)) return false;
  Add(hash, word, absl::MakeConstSpan(out->data() + before, out->size() - before));
  return true;
}

void WordCache::Insert(std::string_view word, absl::Span<const uint32_t> ids) {
  Add(XXH3_64bits(word.data(), word.size()), word, ids);
}

void WordCache::Add(uint64_t hash, std::string_view word, absl::Span<const uint32_t> ids) {
  const size_t units = RecordUnits(word.size(), ids.size());
  const size_t arena_units = limits_.arena_bytes_per_generation / sizeof(uint32_t);
  if (units > arena_units) return;
  if (young_.index.size() >= limits_.words_per_generation ||
      young_.arena.size() + units > arena_units) {
    std::swap(old_, young_);
    young_.Clear();
  }
  // Reserved once at the limit, so the arena never grows past it by doubling.
  if (young_.arena.capacity() < arena_units) young_.arena.reserve(arena_units);
  const size_t at = young_.arena.size();
  young_.arena.resize(at + units);
  uint32_t* record = young_.arena.data() + at;
  record[0] = static_cast<uint32_t>(word.size());
  record[1] = static_cast<uint32_t>(ids.size());
  if (!ids.empty()) std::memcpy(record + kHeaderUnits, ids.data(), ids.size() * sizeof(uint32_t));
  if (!word.empty()) std::memcpy(record + kHeaderUnits + ids.size(), word.data(), word.size());
  young_.index[hash] = static_cast<uint32_t>(at);
}

void WordCache::Clear() {
  young_.Clear();
  old_.Clear();
}

}  // namespace kvgate::tokenizer::hf
