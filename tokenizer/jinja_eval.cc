// The Jinja evaluator: walks the syntax tree with Python's value semantics and transformers'
// globals (raise_exception, strftime_now, range, namespace, dict). Errors are thrown as
// jinja::Error inside and become a Status at Template::Render. A reusable loop's iterations go
// through RenderIteration (jinja_replay.cc).
#include <algorithm>
#include <ctime>

#include "common/strings.h"
#include "tokenizer/hf_text.h"
#include "tokenizer/jinja_render.h"

namespace kvgate::tokenizer::jinja {

void Renderer::RenderNode(const N& n, Frame* frame, Flow* flow) {
  switch (n.kind) {
    case N::Kind::kText:
      out_->append(n.text);
      return;
    case N::Kind::kOutput: {
      if (IsSum(*n.expr)) {
        Sum(*n.expr, *frame, out_);
        return;
      }
      const Value v = Eval(*n.expr, *frame);
      if (v.is_string()) {
        out_->append(v.str());
      } else {
        out_->append(ToStr(v));
      }
      return;
    }
    case N::Kind::kIf:
      for (size_t i = 0; i < n.conds.size(); ++i) {
        if (Truthy(Eval(*n.conds[i], *frame))) {
          RenderBody(n.bodies[i], frame, flow);
          return;
        }
      }
      if (n.bodies.size() > n.conds.size()) RenderBody(n.bodies.back(), frame, flow);
      return;
    case N::Kind::kFor:
      RenderFor(n, frame);
      return;
    case N::Kind::kSet: {
      Value v = Eval(*n.expr, *frame);
      if (!n.attr.empty()) {
        int depth = 0;
        const Value* ns = frame->Find(n.text, &depth);
        if (ns == nullptr || ns->kind() != K::kNamespace) {
          Fail(n.line,
               common::StrCat("cannot assign attribute on non-namespace object '", n.text, "'"));
        }
        if (trace_ != nullptr && depth < trace_->depth) TraceWrite(n.text, n.attr, *ns, v);
        ns->Set(n.attr, std::move(v));
        return;
      }
      Assign(n.targets, std::move(v), frame, n.line);
      return;
    }
    case N::Kind::kSetBlock: {
      std::string captured;
      std::swap(captured, *out_);
      Flow f = Flow::kNormal;
      RenderBody(n.bodies[0], frame, &f);
      std::swap(captured, *out_);
      frame->Set(n.targets[0], Value::String(std::move(captured)));
      return;
    }
    case N::Kind::kMacro:
      frame->Set(n.text, MakeMacro(n, frame));
      return;
    case N::Kind::kBreak:
    case N::Kind::kContinue:
      if (loop_depth_ == 0) Fail(n.line, "break/continue outside a loop");
      *flow = n.kind == N::Kind::kBreak ? Flow::kBreak : Flow::kContinue;
      return;
    case N::Kind::kScope:
      RenderBody(n.bodies[0], frame, flow);
      return;
  }
}

void Renderer::Assign(const std::vector<std::string>& targets, Value v, Frame* frame, int line) {
  if (targets.size() == 1) {
    frame->Set(targets[0], std::move(v));
    return;
  }
  const Array items = Iterate(v, line);
  if (items.size() != targets.size()) {
    Fail(line, common::StrCat("cannot unpack ", items.size(), " values into ", targets.size()));
  }
  for (size_t i = 0; i < targets.size(); ++i) frame->Set(targets[i], items[i]);
}

// What `for x in v` visits: list items, dict keys, string characters.
Array Renderer::Iterate(const Value& v, int line) {
  switch (v.kind()) {
    case K::kArray:
      return v.array();
    case K::kObject: {
      Array keys;
      for (const auto& [k, _] : v.object()) keys.push_back(Value::String(k));
      return keys;
    }
    case K::kString: {
      Array chars;
      const auto cps = CodePoints(v.str());
      for (uint32_t cp : cps) {
        std::string s;
        hf::AppendUtf8(cp, &s);
        chars.push_back(Value::String(std::move(s)));
      }
      return chars;
    }
    case K::kUndefined:
      return {};
    default:
      Fail(line, common::StrCat("'", TypeName(v), "' object is not iterable"));
  }
}

void Renderer::RenderFor(const N& n, Frame* frame) {
  Array items = Iterate(Eval(*n.expr, *frame), n.line);
  if (!n.conds.empty()) {
    Array kept;
    for (Value& item : items) {
      Frame f(frame);
      Assign(n.targets, item, &f, n.line);
      if (Truthy(Eval(*n.conds[0], f))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    if (n.bodies.size() > 1) {
      Flow f = Flow::kNormal;
      RenderBody(n.bodies[1], frame, &f);
    }
    return;
  }
  const bool reuse = memo_ != nullptr && n.memo != nullptr && trace_ == nullptr &&
                     loop_depth_ == 0 && !Aliased(*n.memo, *frame);
  ++loop_depth_;
  const int64_t len = static_cast<int64_t>(items.size());
  LoopObject loop;
  for (int64_t i = 0; i < len; ++i) {
    Tick(n.line);
    Frame f(frame);
    Assign(n.targets, items[i], &f, n.line);
    f.vars.emplace_back("loop", loop.At(items, i));
    Flow flow = Flow::kNormal;
    if (reuse) {
      RenderIteration(n, items[i], &f, *frame, &flow);
    } else {
      RenderBody(n.bodies[0], &f, &flow);
    }
    if (flow == Flow::kBreak) break;
  }
  --loop_depth_;
}

Value Renderer::MakeMacro(const N& n, Frame* defining) {
  const N* node = &n;
  Renderer* self = this;
  const Frame* root = defining;
  while (root->parent != nullptr) root = root->parent;
  return Value::Callable(n.text, [node, self, root](const Args& args) {
    Frame f(root);
    size_t next = 0;
    for (size_t i = 0; i < node->targets.size(); ++i) {
      const std::string& name = node->targets[i];
      Value v;
      bool given = false;
      for (const auto& [k, kv] : args.keyword) {
        if (k == name) {
          v = kv;
          given = true;
        }
      }
      if (!given && next < args.positional.size()) {
        v = args.positional[next++];
        given = true;
      }
      if (!given && node->conds[i]) v = self->Eval(*node->conds[i], f);
      f.vars.emplace_back(name, std::move(v));
    }
    std::string captured;
    std::swap(captured, *self->out_);
    if (++self->call_depth_ > kMaxCallDepth) Throw("macro calls nested too deeply");
    const int depth = self->loop_depth_;
    self->loop_depth_ = 0;
    Flow flow = Flow::kNormal;
    self->RenderBody(node->bodies[0], &f, &flow);
    self->loop_depth_ = depth;
    --self->call_depth_;
    std::swap(captured, *self->out_);
    return Value::String(std::move(captured));
  });
}
Value Renderer::Global(const std::string& name, int line) {
  if (name == "raise_exception") {
    return Value::Callable(name, [](const Args& a) -> Value {
      Throw(a.positional.empty() ? "raise_exception" : ToStr(a.positional[0]));
    });
  }
  if (name == "strftime_now") {
    return Value::Callable(name, [](const Args& a) {
      const std::string fmt = a.positional.empty() ? "" : ToStr(a.positional[0]);
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
      return Value::String(std::string(buf, n));
    });
  }
  if (name == "range") {
    return Value::Callable(name, [](const Args& a) {
      int64_t start = 0, stop = 0, step = 1;
      if (a.positional.size() == 1) {
        stop = a.positional[0].as_int();
      } else if (a.positional.size() >= 2) {
        start = a.positional[0].as_int();
        stop = a.positional[1].as_int();
        if (a.positional.size() > 2) step = a.positional[2].as_int();
      }
      if (step == 0) Throw("range() arg 3 must not be zero");
      Array out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        out.push_back(Value::Int(i));
        if (out.size() > 1'000'000) Throw("range() too large");
      }
      return Value::MakeArray(std::move(out));
    });
  }
  if (name == "namespace" || name == "dict") {
    const K kind = name == "namespace" ? K::kNamespace : K::kObject;
    return Value::Callable(name, [kind](const Args& a) {
      Object o;
      for (const Value& p : a.positional) {
        if (p.is_object()) {
          for (const auto& kv : p.object()) o.push_back(kv);
        }
      }
      for (const auto& kv : a.keyword) o.push_back(kv);
      return Value::MakeObject(std::move(o), kind);
    });
  }
  return Value();
}

Value Renderer::Eval(const Expr& e, const Frame& frame) {
  using Op = Expr::Op;
  if (trace_ != nullptr && e.memo_slot >= 0) return EvalTraced(e, frame);
  switch (e.op) {
    case Op::kLiteral:
      return e.literal;
    case Op::kName: {
      if (trace_ == nullptr) return Lookup(e.name, frame, e.line);
      int depth = 0;
      Value v = LookupAt(e.name, frame, &depth, e.line);
      TraceName(e.name, v, depth);
      return v;
    }
    case Op::kList: {
      Array a;
      for (const auto& k : e.kids) a.push_back(Eval(*k, frame));
      return Value::MakeArray(std::move(a), e.name == "tuple");
    }
    case Op::kDict: {
      Value d = Value::MakeObject();
      for (size_t i = 0; i + 1 < e.kids.size(); i += 2) {
        d.Set(ToStr(Eval(*e.kids[i], frame)), Eval(*e.kids[i + 1], frame));
      }
      return d;
    }
    case Op::kAttr: {
      const Expr& of = *e.kids[0];
      if (trace_ != nullptr && of.op == Op::kName && of.memo_slot < 0) {
        // `ns.attr` of an outer namespace traces the attribute, not the whole namespace.
        int depth = 0;
        const Value obj = LookupAt(of.name, frame, &depth, of.line);
        if (obj.kind() == K::kNamespace && depth < trace_->depth) {
          TraceAttr(of.name, e.name, obj);
          return Attr(obj, e.name, e.line);
        }
        TraceName(of.name, obj, depth);
        if (obj.is_undefined())
          Fail(e.line, common::StrCat("undefined value has no attribute '", e.name, "'"));
        return Attr(obj, e.name, e.line);
      }
      const Value obj = Eval(of, frame);
      if (obj.is_undefined())
        Fail(e.line, common::StrCat("undefined value has no attribute '", e.name, "'"));
      return Attr(obj, e.name, e.line);
    }
    case Op::kItem: {
      const Value obj = Eval(*e.kids[0], frame);
      if (obj.is_undefined()) Fail(e.line, "undefined value is not subscriptable");
      return Item(obj, Eval(*e.kids[1], frame), e.line);
    }
    case Op::kSlice: {
      const Value obj = Eval(*e.kids[0], frame);
      auto part = [&](int k) { return e.kids[k] ? Eval(*e.kids[k], frame) : Value::None(); };
      return Slice(obj, part(1), part(2), part(3), e.line);
    }
    case Op::kCall: {
      const Value fn = Eval(*e.kids[0], frame);
      if (fn.kind() != K::kCallable) {
        Fail(e.line, fn.is_undefined()
                         ? "called an undefined value"
                         : common::StrCat("'", TypeName(fn), "' object is not callable"));
      }
      return fn.Call(EvalArgs(e, 1, frame));
    }
    case Op::kFilter:
      return Filter(e.name, Eval(*e.kids[0], frame), EvalArgs(e, 1, frame), e.line);
    case Op::kTest: {
      const bool r = Test(e.name, Eval(*e.kids[0], frame), EvalArgs(e, 1, frame), e.line);
      return Value::Bool(r != e.negate);
    }
    case Op::kNot:
      return Value::Bool(!Truthy(Eval(*e.kids[0], frame)));
    case Op::kNeg:
    case Op::kPos: {
      const Value v = Eval(*e.kids[0], frame);
      if (v.kind() == K::kInt || v.kind() == K::kBool) {
        return Value::Int(e.op == Op::kNeg ? -v.as_int() : v.as_int());
      }
      if (v.kind() == K::kFloat)
        return Value::Float(e.op == Op::kNeg ? -v.as_float() : v.as_float());
      Fail(e.line, common::StrCat("bad operand type for unary -: '", TypeName(v), "'"));
    }
    case Op::kBinary:
      if (IsSum(e) && IsSum(*e.kids[0])) return Sum(e, frame, nullptr);
      return BinaryOp(e.name, Eval(*e.kids[0], frame), Eval(*e.kids[1], frame), e.line);
    case Op::kCompare: {
      Value left = Eval(*e.kids[0], frame);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = Eval(*e.kids[i + 1], frame);
        if (!CompareOp(e.ops[i], left, right, e.line)) return Value::Bool(false);
        left = std::move(right);
      }
      return Value::Bool(true);
    }
    case Op::kAnd: {
      Value l = Eval(*e.kids[0], frame);
      return Truthy(l) ? Eval(*e.kids[1], frame) : l;
    }
    case Op::kOr: {
      Value l = Eval(*e.kids[0], frame);
      return Truthy(l) ? l : Eval(*e.kids[1], frame);
    }
    case Op::kCond:
      if (Truthy(Eval(*e.kids[1], frame))) return Eval(*e.kids[0], frame);
      return e.kids[2] ? Eval(*e.kids[2], frame) : Value();
  }
  return Value();
}

Value Renderer::Attr(const Value& obj, const std::string& name, int line) {
  if (obj.is_object()) {
    if (obj.kind() == K::kObject &&
        (name == "items" || name == "keys" || name == "values" || name == "get")) {
      return Method(obj, name, line);
    }
    return obj.Get(name);
  }
  return Method(obj, name, line);
}

Value Renderer::Item(const Value& obj, const Value& key, int line) {
  if (obj.is_object()) {
    if (key.is_string()) {
      Value v = obj.Get(key.str());
      return v.is_undefined() ? Attr(obj, key.str(), line) : v;
    }
    return obj.Get(ToStr(key));
  }
  if ((obj.is_array() || obj.is_string()) && (key.kind() == K::kInt || key.kind() == K::kBool)) {
    int64_t i = key.as_int();
    if (obj.is_array()) {
      const int64_t n = static_cast<int64_t>(obj.array().size());
      if (i < 0) i += n;
      return i >= 0 && i < n ? obj.array()[i] : Value();
    }
    const auto cps = CodePoints(obj.str());
    const int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    return i >= 0 && i < n ? Value::String(FromCodePoints(cps, i, i + 1)) : Value();
  }
  if (key.is_string()) return Attr(obj, key.str(), line);
  return Value();
}

Value Renderer::Slice(const Value& obj, const Value& b, const Value& e, const Value& s, int line) {
  const int64_t step = s.is_none() ? 1 : s.as_int();
  if (step == 0) Fail(line, "slice step cannot be zero");
  std::vector<uint32_t> cps;
  int64_t n;
  if (obj.is_array()) {
    n = static_cast<int64_t>(obj.array().size());
  } else if (obj.is_string()) {
    cps = CodePoints(obj.str());
    n = static_cast<int64_t>(cps.size());
  } else {
    Fail(line, common::StrCat("'", TypeName(obj), "' object is not subscriptable"));
  }
  // Python's slice.indices.
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (v.is_none()) return dflt;
    int64_t x = v.as_int();
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t start = clamp(b, step > 0 ? 0 : n - 1);
  const int64_t stop = clamp(e, step > 0 ? n : -1);
  std::vector<int64_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) idx.push_back(i);
  if (obj.is_array()) {
    Array out;
    for (int64_t i : idx) out.push_back(obj.array()[i]);
    return Value::MakeArray(std::move(out));
  }
  std::string out;
  for (int64_t i : idx) hf::AppendUtf8(cps[i], &out);
  return Value::String(std::move(out));
}

