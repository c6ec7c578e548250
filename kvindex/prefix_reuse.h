// File: kvindex/prefix_reuse.h
// Work proportional to what is new (issue 31): an agent re-sends its whole conversation every
// turn, ~95% of it byte for byte. For a long chat-completions, Messages or Responses body the
// canonicaliser keeps what it made of each element of the conversation array (its canonical
// bytes, where it ended in the body, a hash of its body bytes); the session's next turn, whose
// body starts with the same bytes, is parsed with those elements cut out (a smaller JSON
// document: the same fields, the new elements) and their canonical bytes copied back. What the
// cut-out messages were is proven by their bytes: a hash of every message's body bytes, from the
// body's first byte, must match. Nothing here trusts a session id. Thread-safe: one cache for all
// gateway threads; entries are immutable.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "kvindex/block_memo.h"

namespace kvgate::kvindex {

struct CanonicalPrompt;  // kvindex/canonicalize.h

/// What one body's messages (the elements of its conversation array: chat and Messages
/// `messages`, Responses `input`) were: immutable once published.
struct ReusablePrefix {
  // Per message, what the conversion carries past it (the agents' APIs convert a message by
  // what came before it: kvindex/agent_messages.cc, agent_responses.cc).
  enum State : uint8_t {
    kResumable = 1,     // every canonical message up to here is final: a walk may start after it
    kSeenOther = 2,     // Messages: a user or assistant message came before (InlineSystems)
    kAfterToolUse = 4,  // Messages: it was an assistant message with tool_use
  };

  // What the fields before the conversation array made of the request. A match proves their
  // bytes (segment 0 runs from the body's first byte), so the next turn's walk skips them too.
  struct Fields {
    size_t begin = 0;  // offset of the first field (after `{` and whitespace)
    std::string model, cache_salt, user, metadata_user_id, prompt_cache_key, previous_response_id,
        conversation;
    bool stream = false;
    bool store = true;
    std::string system;      // agents' APIs: the top-level system prompt / instructions
    bool has_tools = false;  // agents' APIs
    std::string tools;       // canonical tools section (chat: `tools`; agents: the converted ones)
    std::string functions;   // chat: canonical `functions` section

    size_t bytes() const {
      return model.capacity() + cache_salt.capacity() + user.capacity() +
             metadata_user_id.capacity() + prompt_cache_key.capacity() +
             previous_response_id.capacity() + conversation.capacity() + system.capacity() +
             tools.capacity() + functions.capacity();
    }
  };

  uint64_t key = 0;           // PrefixReuseCache::KeyOf(body, api)
  size_t messages_begin = 0;  // offset of the first message (after `[` and whitespace)
  bool has_fields = false;    // `fields` is filled in
  Fields fields;
  // Per message i: the offset of the `,` or `]` after it, XXH3 of the body bytes from the
  // previous separator (0 for message 0) up to this one, where its canonical bytes end, and
  // its State bits.
  std::vector<uint32_t> separators;
  std::vector<uint64_t> segment_hashes;
  std::vector<uint32_t> canonical_ends;
  std::vector<uint8_t> states;
  // The body's canonical prompt: `header_bytes` of tool sections and (agents' APIs) the system
  // message, then the messages' canonical bytes (canonical_ends count from there). Held as
  // pieces shared with the entries of the session's earlier turns: an entry that reused the
  // previous one's bytes adds one piece, the bytes its turn added, so publishing a turn copies
  // what it added, not the whole prompt again (docs/kvindex.md, "Prefix reuse").
  struct Piece {
    std::shared_ptr<const std::string> bytes;
    size_t size = 0;  // the piece is `bytes`' first `size` bytes
  };
  /// Past this many pieces the next entry joins them into one (a copy of the whole prompt), so
  /// that reading them back stays one short loop and a long session holds no thousand strings.
  static constexpr size_t kMaxPieces = 16;
  std::vector<Piece> canonical;
  size_t canonical_size = 0;
  size_t header_bytes = 0;
  // Tool sections after the conversation (the OpenAI SDKs' order), when no tools came before
  // it: a hash of their body bytes, in order (0: none such). Chat: they alone made the header,
  // which the next turn whose late sections hash alike takes as it is, unparsed. Agents' APIs:
  // `late_tools` is the canonical tools section they made, taken the same way.
  uint64_t late_hash = 0;
  std::shared_ptr<const std::string> late_tools;
  // The prompt's block hashes, once the planner has hashed it (kvindex/block_memo.h): kept
  // for blocks of 64 bytes (the default) or more, at most one 8-byte hash per 64 bytes.
  std::shared_ptr<BlockMemo> blocks;
  static size_t MaxHashes(size_t canonical_bytes) { return canonical_bytes / 64; }

