// File: tokenizer/hf_tokenizer.cc
// HfTokenizer's encoding: added tokens split out, then normalizer, pre-tokenizer and BPE model on
// the rest; chat bodies through the template and the incremental cache. Loading is hf_load.cc.
#include "tokenizer/hf_tokenizer.h"

#include <algorithm>

#include "tokenizer/chat_template.h"
#include "tokenizer/hf_added.h"
#include "tokenizer/hf_bpe.h"
#include "tokenizer/hf_text.h"
#include "tokenizer/incremental.h"

namespace kvgate::tokenizer {
namespace hf {
namespace {

bool EndsWithWord(std::string_view s) {
  if (s.empty()) return false;
  size_t i = CharStartBefore(s, s.size());
  const int32_t cp = DecodeUtf8(s, &i);
  return cp >= 0 && IsWordChar(static_cast<uint32_t>(cp));
}

bool StartsWithWord(std::string_view s) {
  if (s.empty()) return false;
  size_t i = 0;
  const int32_t cp = DecodeUtf8(s, &i);
  return cp >= 0 && IsWordChar(static_cast<uint32_t>(cp));
}

size_t LeadingSpace(std::string_view s) {
  size_t i = 0, end = 0;
  while (i < s.size()) {
    const int32_t cp = DecodeUtf8(s, &i);
    if (cp < 0 || !IsUnicodeWhitespace(static_cast<uint32_t>(cp))) break;
    end = i;
  }
  return end;
}

size_t TrailingSpaceStart(std::string_view s) {
  size_t e = s.size();
  while (e > 0) {
    const size_t b = CharStartBefore(s, e);
    size_t i = b;
    const int32_t cp = DecodeUtf8(s, &i);
    if (cp < 0 || !IsUnicodeWhitespace(static_cast<uint32_t>(cp))) break;
    e = b;
  }
  return e;
}

// The library's find_matches: calls f(begin, end, token index or -1) for consecutive splits
// covering `text`.
template <typename F>
void FindAdded(const AddedVocab& v, const Trie& trie, std::string_view text, F&& f) {
  size_t start_offset = 0;
  if (!trie.empty()) {
    size_t pos = 0;
    while ((pos = trie.NextCandidate(text, pos)) < text.size()) {
      int32_t token = -1;
      const size_t len = trie.LongestAt(text, pos, &token);
      if (len == 0) {
        ++pos;
        continue;
      }
      size_t start = pos, stop = pos + len;
      pos = stop;
      const AddedToken& t = v.tokens[token];
      if (t.single_word) {
        const bool start_space = start == 0 || !EndsWithWord(text.substr(0, start));
        const bool stop_space = stop == text.size() || !StartsWithWord(text.substr(stop));
        if (!start_space || !stop_space) continue;
      }
      if (t.lstrip) start = std::max(TrailingSpaceStart(text.substr(0, start)), start_offset);
      if (t.rstrip) stop += LeadingSpace(text.substr(stop));
      if (start_offset < start) f(start_offset, start, -1);
      f(start, stop, token);
      start_offset = stop;
    }
  }
  if (start_offset != text.size() || text.empty()) f(start_offset, text.size(), -1);
}

}  // namespace
}  // namespace hf

HfTokenizer::HfTokenizer() = default;
HfTokenizer::~HfTokenizer() = default;

std::optional<uint32_t> HfTokenizer::TokenToId(std::string_view token) const {
  for (const hf::AddedToken& a : added_->tokens) {
    if (a.content == token) return a.id;
  }
  return model_->TokenToId(token);
}

void HfTokenizer::EncodeText(std::string_view text, bool origin0,
                             std::vector<uint32_t>* out) const {
  if (text.empty()) return;
  if (!pre_tokenizer_) {
    model_->Encode(text, out);
    return;
  }
  thread_local hf::Pieces pieces, scratch;
  pieces.buf.assign(text);
  pieces.pieces.assign(1, hf::Piece{0, static_cast<uint32_t>(text.size()), origin0});
  pre_tokenizer_->Apply(&pieces, &scratch);
  for (const hf::Piece& p : pieces.pieces) model_->Encode(pieces.view(p), out);
}

absl::Status HfTokenizer::EncodeSegments(std::string_view text, bool origin0,
                                         std::vector<uint32_t>* out) const {
  absl::Status status;
  std::string normalized;
  hf::FindAdded(*added_, added_->raw, text, [&](size_t b, size_t e, int32_t token) {
    if (token >= 0) {
      out->push_back(added_->tokens[token].id);
      return;
    }
    std::string_view seg = text.substr(b, e - b);
    if (normalizer_) {
      if (absl::Status s = normalizer_->Normalize(seg, &normalized); !s.ok()) {
        status.Update(s);
        return;
      }
      seg = normalized;
    }
    const bool seg0 = origin0 && b == 0;
    hf::FindAdded(*added_, added_->normalized, seg, [&](size_t nb, size_t ne, int32_t nt) {
      if (nt >= 0) {
        out->push_back(added_->tokens[nt].id);
      } else {
        EncodeText(seg.substr(nb, ne - nb), seg0 && nb == 0, out);
      }
    });
  });
  return status;
}

absl::Status HfTokenizer::Encode(std::string_view text, bool add_special_tokens,
                                 std::vector<uint32_t>* out) const {
  out->clear();
  if (!hf::IsValidUtf8(text)) return absl::InvalidArgumentError("text is not valid UTF-8");
  if (add_special_tokens) out->insert(out->end(), prefix_ids_.begin(), prefix_ids_.end());
  if (absl::Status s = EncodeSegments(text, true, out); !s.ok()) return s;
  if (add_special_tokens) out->insert(out->end(), suffix_ids_.begin(), suffix_ids_.end());
  return absl::OkStatus();
}

absl::Status HfTokenizer::EncodeRange(std::string_view text, size_t from, size_t to,
                                      std::vector<uint32_t>* out) const {
  return EncodeSegments(text.substr(from, to - from), from == 0, out);
}

void HfTokenizer::CutPoints(std::string_view text, std::vector<size_t>* out) const {
  out->clear();
  if (!added_->cut_safe) return;
  hf::FindAdded(*added_, added_->raw, text, [&](size_t b, size_t, int32_t token) {
    if (token >= 0 && b > 0) out->push_back(b);
  });
}

absl::Status HfTokenizer::Tokenize(const kvindex::CanonicalPrompt& prompt,
                                   std::vector<uint32_t>* out) const {
  switch (prompt.kind) {
    case kvindex::PromptKind::kTokens:
      *out = prompt.tokens;
      return absl::OkStatus();
    case kvindex::PromptKind::kText:
      return Encode(prompt.bytes, true, out);
    case kvindex::PromptKind::kChat:
      break;
  }
  return absl::InvalidArgumentError("a chat prompt is tokenised from its body (TokenizeChat)");
}

absl::Status HfTokenizer::RenderChat(std::string_view body, std::string* rendered,
                                     bool* add_special_tokens, bool reuse,
                                     const ChatLayout* layout) const {
  if (template_ == nullptr) return template_status_;
  return template_->RenderRequest(body, special_tokens_, rendered, add_special_tokens, reuse,
                                  layout);
}

absl::Status HfTokenizer::TokenizeChatFull(std::string_view body,
                                           std::vector<uint32_t>* out) const {
  std::string rendered;
  bool add_special = false;
  if (absl::Status s = RenderChat(body, &rendered, &add_special, false); !s.ok()) return s;
  return Encode(rendered, add_special, out);
}

absl::Status HfTokenizer::TokenizeChat(std::string_view body, const ChatLayout* layout,
                                       std::vector<uint32_t>* out) const {
  thread_local std::string rendered;
  bool add_special = false;
  if (absl::Status s = RenderChat(body, &rendered, &add_special, true, layout); !s.ok()) return s;
  if (add_special) return Encode(rendered, true, out);
  return cache_->Encode(*this, rendered, out);  // it checks the UTF-8 it has not seen
}

HfTokenizer::CacheStats HfTokenizer::cache_stats() const {
  const auto s = cache_->stats();
  return {s.hits, s.misses, s.reused_bytes, s.encoded_bytes};
}

}  // namespace kvgate::tokenizer