// `a + b + c ...` (the parser's left spine of `+`), operands evaluated left to right. Strings
// are joined once, or appended to `out` when the sum is output, instead of copied once per `+`:
// Qwen 3's template adds each message's content to four short strings. Anything else is summed
// pairwise as before. With `out` the sum is written there and Undefined returned.
Value Renderer::Sum(const Expr& e, const Frame& frame, std::string* out) {
  std::vector<const Expr*> spine;
  const Expr* left = &e;
  for (; IsSum(*left); left = left->kids[0].get()) spine.push_back(left->kids[1].get());
  std::vector<Value> terms;
  terms.reserve(spine.size() + 1);
  terms.push_back(Eval(*left, frame));
  for (size_t i = spine.size(); i-- > 0;) terms.push_back(Eval(*spine[i], frame));
  bool strings = true;
  size_t bytes = 0;
  for (const Value& t : terms) {
    strings &= t.is_string();
    if (strings) bytes += t.str().size();
  }
  if (strings) {
    std::string joined;
    std::string* into = out;
    if (into == nullptr) {
      joined.reserve(bytes);
      into = &joined;
    }
    for (const Value& t : terms) into->append(t.str());
    return out != nullptr ? Value() : Value::String(std::move(joined));
  }
  Value sum = std::move(terms[0]);
  for (size_t i = 1; i < terms.size(); ++i) sum = BinaryOp("+", sum, terms[i], e.line);
  if (out == nullptr) return sum;
  out->append(sum.is_string() ? sum.str() : ToStr(sum));
  return Value();
}

