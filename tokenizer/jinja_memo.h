// File: tokenizer/jinja_memo.h
// Internal to the Jinja engine: what lets a render reuse the previous renders' loop iterations.
// An agent re-sends its whole history every turn, so a chat template's `for message in
// messages` renders the same messages again, most of them exactly as before. A top-level loop
// whose body the analysis accepts (jinja_parse.cc calls AnalyzeLoops) keeps each iteration's
// output keyed by its item, with a trace of everything else the iteration read from outside
// itself: the values of its free expressions (subexpressions that read only names the loop does
// not assign, and `loop`, e.g. `loop.last or messages[loop.index0 + 1].role != "tool"`), the
// outer names it read, the namespace attributes it read before writing them, and the namespace
// writes it made. A later iteration with an equal item replays a stored one when every traced
// read gives the same value again: the body is a function of those reads, so its output and
// writes are the same (jinja_eval.cc checks and replays; tests compare with a full render).
// Loops that call macros or functions outside a pure whitelist are never reused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/two_generations.h"

namespace kvgate::tokenizer::jinja {

/// A 128-bit content hash of a value (kind, contents; equal values hash equal, as Equal()
/// decides for values of the same kind).
ValueHash HashValue(const Value& v);
/// The key of an iteration: its loop node and its item's hash.
ValueHash IterationKey(const void* loop, const ValueHash& item);

/// Marks the reusable top-level loops of `body` (Node::memo) and their free expressions
/// (Expr::memo_slot). Loops inside loops are never reused on their own.
void AnalyzeLoops(Body& body);

/// One recorded iteration.
struct Iteration {
  struct Read {
    enum class Kind : uint8_t { kSlot, kName, kNamespaceAttr } kind;
    int slot = -1;
    std::string name, attr;
    ValueHash hash;
  };
  struct Write {
    std::string name, attr;
    Value value;  // a string, number, bool, none, list or dict: immutable, safe to share
  };
  std::vector<Read> reads;
  std::vector<Write> writes;
  std::string output;
  bool broke = false;  // the iteration ended with {% break %}
  size_t bytes = 0;    // CountBytes(), set before it is stored
  /// What it holds: output, trace and written values (a template may write long strings).
  size_t CountBytes() const;
};

/// The iterations a template has rendered, shared by the threads that render it; bounded in two
/// generations of `generation_bytes` each (outputs and traces). At most kVariants iterations per
/// key (the same item under different reads), the latest first.
class RenderMemo {
 public:
  static constexpr size_t kVariants = 4;
  struct Stats {
    uint64_t hits = 0, misses = 0;
    size_t bytes = 0;
  };
  explicit RenderMemo(size_t generation_bytes) : iterations_(generation_bytes) {}

  using Variants = std::vector<std::shared_ptr<const Iteration>>;
  /// The iterations stored for `key` (null when none): shared, never changed once stored.
  std::shared_ptr<const Variants> Find(const ValueHash& key);
  void Add(const ValueHash& key, std::shared_ptr<const Iteration> it);
  void Count(uint64_t hits, uint64_t misses);
  Stats stats() const;

 private:
  mutable common::Mutex mu_;
  TwoGenerations<ValueHash, std::shared_ptr<const Variants>> iterations_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvgate::tokenizer::jinja
