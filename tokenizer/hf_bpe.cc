#include "tokenizer/hf_bpe.h"

#include <atomic>
#include <cstdio>
#include <queue>

#include "common/strings.h"
#include "tokenizer/hf_text.h"
#include "tokenizer/hf_word_cache.h"

namespace kvgate::tokenizer::hf {
namespace {

std::atomic<uint64_t> next_instance{1};

// Up to four bytes and their count in one integer: the key of a one-character entry.
uint64_t CharKey(std::string_view ch) {
  uint64_t key = ch.size();
  for (unsigned char c : ch) key = key << 8 | c;
  return key;
}

// Words up to this many bytes are cached per thread, the Rust library's own limit (a long word
// is expensive to hash and rarely repeats; an indented line of code cut at Gemma 3's word
// marks is often 50-200 bytes, and does repeat).
constexpr size_t kMaxCachedWordBytes = 256;
// Up to this many symbols a quadratic scan for the best pair beats a heap.
constexpr size_t kMaxScanSymbols = 48;

struct ModelCache {
  uint64_t instance = 0;
  WordCache words;
};

WordCache& ThreadCache(uint64_t instance) {
  // A few slots: a process with several models alternates between them. Each holds at most
  // two generations (WordCache::Limits): ~6 MiB.
  thread_local ModelCache caches[4];
  thread_local unsigned victim = 0;
  for (ModelCache& c : caches) {
    if (c.instance == instance) return c.words;
  }
  ModelCache& c = caches[victim++ % 4];
  c.instance = instance;
  c.words.Clear();
  return c.words;
}

}  // namespace

BpeModel::BpeModel(Options options)
    : options_(std::move(options)), instance_(next_instance.fetch_add(1)) {}

absl::Status BpeModel::AddToken(std::string_view token, uint32_t id) {
  std::string key;
  if (options_.byte_level) {
    if (!DecodeByteLevel(token, &key)) return absl::OkStatus();
  } else {
    key.assign(token);
  }
  if (!vocab_.emplace(std::move(key), id).second) {
    return absl::InvalidArgumentError(
        common::StrCat("model.vocab: token \"", token, "\" appears twice"));
  }
  return absl::OkStatus();
}

absl::Status BpeModel::AddMerge(std::string_view left, std::string_view right) {
  std::string a, b;
  if (options_.byte_level) {
    if (!DecodeByteLevel(left, &a) || !DecodeByteLevel(right, &b)) {
      return absl::InvalidArgumentError(common::StrCat("model.merges: \"", left, " ", right,
                                                       "\" is outside the byte-level alphabet"));
    }
  } else {
    a.assign(left);
    b.assign(right);
  }
  auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
  if (ia == vocab_.end() || ib == vocab_.end() || iab == vocab_.end()) {
    return absl::InvalidArgumentError(common::StrCat(
        "model.merges: \"", left, " ", right, "\" merges tokens missing from the vocabulary"));
  }
  // A repeated pair takes its last rank, as the library's map does.
  merges_[uint64_t{ia->second} << 32 | ib->second] = Merge{next_rank_++, iab->second};
  return absl::OkStatus();
}

absl::Status BpeModel::Finish() {
  byte_ids_.assign(256, -1);
  for (int b = 0; b < 256; ++b) {
    if (options_.byte_level) {
      auto it = vocab_.find(std::string(1, static_cast<char>(b)));
      if (it != vocab_.end()) byte_ids_[b] = it->second;
    } else if (options_.byte_fallback) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      auto it = vocab_.find(name);
      if (it != vocab_.end()) byte_ids_[b] = it->second;
    }
  }
  if (!options_.byte_level) {
    for (const auto& [token, id] : vocab_) {
      if (!token.empty() && token.size() <= 4 &&
          Utf8Len(static_cast<unsigned char>(token[0])) == token.size()) {
        char_ids_.emplace(CharKey(token), id);
      }
    }
  }
  constexpr std::string_view kMark = "\xE2\x96\x81";  // '▁'
  if (!options_.byte_level && !options_.ignore_merges && vocab_.contains(common::AbslView(kMark))) {
    word_mark_.assign(kMark);
    for (const auto& [token, id] : vocab_) {
      for (size_t at = token.find(kMark, 1); at != std::string::npos;
           at = token.find(kMark, at + 1)) {
        size_t i = CharStartBefore(token, at);
        if (const int32_t cp = DecodeUtf8(token, &i); cp != 0x2581) joins_mark_.insert(cp);
      }
    }
  }
  if (options_.unk_token) {
    auto id = TokenToId(*options_.unk_token);
    if (!id) {
      return absl::InvalidArgumentError(
          common::StrCat("model.unk_token \"", *options_.unk_token, "\" is not in the vocabulary"));
    }
    unk_id_ = *id;
  }
  return absl::OkStatus();
}