Value Renderer::BinaryOp(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "~") return Value::String(ToStr(a) + ToStr(b));
  auto type_error = [&]() {
    Fail(line, common::StrCat("unsupported operand type(s) for ", op, ": '", TypeName(a), "' and '",
                              TypeName(b), "'"));
  };
  if (a.is_undefined() || b.is_undefined()) Fail(line, "an undefined value in an expression");
  const bool an = a.is_number() || a.kind() == K::kBool;
  const bool bn = b.is_number() || b.kind() == K::kBool;
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::String(a.str() + b.str());
    if (a.is_array() && b.is_array()) {
      Array out = a.array();
      out.insert(out.end(), b.array().begin(), b.array().end());
      return Value::MakeArray(std::move(out));
    }
  }
  if (op == "*" &&
      ((a.is_string() && b.kind() == K::kInt) || (a.kind() == K::kInt && b.is_string()))) {
    const std::string& s = a.is_string() ? a.str() : b.str();
    const int64_t n = std::max<int64_t>(0, (a.is_string() ? b : a).as_int());
    // Bounded like the output (found by the fuzzer: "" * 5555555545555555 looped for hours).
    if (s.empty() || n == 0) return Value::String("");
    if (static_cast<uint64_t>(n) > kMaxOutputBytes / s.size()) {
      Fail(line, "string repetition too large");
    }
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value::String(std::move(out));
  }
  if (!an || !bn) type_error();
  const bool ints = a.kind() != K::kFloat && b.kind() != K::kFloat;
  if (op == "/") {
    if (b.as_float() == 0) Fail(line, "division by zero");
    return Value::Float(a.as_float() / b.as_float());
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      // By squaring: a huge exponent of 0, 1 or -1 must not loop for ever.
      int64_t r = 1, base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; e >>= 1) {
        if ((e & 1) && __builtin_mul_overflow(r, base, &r)) Fail(line, "integer overflow");
        if (e > 1 && __builtin_mul_overflow(base, base, &base)) Fail(line, "integer overflow");
      }
      return Value::Int(r);
    }
    return Value::Float(std::pow(a.as_float(), b.as_float()));
  }
  if (ints) {
    const int64_t x = a.as_int(), y = b.as_int();
    int64_t v = 0;  // templates get 64-bit integers; past them a clean error (found by fuzzing)
    if (op == "+" || op == "-" || op == "*") {
      const bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &v)
                            : op == "-" ? __builtin_sub_overflow(x, y, &v)
                                        : __builtin_mul_overflow(x, y, &v);
      if (overflow) Fail(line, "integer overflow");
      return Value::Int(v);
    }
    if (y == 0) Fail(line, "integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) Fail(line, "integer overflow");
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      --q;
      r += y;
    }
    if (op == "//") return Value::Int(q);
    if (op == "%") return Value::Int(r);
  } else {
    const double x = a.as_float(), y = b.as_float();
    if (op == "+") return Value::Float(x + y);
    if (op == "-") return Value::Float(x - y);
    if (op == "*") return Value::Float(x * y);
    if (y == 0) Fail(line, "float division by zero");
    if (op == "//") return Value::Float(std::floor(x / y));
    if (op == "%") return Value::Float(x - std::floor(x / y) * y);
  }
  Fail(line, common::StrCat("unsupported operand type(s) for ", op, ": '", TypeName(a), "' and '",
                            TypeName(b), "'"));
}