  /// What the cache counts against its bound: every piece whole, shared or not (an entry a
  /// newer turn replaced gives its pieces to that turn's entry).
  size_t bytes() const {
    size_t held = 0;
    for (const Piece& p : canonical) held += p.bytes->capacity();
    if (late_tools != nullptr) held += late_tools->capacity();
    return sizeof(*this) + held + canonical_size / 8 + fields.bytes() +
           canonical.capacity() * sizeof(Piece) +
           separators.capacity() * (sizeof(uint32_t) * 2 + sizeof(uint64_t) + sizeof(uint8_t));
  }
  /// Appends the messages' canonical bytes up to the end of message `i` to `out`.
  void AppendMessagesThrough(int i, std::string* out) const {
    AppendCanonical(header_bytes, header_bytes + canonical_ends[i], out);
  }
  /// Appends the canonical bytes [begin, end) to `out`. (Inline: CanonicalPrompt's joins use
  /// it where prefix_reuse.cc is not linked.)
  void AppendCanonical(size_t begin, size_t end, std::string* out) const {
    size_t at = 0;  // where the current piece starts in the prompt
    for (const Piece& p : canonical) {
      if (at >= end) break;
      const size_t from = begin > at ? begin : at;
      const size_t to = end < at + p.size ? end : at + p.size;
      if (from < to) out->append(*p.bytes, from - at, to - from);
      at += p.size;
    }
  }
  /// Whether the canonical prompt starts with `bytes`.
  bool CanonicalStartsWith(std::string_view bytes) const;
  /// Sets this entry's canonical prompt to `prompt`'s, of which the first `reused` bytes are
  /// `prev`'s (null: none; at least what `prompt` borrowed from it): those are shared with
  /// `prev`, the rest copied.
  void KeepCanonical(const CanonicalPrompt& prompt, const ReusablePrefix* prev, size_t reused);
};

/// How a body can reuse an entry: its messages [0, messages] are the entry's; the walk resumes
/// after message `messages` in the state the entry recorded there.
struct PrefixMatch {
  std::shared_ptr<const ReusablePrefix> prefix;
  int messages = -1;     // the last reused message; -1: none
  size_t cut_begin = 0;  // the body's bytes [cut_begin, cut_end) are left out of the parse
  size_t cut_end = 0;
};

class PrefixReuseCache {
 public:
  /// Bodies shorter than this are parsed whole (the saving would not pay for the copy).
  static constexpr size_t kMinBodyBytes = 64 * 1024;
  /// The key: XXH3 of the body's first bytes, which a session's turns share, seeded with the
  /// API (one body's bytes mean different messages to chat and to Messages).
  static constexpr size_t kKeyBytes = 16 * 1024;
  /// Conversations kept per key. Sessions of one agent begin alike (its tools and system
  /// prompt fill the first 16 KiB), so many share a key; they differ from the first user message
  /// on, which is where their segment hashes part.
  static constexpr size_t kPerKey = 64;

  /// `max_bytes`: what all entries may hold together; the least recently used go first.
  explicit PrefixReuseCache(size_t max_bytes);

  /// `api`: the request's ApiKind (kvindex/canonicalize.h), as a number.
  static uint64_t KeyOf(std::string_view body, uint8_t api);

  /// The entry whose messages cover the longest prefix of `body`, and where to cut: the cut
  /// ends after a resumable message with another message after it.
  PrefixMatch Find(std::string_view body, uint8_t api);
  /// Publishes `entry` (replacing one with the same first message hashes); evicts to the limit.
  void Publish(std::shared_ptr<const ReusablePrefix> entry);

  struct Stats {
    uint64_t hits = 0;          // bodies parsed without some of their messages
    uint64_t misses = 0;        // long bodies parsed whole
    uint64_t reused_bytes = 0;  // body bytes not parsed thanks to the cache
    uint64_t late_tools = 0;    // chat bodies whose tools after the messages went unparsed
    size_t entries = 0;
    size_t bytes = 0;
  };
  Stats stats() const;
  void CountMiss();
  void CountHit(size_t reused_bytes);
  void CountLateTools();

 private:
  using Entry = std::shared_ptr<const ReusablePrefix>;
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_bytes_;
  mutable common::Mutex mu_;
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
  std::unordered_map<uint64_t, std::vector<std::list<Entry>::iterator>> by_key_
      ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

/// Hash of the body bytes [begin, end) (one message's segment).
uint64_t SegmentHash(std::string_view body, size_t begin, size_t end);

}  // namespace kvgate::kvindex