std::optional<uint32_t> BpeModel::TokenToId(std::string_view token) const {
  std::string key;
  if (options_.byte_level) {
    if (!DecodeByteLevel(token, &key)) return std::nullopt;
  } else {
    key.assign(token);
  }
  auto it = vocab_.find(key);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::optional<uint32_t> BpeModel::CharId(std::string_view ch) const {
  if (ch.empty() || ch.size() > 4) return std::nullopt;
  auto it = char_ids_.find(CharKey(ch));
  if (it == char_ids_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::InitialSymbols(std::string_view word, std::vector<Symbol>* symbols) const {
  symbols->clear();
  auto add = [&](uint32_t id, uint32_t len) {
    const int32_t n = static_cast<int32_t>(symbols->size());
    symbols->push_back({id, n - 1, n + 1, len});
  };
  // A pending unknown run: (bytes covered), fused when fuse_unk.
  uint32_t unk_len = 0;
  auto flush_unk = [&] {
    if (unk_len > 0) add(*unk_id_, unk_len);
    unk_len = 0;
  };
  auto unknown = [&](uint32_t len) {
    if (!unk_id_) return;  // no unknown token: the character is dropped, as in the library
    if (options_.fuse_unk) {
      unk_len += len;
    } else {
      flush_unk();
      unk_len = len;
    }
  };
  if (options_.byte_level) {
    for (unsigned char c : word) {
      if (byte_ids_[c] >= 0) {
        flush_unk();
        add(static_cast<uint32_t>(byte_ids_[c]), 1);
      } else {
        unknown(1);
      }
    }
  } else {
    size_t i = 0;
    while (i < word.size()) {
      const size_t at = i;
      i += Utf8Len(static_cast<unsigned char>(word[i]));
      if (i > word.size()) i = word.size();
      const std::string_view ch = word.substr(at, i - at);
      if (const std::optional<uint32_t> id = CharId(ch)) {
        flush_unk();
        add(*id, static_cast<uint32_t>(ch.size()));
        continue;
      }
      if (options_.byte_fallback) {
        bool all = true;
        for (unsigned char c : ch) all &= byte_ids_[c] >= 0;
        if (all) {
          flush_unk();
          for (unsigned char c : ch) add(static_cast<uint32_t>(byte_ids_[c]), 1);
          continue;
        }
      }
      unknown(static_cast<uint32_t>(ch.size()));
    }
  }
  flush_unk();
  if (!symbols->empty()) symbols->back().next = -1;
}

void BpeModel::Encode(std::string_view word, std::vector<uint32_t>* out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    auto it = vocab_.find(common::AbslView(word));
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  if (word_mark_.empty()) {
    EncodeCached(word, out);
    return;
  }
  for (size_t from = 0; from < word.size();) {
    const size_t cut = NextSafeCut(word, from);
    EncodeCached(word.substr(from, cut - from), out);
    from = cut;
  }
}

size_t BpeModel::NextSafeCut(std::string_view word, size_t from) const {
  for (size_t at = word.find(word_mark_, from + 1); at != std::string_view::npos;
       at = word.find(word_mark_, at + 1)) {
    const size_t b = CharStartBefore(word, at, from);
    size_t i = b;
    const int32_t cp = DecodeUtf8(word, &i);
    // The character must be its own token: a byte-fallback or unknown symbol is not one.
    if (cp < 0 || cp == 0x2581 || i != at || joins_mark_.contains(cp) ||
        !CharId(word.substr(b, at - b))) {
      continue;
    }
    return at;
  }
  return word.size();
}

void BpeModel::EncodeCached(std::string_view word, std::vector<uint32_t>* out) const {
  if (word.size() > kMaxCachedWordBytes) {
    EncodeUncached(word, out);
    return;
  }
  WordCache& cache = ThreadCache(instance_);
  if (cache.Find(word, out)) return;
  const size_t before = out->size();
  EncodeUncached(word, out);
  cache.Insert(word, absl::MakeConstSpan(out->data() + before, out->size() - before));
}

void BpeModel::EncodeWhole(std::string_view word, std::vector<uint32_t>* out) const {
  EncodeWith(word, /*max_scan_symbols=*/0, out);
}

void BpeModel::EncodeUncached(std::string_view word, std::vector<uint32_t>* out) const {
  EncodeWith(word, kMaxScanSymbols, out);
}

void BpeModel::EncodeWith(std::string_view word, size_t max_scan_symbols,
                          std::vector<uint32_t>* out) const {
  thread_local std::vector<Symbol> symbols;
  InitialSymbols(word, &symbols);
  if (symbols.size() <= max_scan_symbols) {
    MergeByScan(symbols);
  } else {
    MergeByHeap(symbols);
  }
  for (int32_t i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    out->push_back(symbols[i].id);
  }
}

void BpeModel::MergeByScan(std::vector<Symbol>& symbols) const {
  // pair[i]: the merge of symbol i with its right neighbour, copied out of the table (a scan
  // then reads one small array, not a hash lookup per pair). A merge changes only the merged
  // symbol's two pairs: two lookups a step.
  static constexpr Merge kNone{UINT32_MAX, 0};
  auto lookup = [this](uint32_t a, uint32_t b) {
    const Merge* m = FindMerge(a, b);
    return m == nullptr ? kNone : *m;
  };
  thread_local std::vector<Merge> pair;
  const size_t n = symbols.size();
  if (n < 2) return;
  pair.resize(n);
  for (size_t i = 0; i + 1 < n; ++i) pair[i] = lookup(symbols[i].id, symbols[i + 1].id);
  pair[n - 1] = kNone;
  for (;;) {
    // The lowest rank, the leftmost on ties.
    int32_t best = -1;
    uint32_t best_rank = UINT32_MAX;
    for (int32_t i = 0; i != -1; i = symbols[i].next) {
      if (pair[i].rank < best_rank) {
        best = i;
        best_rank = pair[i].rank;
      }
    }
    if (best < 0) return;
    Symbol& left = symbols[best];
    Symbol& right = symbols[left.next];
    left.id = pair[best].id;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next != -1) symbols[right.next].prev = best;
    pair[best] = left.next == -1 ? kNone : lookup(left.id, symbols[left.next].id);
    if (left.prev != -1) pair[left.prev] = lookup(symbols[left.prev].id, left.id);
  }
}

void BpeModel::MergeByHeap(std::vector<Symbol>& symbols) const {
  const size_t n = symbols.size();
  if (n < 2) return;
  // The library's algorithm: a min-heap of (rank, position) candidates; stale ones (a side
  // already merged away, or the pair no longer producing this id) are skipped when popped.
  struct Candidate {
    uint32_t rank;
    int32_t pos;
    uint32_t id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  for (size_t i = 0; i + 1 < n; ++i) {
    if (const Merge* m = FindMerge(symbols[i].id, symbols[i + 1].id)) {
      heap.push({m->rank, static_cast<int32_t>(i), m->id});
    }
  }
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next == -1) continue;
    Symbol& right = symbols[left.next];
    const Merge* m = FindMerge(left.id, right.id);
    if (m == nullptr || m->id != top.id) continue;
    left.id = top.id;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next != -1) symbols[right.next].prev = top.pos;
    if (left.prev != -1) {
      if (const Merge* pm = FindMerge(symbols[left.prev].id, left.id)) {
        heap.push({pm->rank, left.prev, pm->id});
      }
    }
    if (left.next != -1) {
      if (const Merge* nm = FindMerge(left.id, symbols[left.next].id)) {
        heap.push({nm->rank, top.pos, nm->id});
      }
    }
  }
}

}  // namespace kvgate::tokenizer::hf