bool Renderer::CompareOp(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "==") return Equal(a, b);
  if (op == "!=") return !Equal(a, b);
  if (op == "in" || op == "notin") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) {
        Fail(line,
             common::StrCat("'in <string>' requires string as left operand, not ", TypeName(a)));
      }
      found = b.str().find(a.str()) != std::string::npos;
    } else if (b.is_array()) {
      for (const Value& x : b.array()) found |= Equal(a, x);
    } else if (b.is_object()) {
      found = a.is_string() && !b.Get(a.str()).is_undefined();
    } else if (!b.is_undefined()) {
      Fail(line, common::StrCat("argument of type '", TypeName(b), "' is not iterable"));
    }
    return op == "in" ? found : !found;
  }
  if (a.is_undefined() || b.is_undefined()) Fail(line, "an undefined value in a comparison");
  const int c = Compare3(a, b);
  if (op == "<") return c < 0;
  if (op == ">") return c > 0;
  if (op == "<=") return c <= 0;
  return c >= 0;
}

absl::Status Template::Render(const Value& context, std::string* out, bool reuse,
                              const KnownHashes* known) const {
  out->clear();
  try {
    Renderer r(context, out, reuse ? memo_.get() : nullptr, known);
    Frame root;
    Flow flow = Flow::kNormal;
    r.RenderBody(body_, &root, &flow);
  } catch (const Error& e) {
    return absl::InvalidArgumentError(e.message);
  }
  return absl::OkStatus();
}

}  // namespace kvgate::tokenizer::jinja
