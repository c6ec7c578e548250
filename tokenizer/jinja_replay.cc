// A reusable loop's iterations (jinja_memo.h): an iteration whose item was rendered before is
// replayed when every read it traced gives the same value again; otherwise it is rendered while
// its reads from outside itself are traced (Trace), and stored.
#include "tokenizer/jinja_render.h"

namespace kvgate::tokenizer::jinja {

// Replays a stored iteration of `item` whose reads all match, or renders it and stores it.
void Renderer::RenderIteration(const N& n, const Value& item, Frame* f, const Frame& outer,
                               Flow* flow) {
  const ValueHash key = IterationKey(&n, Hash(item));
  if (const auto variants = memo_->Find(key)) {
    for (const auto& it : *variants) {
      if (!Matches(*it, *n.memo, *f, outer)) continue;
      for (const auto& w : it->writes) outer.Find(w.name)->Set(w.attr, w.value);
      out_->append(it->output);
      *flow = it->broke ? Flow::kBreak : Flow::kNormal;
      ++hits_;
      return;
    }
  }
  ++misses_;
  Trace trace;
  trace.depth = f->depth;
  trace.slots.assign(n.memo->slots.size(), false);
  struct Reset {
    Trace** t;
    ~Reset() { *t = nullptr; }
  } reset{&trace_};
  trace_ = &trace;
  const size_t at = out_->size();
  RenderBody(n.bodies[0], f, flow);
  trace_ = nullptr;
  if (trace.abandoned) return;
  trace.it.output = out_->substr(at);
  trace.it.broke = *flow == Flow::kBreak;
  trace.it.bytes = trace.it.CountBytes();
  memo_->Add(key, std::make_shared<const Iteration>(std::move(trace.it)));
}

bool Renderer::Matches(const Iteration& it, const LoopMemo& memo, const Frame& f,
                       const Frame& outer) {
  for (const auto& r : it.reads) {
    Value v;
    switch (r.kind) {
      case Iteration::Read::Kind::kSlot:
        try {
          v = Eval(*memo.slots[r.slot], f);
        } catch (const Error&) {
          return false;
        }
        break;
      case Iteration::Read::Kind::kName:
        v = LookupAt(r.name, outer, nullptr);
        break;
      case Iteration::Read::Kind::kNamespaceAttr:
        v = LookupAt(r.name, outer, nullptr);
        if (v.kind() != K::kNamespace) return false;
        v = v.Get(r.attr);
        break;
    }
    if (!(HashValue(v) == r.hash)) return false;
  }
  for (const auto& w : it.writes) {
    const Value* ns = outer.Find(w.name);
    if (ns == nullptr || ns->kind() != K::kNamespace) return false;
  }
  return true;
}

// A namespace the loop writes that another outer name can also reach: reads through that
// name are not traced as reads of the namespace, so such a loop is rendered in full.
bool Renderer::Aliased(const LoopMemo& memo, const Frame& frame) {
  for (const std::string& name : memo.namespaces) {
    const Value* ns = frame.Find(name);
    if (ns == nullptr || ns->kind() != K::kNamespace) continue;
    for (const Frame* f = &frame; f != nullptr; f = f->parent) {
      for (const auto& [k, v] : f->vars) {
        if (k != name && Reaches(v, &ns->object())) return true;
      }
    }
  }
  return false;
}

bool Renderer::Reaches(const Value& v, const void* ns) {
  if (v.is_array()) {
    for (const Value& x : v.array()) {
      if (Reaches(x, ns)) return true;
    }
  } else if (v.is_object()) {
    if (&v.object() == ns) return true;
    for (const auto& [_, x] : v.object()) {
      if (Reaches(x, ns)) return true;
    }
  }
  return false;
}

ValueHash Renderer::Hash(const Value& item) const {
  if (known_ != nullptr && item.is_object()) {
    if (auto it = known_->find(&item.object()); it != known_->end()) return it->second;
  }
  return HashValue(item);
}

// A free expression: evaluated untraced, its value traced once.
Value Renderer::EvalTraced(const Expr& e, const Frame& frame) {
  Trace* t = trace_;
  trace_ = nullptr;
  Value v = Eval(e, frame);
  trace_ = t;
  if (!t->slots[e.memo_slot]) {
    t->slots[e.memo_slot] = true;
    t->it.reads.push_back({Iteration::Read::Kind::kSlot, e.memo_slot, "", "", HashValue(v)});
  }
  return v;
}

void Renderer::TraceName(const std::string& name, const Value& v, int depth) {
  if (depth >= trace_->depth) return;  // bound inside the iteration
  if (v.kind() == K::kNamespace && trace_->Wrote(&v.object())) {
    trace_->abandoned = true;  // its state now depends on the iteration's own writes
    return;
  }
  for (const auto& n : trace_->names) {
    if (n == name) return;
  }
  trace_->names.push_back(name);
  trace_->it.reads.push_back({Iteration::Read::Kind::kName, -1, name, "", HashValue(v)});
}

void Renderer::TraceAttr(const std::string& name, const std::string& attr, const Value& ns) {
  for (const auto& w : trace_->written) {
    if (w.first == &ns.object() && w.second == attr) return;  // reads the iteration's write
  }
  for (const auto& [n, a] : trace_->attrs) {
    if (n == name && a == attr) return;
  }
  trace_->attrs.emplace_back(name, attr);
  trace_->it.reads.push_back(
      {Iteration::Read::Kind::kNamespaceAttr, -1, name, attr, HashValue(ns.Get(attr))});
}

void Renderer::TraceWrite(const std::string& name, const std::string& attr, const Value& ns,
                          const Value& v) {
  // A namespace or a callable (a macro holds this render) cannot be shared with later renders.
  if (v.kind() == K::kNamespace || v.kind() == K::kCallable) trace_->abandoned = true;
  trace_->written.emplace_back(&ns.object(), attr);
  trace_->it.writes.push_back({name, attr, v});
}

}  // namespace kvgate::tokenizer::jinja
