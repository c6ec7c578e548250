// File: tokenizer/jinja_render.h
// Internal to the Jinja engine: the renderer that walks a template's syntax tree, shared by the
// evaluator (jinja_eval.cc: nodes, expressions, globals) and the replay of reusable loops'
// iterations (jinja_replay.cc, jinja_memo.h). One Renderer per render.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/strings.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_memo.h"

namespace kvgate::tokenizer::jinja {

// The names one scope binds (the template's, a loop iteration's, a macro call's), chained to the
// enclosing scope's.
struct Frame {
  explicit Frame(const Frame* p = nullptr) : parent(p), depth(p != nullptr ? p->depth + 1 : 0) {}
  const Frame* parent;
  int depth;  // the root's is 0
  std::vector<std::pair<std::string, Value>> vars;
  /// `*where`: the depth of the frame that binds `name`.
  const Value* Find(std::string_view name, int* where = nullptr) const {
    for (const Frame* f = this; f != nullptr; f = f->parent) {
      for (auto it = f->vars.rbegin(); it != f->vars.rend(); ++it) {
        if (it->first == name) {
          if (where != nullptr) *where = f->depth;
          return &it->second;
        }
      }
    }
    return nullptr;
  }
  void Set(std::string_view name, Value v) {
    for (auto& [k, x] : vars) {
      if (k == name) {
        x = std::move(v);
        return;
      }
    }
    vars.emplace_back(std::string(name), std::move(v));
  }
};

enum class Flow { kNormal, kBreak, kContinue };

// A loop's `loop` variable. An agent's history makes loops of a thousand iterations, so the
// object is updated in place when the previous iteration left no copy of it or of its
// `cycle` behind, and built anew otherwise.
class LoopObject {
 public:
  const Value& At(const Array& items, int64_t i) {
    const auto len = static_cast<int64_t>(items.size());
    if (!value_.is_object() || !value_.sole_owner() ||
        !value_.object().back().second.sole_owner()) {
      Build();
    }
    Object& o = value_.mutable_object();
    o[0].second = Value::Int(i + 1);
    o[1].second = Value::Int(i);
    o[2].second = Value::Int(len - i);
    o[3].second = Value::Int(len - i - 1);
    o[4].second = Value::Bool(i == 0);
    o[5].second = Value::Bool(i == len - 1);
    o[6].second = Value::Int(len);
    o[9].second = i > 0 ? items[i - 1] : Value();
    o[10].second = i + 1 < len ? items[i + 1] : Value();
    *index_ = i;
    return value_;
  }

 private:
  void Build() {
    Object o;
    o.reserve(12);
    for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "length"})
      o.emplace_back(key, Value());
    o.emplace_back("depth", Value::Int(1));
    o.emplace_back("depth0", Value::Int(0));
    o.emplace_back("previtem", Value());
    o.emplace_back("nextitem", Value());
    index_ = std::make_shared<int64_t>(0);
    o.emplace_back("cycle", Value::Callable("cycle", [i = index_](const Args& a) {
                     if (a.positional.empty()) Throw("no items for cycling given");
                     return a.positional[*i % static_cast<int64_t>(a.positional.size())];
                   }));
    value_ = Value::MakeObject(std::move(o));
  }
  Value value_;
  std::shared_ptr<int64_t> index_;
};

// What an iteration being recorded read from outside itself (frames shallower than `depth`, the
// context, the globals) and wrote there (namespace attributes).
struct Trace {
  int depth = 0;
  Iteration it;
  std::vector<bool> slots;                                   // free expressions traced
  std::vector<std::string> names;                            // outer names traced
  std::vector<std::pair<std::string, std::string>> attrs;    // namespace attributes traced
  std::vector<std::pair<const void*, std::string>> written;  // (namespace payload, attribute)
  bool abandoned = false;  // read what the trace cannot express: not stored
  bool Wrote(const void* ns) const {
    for (const auto& w : written) {
      if (w.first == ns) return true;
    }
    return false;
  }
};

class Renderer {
 public:
  Renderer(const Value& context, std::string* out, RenderMemo* memo, const KnownHashes* known)
      : context_(context), out_(out), memo_(memo), known_(known) {}
  ~Renderer() {
    if (memo_ != nullptr) memo_->Count(hits_, misses_);
  }

  void RenderBody(const Body& body, Frame* frame, Flow* flow) {
    for (const auto& n : body) {
      RenderNode(*n, frame, flow);
      if (*flow != Flow::kNormal) return;
    }
  }

 private:
  using N = Template::Node;
  using K = Value::Kind;

