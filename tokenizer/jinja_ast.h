// File: tokenizer/jinja_ast.h
// Internal to the Jinja engine (jinja_parse.cc builds it, jinja_eval.cc walks it): the syntax
// tree of a parsed template. Immutable after parsing; shared read-only by concurrent renders.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja.h"

namespace kvgate::tokenizer::jinja {

struct Expr {
  enum class Op : uint8_t {
    kLiteral,  // literal
    kName,     // name
    kList,     // kids
    kDict,     // kids: key, value, key, value, ...
    kAttr,     // kids[0] . name
    kItem,     // kids[0] [ kids[1] ]
    kSlice,    // kids[0] [ kids[1] : kids[2] : kids[3] ] (null kids allowed)
    kCall,     // kids[0] ( kids[1..] ), the last keywords.size() are keyword arguments
    kFilter,   // kids[0] | name ( kids[1..] ) (keywords as for kCall)
    kTest,     // kids[0] is [not] name ( kids[1..] )
    kNot,      // not kids[0]
    kNeg,      // - kids[0]
    kPos,      // + kids[0]
    kBinary,   // kids[0] name kids[1]: + - * / // % ** ~
    kCompare,  // kids[0] ops[0] kids[1] ops[1] kids[2] ...: == != < > <= >= in notin
    kAnd,
    kOr,
    kCond,  // kids[0] if kids[1] else kids[2] (kids[2] may be null)
  };
  Op op = Op::kLiteral;
  Value literal;
  std::string name;
  std::vector<std::unique_ptr<Expr>> kids;
  std::vector<std::string> keywords;  // kCall / kFilter / kTest keyword argument names
  std::vector<std::string> ops;       // kCompare
  bool negate = false;                // kTest: `is not`
  int line = 0;
  int memo_slot = -1;  // a free expression of a reusable loop (jinja_memo.h): its index there
};

/// A top-level `for` whose iterations may be reused (jinja_memo.h): its free expressions.
struct LoopMemo {
  std::vector<const Expr*> slots;       // by Expr::memo_slot
  std::vector<std::string> namespaces;  // names whose attributes the body sets
};

using Body = std::vector<std::unique_ptr<Template::Node>>;

struct Template::Node {
  enum class Kind : uint8_t {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // conds[i] -> bodies[i]; bodies.size() == conds.size() + 1 with an else
    kFor,       // for targets in expr [if conds[0]]: bodies[0], else bodies[1]
    kSet,       // set targets (or name.attr) = expr
    kSetBlock,  // set targets[0]: bodies[0]
    kMacro,     // macro name(targets = defaults): bodies[0]
    kBreak,
    kContinue,
    kScope,  // {% generation %}: bodies[0] rendered in place
  };
  Kind kind = Kind::kText;
  std::string text;  // kText; kMacro: the name; kSet with an attribute: the namespace name
  std::string attr;  // kSet: the namespace attribute
  std::unique_ptr<Expr> expr;
  std::vector<std::unique_ptr<Expr>> conds;  // kIf; kFor's filter; kMacro's defaults
  std::vector<Body> bodies;
  std::vector<std::string> targets;
  int line = 0;
  std::unique_ptr<LoopMemo> memo;  // kFor: set when its iterations may be reused
};

// ---- Shared by the evaluator and the builtins (jinja_value.cc) ----

[[noreturn]] void Throw(std::string msg);
const char* TypeName(const Value& v);
std::string FloatRepr(double d);
bool PyIsSpace(uint32_t cp);  // Python's str.isspace (U+001C..U+001F included)
std::vector<uint32_t> CodePoints(std::string_view s);
size_t CodePointCount(std::string_view s);
std::string FromCodePoints(const std::vector<uint32_t>& cps, size_t b, size_t e);
/// Python's ordering: -1, 0, 1; throws a TypeError-like Error for unordered types.
int Compare3(const Value& a, const Value& b);

// ---- Builtins (jinja_builtins.cc) ----

/// Calls a test by name (`is defined`, ...). Throws for an unknown test.
bool CallTest(const std::string& name, const Value& v, const Args& args);
/// Calls a filter by name (`|trim`, `|tojson`, ...). Throws for an unknown filter.
Value CallFilter(const std::string& name, const Value& v, const Args& args);
/// `obj.name` for strings, lists and dicts: a bound method (Python's str/list/dict methods
/// templates call), or Undefined.
Value MethodOf(const Value& obj, const std::string& name);

/// The Template's nodes and source, for the evaluator (jinja_eval.cc).
struct TemplateAccess {
  static const Body& body(const Template& t);
};

}  // namespace kvgate::tokenizer::jinja
