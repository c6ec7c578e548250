// File: tokenizer/jinja.h
// A Jinja2 subset for chat templates, with Python's value semantics where templates can see
// them (str(), repr of lists and dicts, == across int/float/bool, truthiness, slicing by code
// point). The subset is what the chat templates of Llama 3/3.1, Qwen 2.5/3, DeepSeek V3,
// Gemma 3 and Mistral use: text, {{ }}, {% if/elif/else %}, {% for %} (with loop.*, `if`
// filters, `else`, unpacking, break/continue), {% set %} (names, namespace attributes, tuples,
// blocks), {% macro %}, {% generation %}, comments and whitespace control, rendered as
// transformers configures its environment (trim_blocks, lstrip_blocks). Anything else is a
// parse error naming the construct. Value is a value type (copies share immutable payloads);
// Template is immutable after Parse and thread-safe to render.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvgate::tokenizer::jinja {

class Value;
class RenderMemo;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python dicts

/// Arguments of a call: positional, then keyword.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kArray,
    kObject,
    kNamespace,  // namespace(...): an object whose attributes `set` may assign
    kCallable,
  };
  using Function = std::function<Value(const Args&)>;

  Value() = default;
  static Value None() { return Value(Kind::kNone); }
  static Value Bool(bool b) {
    Value v(Kind::kBool);
    v.i_ = b;
    return v;
  }
  static Value Int(int64_t i) {
    Value v(Kind::kInt);
    v.i_ = i;
    return v;
  }
  static Value Float(double f) {
    Value v(Kind::kFloat);
    v.f_ = f;
    return v;
  }
  static Value String(std::string s) {
    Value v(Kind::kString);
    v.p_ = std::make_shared<std::string>(std::move(s));
    return v;
  }
  /// `tuple`: a Python tuple (from `(a, b)` or dict.items()): a list but for repr and ==.
  static Value MakeArray(Array a = {}, bool tuple = false) {
    Value v(Kind::kArray);
    v.p_ = std::make_shared<Array>(std::move(a));
    v.i_ = tuple;
    return v;
  }
  static Value MakeObject(Object o = {}, Kind kind = Kind::kObject) {
    Value v(kind);
    v.p_ = std::make_shared<Object>(std::move(o));
    return v;
  }
  static Value Callable(std::string name, Function f) {
    Value v(Kind::kCallable);
    v.p_ = std::make_shared<NamedFunction>(std::move(name), std::move(f));
    return v;
  }

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject || kind_ == Kind::kNamespace; }
  bool as_bool() const { return i_ != 0; }
  bool is_tuple() const { return kind_ == Kind::kArray && i_ != 0; }
  int64_t as_int() const { return i_; }
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(i_); }
  const std::string& str() const { return *static_cast<const std::string*>(p_.get()); }
  const Array& array() const { return *static_cast<const Array*>(p_.get()); }
  Array& mutable_array() const { return *static_cast<Array*>(p_.get()); }
  const Object& object() const { return *static_cast<const Object*>(p_.get()); }
  Object& mutable_object() const { return *static_cast<Object*>(p_.get()); }
  const std::string& callable_name() const { return fn().first; }
  Value Call(const Args& args) const { return fn().second(args); }
  /// True when no other Value shares this one's string, list, dict or callable (a loop may then
  /// update its `loop` object in place).
  bool sole_owner() const { return p_ == nullptr || p_.use_count() == 1; }
  bool same_payload(const Value& o) const { return kind_ == o.kind_ && p_ == o.p_ && i_ == o.i_; }

  /// The value of `key` in an object; Undefined when absent or not an object.
  Value Get(std::string_view key) const;
  /// Sets `key` in an object (appends when new).
  void Set(std::string_view key, Value v) const;

 private:
  using NamedFunction = std::pair<std::string, Function>;
  explicit Value(Kind k) : kind_(k) {}
  const NamedFunction& fn() const { return *static_cast<const NamedFunction*>(p_.get()); }

  Kind kind_ = Kind::kUndefined;
  int64_t i_ = 0;
  double f_ = 0;
  // The string, list, dict or callable, by kind_: one pointer, so that a copy (templates copy
  // values at every lookup) costs one reference count, not four.
  std::shared_ptr<void> p_;
};

/// A 128-bit hash of a value's content (jinja_memo.h's HashValue).
struct ValueHash {
  uint64_t lo = 0, hi = 0;
  bool operator==(const ValueHash& o) const { return lo == o.lo && hi == o.hi; }
  template <typename H>
  friend H AbslHashValue(H h, const ValueHash& k) {
    return H::combine(std::move(h), k.lo, k.hi);
  }
};
/// Hashes a caller already knows, by the payload of the list or dict they hash.
using KnownHashes = absl::flat_hash_map<const void*, ValueHash>;

/// Python's truthiness.
bool Truthy(const Value& v);
/// Python's str() ("" for Undefined, "None", "True", repr of lists and dicts).
std::string ToStr(const Value& v);
/// Python's repr().
std::string Repr(const Value& v);
/// Python's ==.
bool Equal(const Value& a, const Value& b);

/// Python json.dumps as transformers' tojson calls it (ensure_ascii=False by default).
struct JsonOptions {
  int indent = -1;  // < 0: None (one line)
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator;  // empty: ", " (one line) or "," (indented)
  std::string key_separator = ": ";
};
/// @return kInvalidArgument for values JSON cannot hold (Undefined, callables).
absl::Status ToJson(const Value& v, const JsonOptions& options, std::string* out);

/// A failed render or a failed parse, carried inside the engine and turned into a Status at
/// its boundary (Template::Parse / Template::Render).
struct Error {
  std::string message;
};

class Template {
 public:
  /// @return kInvalidArgument naming the line and the construct outside the subset or the
  ///         syntax error.
  static absl::StatusOr<std::unique_ptr<Template>> Parse(std::string_view source);
  ~Template();

  /// Renders with `context` (an object of top-level names) and the globals transformers
  /// provides (raise_exception, strftime_now, range, namespace, dict). With `reuse`, loop
  /// iterations equal to earlier renders' are replayed (jinja_memo.h); the output is the same.
  /// `known`: hashes of values in `context` (e.g. the messages), which reuse then need not hash.
  /// @return kInvalidArgument with the template's error (raise_exception's message, a type
  ///         error, an undefined value called, ...).
  absl::Status Render(const Value& context, std::string* out, bool reuse = true,
                      const KnownHashes* known = nullptr) const;

  /// Iterations replayed and rendered (with `reuse`), and the bytes kept for replay.
  struct ReuseStats {
    uint64_t hits = 0, misses = 0;
    size_t bytes = 0;
  };
  ReuseStats reuse_stats() const;
  /// What the replay store may keep: two generations of `bytes` each (default 32 MiB). It
  /// empties the store: not while another thread renders.
  void set_reuse_bytes(size_t bytes);

  /// True when the template loops over a message's content (`for x in message['content']`):
  /// vLLM's "openai" content format, which keeps content parts as a list.
  bool IteratesContent() const;

  struct Node;

 private:
  friend struct TemplateAccess;
  Template();
  std::vector<std::unique_ptr<Node>> body_;
  std::string source_;
  std::unique_ptr<RenderMemo> memo_;  // shared by concurrent renders (it locks)
};

}  // namespace kvgate::tokenizer::jinja