  [[noreturn]] void Fail(int line, std::string_view msg) {
    Throw(common::StrCat("template line ", line, ": ", msg));
  }

  void RenderNode(const N& n, Frame* frame, Flow* flow);

  void Assign(const std::vector<std::string>& targets, Value v, Frame* frame, int line);

  // What `for x in v` visits: list items, dict keys, string characters.
  Array Iterate(const Value& v, int line);

  void RenderFor(const N& n, Frame* frame);

  // ---- reuse of earlier renders' iterations (jinja_memo.h) ----

  // Replays a stored iteration of `item` whose reads all match, or renders it and stores it.
  void RenderIteration(const N& n, const Value& item, Frame* f, const Frame& outer, Flow* flow);

  bool Matches(const Iteration& it, const LoopMemo& memo, const Frame& f, const Frame& outer);

  // A namespace the loop writes that another outer name can also reach: reads through that
  // name are not traced as reads of the namespace, so such a loop is rendered in full.
  bool Aliased(const LoopMemo& memo, const Frame& frame);
  static bool Reaches(const Value& v, const void* ns);

  ValueHash Hash(const Value& item) const;

  // A free expression: evaluated untraced, its value traced once.
  Value EvalTraced(const Expr& e, const Frame& frame);

  void TraceName(const std::string& name, const Value& v, int depth);

  void TraceAttr(const std::string& name, const std::string& attr, const Value& ns);

  void TraceWrite(const std::string& name, const std::string& attr, const Value& ns,
                  const Value& v);

  Value MakeMacro(const N& n, Frame* defining);

  // ---- expressions ----

  Value Lookup(const std::string& name, const Frame& frame, int line) {
    return LookupAt(name, frame, nullptr, line);
  }
  // `*depth`: the depth of the frame that binds `name`, -1 for the context and the globals.
  Value LookupAt(const std::string& name, const Frame& frame, int* depth, int line = 0) {
    if (const Value* v = frame.Find(name, depth)) return *v;
    if (depth != nullptr) *depth = -1;
    Value v = context_.Get(name);
    if (!v.is_undefined()) return v;
    return Global(name, line);
  }

  Value Global(const std::string& name, int line);

  Args EvalArgs(const Expr& e, size_t first, const Frame& frame) {
    Args a;
    const size_t nkw = e.keywords.size();
    const size_t npos = e.kids.size() - first - nkw;
    for (size_t i = 0; i < npos; ++i) a.positional.push_back(Eval(*e.kids[first + i], frame));
    for (size_t i = 0; i < nkw; ++i) {
      a.keyword.emplace_back(e.keywords[i], Eval(*e.kids[first + npos + i], frame));
    }
    return a;
  }

  Value Eval(const Expr& e, const Frame& frame);
  Value Attr(const Value& obj, const std::string& name, int line);
  Value Item(const Value& obj, const Value& key, int line);
  Value Slice(const Value& obj, const Value& b, const Value& e, const Value& s, int line);
  Value BinaryOp(const std::string& op, const Value& a, const Value& b, int line);
  static bool IsSum(const Expr& e) { return e.op == Expr::Op::kBinary && e.name == "+"; }
  Value Sum(const Expr& e, const Frame& frame, std::string* out);
  bool CompareOp(const std::string& op, const Value& a, const Value& b, int line);
  Value Filter(const std::string& name, const Value& v, const Args& args, int line) {
    try {
      return CallFilter(name, v, args);
    } catch (const Error& e) {
      Fail(line, e.message);
    }
  }
  bool Test(const std::string& name, const Value& v, const Args& args, int line) {
    try {
      return CallTest(name, v, args);
    } catch (const Error& e) {
      Fail(line, e.message);
    }
  }
  Value Method(const Value& obj, const std::string& name, int) { return MethodOf(obj, name); }

  const Value& context_;
  std::string* out_;
  // Bounds on what a template can make the gateway do: templates are data from model files.
  static constexpr int kMaxCallDepth = 64;
  static constexpr uint64_t kMaxSteps = 1'000'000;
  static constexpr size_t kMaxOutputBytes = size_t{256} << 20;
  void Tick(int line) {
    if (++steps_ > kMaxSteps) Fail(line, "the template runs too long");
    if (out_->size() > kMaxOutputBytes) Fail(line, "the template's output is too large");
  }

  int loop_depth_ = 0;
  int call_depth_ = 0;
  uint64_t steps_ = 0;
  RenderMemo* memo_;          // null: every iteration rendered
  const KnownHashes* known_;  // may be null
  Trace* trace_ = nullptr;    // the iteration being recorded
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace kvgate::tokenizer::jinja
