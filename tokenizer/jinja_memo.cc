#include "tokenizer/jinja_memo.h"

#define XXH_INLINE_ALL  // the many small updates of a value inlined; XXH3_state_t on the stack
#include <xxhash.h>

#include <cstring>

#include "absl/container/flat_hash_set.h"

namespace kvgate::tokenizer::jinja {
namespace {

using K = Value::Kind;
using N = Template::Node;

void Feed(XXH3_state_t* s, const void* p, size_t n) { XXH3_128bits_update(s, p, n); }
void FeedInt(XXH3_state_t* s, uint64_t x) { Feed(s, &x, sizeof x); }
void FeedString(XXH3_state_t* s, const std::string& str) {
  FeedInt(s, str.size());
  Feed(s, str.data(), str.size());
}

// A bool's, int's or float's 64 bits.
uint64_t ScalarBits(const Value& v) {
  if (v.kind() != K::kFloat) return static_cast<uint64_t>(v.as_int());
  uint64_t bits;
  const double f = v.as_float();
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

void FeedValue(XXH3_state_t* s, const Value& v) {
  const uint8_t kind = static_cast<uint8_t>(v.kind());
  Feed(s, &kind, 1);
  switch (v.kind()) {
    case K::kUndefined:
    case K::kNone:
      return;
    case K::kBool:
    case K::kInt:
    case K::kFloat:
      FeedInt(s, ScalarBits(v));
      return;
    case K::kString:
      FeedString(s, v.str());
      return;
    case K::kArray:
      FeedInt(s, (v.array().size() << 1) | (v.is_tuple() ? 1 : 0));
      for (const Value& x : v.array()) FeedValue(s, x);
      return;
    case K::kObject:
    case K::kNamespace:
      FeedInt(s, v.object().size());
      for (const auto& [k, x] : v.object()) {
        FeedString(s, k);
        FeedValue(s, x);
      }
      return;
    case K::kCallable:
      FeedString(s, v.callable_name());
      return;
  }
}

// ---- the analysis ----

// Functions a reusable loop may call: pure, or failing the render (raise_exception).
bool PureFunction(const std::string& name) {
  return name == "range" || name == "namespace" || name == "dict" || name == "raise_exception";
}

struct LoopScan {
  absl::flat_hash_set<std::string> locals;      // names the body binds (targets, set, for)
  absl::flat_hash_set<std::string> namespaces;  // names whose attributes the body sets
  bool ok = true;
  bool output = false;

  void Calls(const Expr* e) {
    if (e == nullptr) return;
    if (e->op == Expr::Op::kCall) {
      const Expr& callee = *e->kids[0];
      // Methods (str/list/dict methods are pure: the mutating ones are refused) and loop.cycle.
      const bool method = callee.op == Expr::Op::kAttr;
      const bool pure = callee.op == Expr::Op::kName && PureFunction(callee.name);
      if (!method && !pure) ok = false;
    }
    for (const auto& k : e->kids) Calls(k.get());
  }

  void Body(const jinja::Body& body) {
    for (const auto& n : body) {
      switch (n->kind) {
        case N::Kind::kText:
        case N::Kind::kOutput:
          output = true;
          break;
        case N::Kind::kSet:
          if (!n->attr.empty()) {
            namespaces.insert(n->text);
          } else {
            locals.insert(n->targets.begin(), n->targets.end());
          }
          break;
        case N::Kind::kSetBlock:
        case N::Kind::kFor:
          locals.insert(n->targets.begin(), n->targets.end());
          break;
        case N::Kind::kMacro:  // a macro's body reads the root frame: not traced
          ok = false;
          break;
        default:
          break;
      }
      Calls(n->expr.get());
      for (const auto& c : n->conds) Calls(c.get());
      for (const auto& b : n->bodies) Body(b);
    }
  }

  // A free expression reads only names the body never binds or sets attributes of, and `loop`
  // where it is this loop's (outside nested loops).
  bool Free(const Expr& e, bool loop_free) const {
    if (e.op == Expr::Op::kName) {
      if (e.name == "loop") return loop_free;
      return !locals.contains(e.name) && !namespaces.contains(e.name);
    }
    for (const auto& k : e.kids) {
      if (k && !Free(*k, loop_free)) return false;
    }
    return true;
  }

  void Mark(Expr* e, bool loop_free, LoopMemo* memo) const {
    if (e == nullptr) return;
    if (Free(*e, loop_free)) {
      if (e->op != Expr::Op::kLiteral) {
        e->memo_slot = static_cast<int>(memo->slots.size());
        memo->slots.push_back(e);
      }
      return;
    }
    for (auto& k : e->kids) Mark(k.get(), loop_free, memo);
  }

  void MarkBody(jinja::Body& body, bool loop_free, LoopMemo* memo) const {
    for (auto& n : body) {
      if (n->kind == N::Kind::kFor) {
        Mark(n->expr.get(), loop_free, memo);  // the iterable is evaluated outside the nested loop
        for (auto& c : n->conds) Mark(c.get(), false, memo);
        for (auto& b : n->bodies) MarkBody(b, false, memo);
        continue;
      }
      Mark(n->expr.get(), loop_free, memo);
      for (auto& c : n->conds) Mark(c.get(), loop_free, memo);
      for (auto& b : n->bodies) MarkBody(b, loop_free, memo);
    }
  }
};

void AnalyzeLoop(N& loop) {
  LoopScan scan;
  scan.locals.insert(loop.targets.begin(), loop.targets.end());
  scan.Body(loop.bodies[0]);
  if (!scan.ok || !scan.output || scan.locals.contains("loop") ||
      scan.namespaces.contains("loop")) {
    return;
  }
  auto memo = std::make_unique<LoopMemo>();
  scan.MarkBody(loop.bodies[0], true, memo.get());
  memo->namespaces.assign(scan.namespaces.begin(), scan.namespaces.end());
  loop.memo = std::move(memo);
}

}  // namespace

ValueHash HashValue(const Value& v) {
  // Scalars and strings in one call (a replay checks a few small values an iteration); the
  // kind is the seed, so values of different kinds differ.
  const uint64_t seed = static_cast<uint64_t>(v.kind()) + 1;
  XXH128_hash_t h;
  switch (v.kind()) {
    case K::kUndefined:
    case K::kNone:
      return {seed, 0};
    case K::kBool:
    case K::kInt:
    case K::kFloat: {
      const uint64_t bits = ScalarBits(v);
      h = XXH3_128bits_withSeed(&bits, sizeof bits, seed);
      return {h.low64, h.high64};
    }
    case K::kString:
      h = XXH3_128bits_withSeed(v.str().data(), v.str().size(), seed);
      return {h.low64, h.high64};
    default:
      break;
  }
  XXH3_state_t s;
  XXH3_128bits_reset(&s);
  FeedValue(&s, v);
  h = XXH3_128bits_digest(&s);
  return {h.low64, h.high64};
}

ValueHash IterationKey(const void* loop, const ValueHash& item) {
  const uint64_t parts[3] = {reinterpret_cast<uintptr_t>(loop), item.lo, item.hi};
  const XXH128_hash_t h = XXH3_128bits(parts, sizeof parts);
  return {h.low64, h.high64};
}

void AnalyzeLoops(Body& body) {
  for (auto& n : body) {
    if (n->kind == N::Kind::kFor) {
      AnalyzeLoop(*n);
      if (n->bodies.size() > 1) AnalyzeLoops(n->bodies[1]);  // `else` runs outside the loop
      continue;
    }
    for (auto& b : n->bodies) AnalyzeLoops(b);  // if, set blocks, macros (called at depth 0)
  }
}

namespace {

// What a written value holds (a template may write long strings into a namespace), roughly.
size_t ValueBytes(const Value& v) {
  size_t n = sizeof(Value);
  if (v.is_string()) {
    n += v.str().size();
  } else if (v.is_array()) {
    for (const Value& x : v.array()) n += ValueBytes(x);
  } else if (v.is_object()) {
    for (const auto& [k, x] : v.object()) n += k.size() + ValueBytes(x);
  }
  return n;
}

}  // namespace

size_t Iteration::CountBytes() const {
  size_t n = sizeof(Iteration) + output.size();
  for (const Read& r : reads) n += sizeof(Read) + r.name.size() + r.attr.size();
  for (const Write& w : writes) {
    n += sizeof(Write) + w.name.size() + w.attr.size() + ValueBytes(w.value);
  }
  return n;
}

std::shared_ptr<const RenderMemo::Variants> RenderMemo::Find(const ValueHash& key) {
  common::MutexLock lock(&mu_);
  const auto* v = iterations_.Find(key);
  return v != nullptr ? *v : nullptr;
}

void RenderMemo::Add(const ValueHash& key, std::shared_ptr<const Iteration> it) {
  common::MutexLock lock(&mu_);
  Variants v;
  if (const auto* old = iterations_.Find(key)) v = **old;
  v.insert(v.begin(), std::move(it));
  if (v.size() > kVariants) v.pop_back();
  size_t bytes = 0;
  for (const auto& x : v) bytes += x->bytes;
  iterations_.Put(key, std::make_shared<const Variants>(std::move(v)), bytes);
}

void RenderMemo::Count(uint64_t hits, uint64_t misses) {
  if (hits + misses == 0) return;
  common::MutexLock lock(&mu_);
  stats_.hits += hits;
  stats_.misses += misses;
}

RenderMemo::Stats RenderMemo::stats() const {
  common::MutexLock lock(&mu_);
  Stats s = stats_;
  s.bytes = iterations_.bytes();
  return s;
}

}  // namespace kvgate::tokenizer::jinja
