// The filters and tests chat templates use, and the Python str/list/dict methods they call
// (the non-mutating ones: transformers renders in an immutable sandbox, where list.append and
// dict.update are refused).
#include <utf8proc.h>

#include <algorithm>
#include <charconv>

#include "common/strings.h"
#include "tokenizer/hf_text.h"
#include "tokenizer/jinja_ast.h"

namespace kvgate::tokenizer::jinja {
namespace {

using K = Value::Kind;

const Value* Arg(const Args& a, std::string_view name, size_t pos) {
  for (const auto& [k, v] : a.keyword) {
    if (k == name) return &v;
  }
  return pos < a.positional.size() ? &a.positional[pos] : nullptr;
}

std::string StrArg(const Args& a, std::string_view name, size_t pos, std::string dflt) {
  const Value* v = Arg(a, name, pos);
  return v == nullptr || v->is_none() ? dflt : ToStr(*v);
}

int64_t IntArg(const Args& a, std::string_view name, size_t pos, int64_t dflt) {
  const Value* v = Arg(a, name, pos);
  return v == nullptr || v->is_none() ? dflt : v->as_int();
}

bool BoolArg(const Args& a, std::string_view name, size_t pos, bool dflt) {
  const Value* v = Arg(a, name, pos);
  return v == nullptr ? dflt : Truthy(*v);
}

std::string MapCase(std::string_view s, int mode) {  // 0 lower, 1 upper
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const int32_t cp = hf::DecodeUtf8(s, &i);
    const int32_t c = cp < 0 ? 0xFFFD : cp;
    hf::AppendUtf8(static_cast<uint32_t>(mode == 0 ? utf8proc_tolower(c) : utf8proc_toupper(c)),
                   &out);
  }
  return out;
}

// Python's str.title (words start after any non-letter) and str.capitalize.
std::string TitleCase(std::string_view s, bool capitalize) {
  std::string out;
  bool start = true;
  size_t i = 0;
  while (i < s.size()) {
    const int32_t cp = hf::DecodeUtf8(s, &i);
    const int32_t c = cp < 0 ? 0xFFFD : cp;
    const bool letter = utf8proc_category(c) >= UTF8PROC_CATEGORY_LU &&
                        utf8proc_category(c) <= UTF8PROC_CATEGORY_LO;
    hf::AppendUtf8(static_cast<uint32_t>(start ? utf8proc_toupper(c) : utf8proc_tolower(c)), &out);
    start = capitalize ? false : !letter;
  }
  return out;
}

// Python's str.strip: only the ends are decoded (chat templates trim whole messages).
std::string Strip(std::string_view s, const Value* chars, bool left, bool right) {
  std::vector<uint32_t> set;
  const bool custom = chars != nullptr && chars->is_string();
  if (custom) set = CodePoints(chars->str());
  auto drop = [&](uint32_t cp) {
    return custom ? std::find(set.begin(), set.end(), cp) != set.end() : PyIsSpace(cp);
  };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t i = b;
      const int32_t cp = hf::DecodeUtf8(s, &i);
      if (!drop(cp < 0 ? 0xFFFD : static_cast<uint32_t>(cp))) break;
      b = i;
    }
  }
  if (right) {
    while (e > b) {
      size_t k = e - 1;
      while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
      size_t i = k;
      const int32_t cp = hf::DecodeUtf8(s, &i);
      if (!drop(cp < 0 ? 0xFFFD : static_cast<uint32_t>(cp))) break;
      e = k;
    }
  }
  return std::string(s.substr(b, e - b));
}

Value Split(const std::string& s, const Value* sep, int64_t maxsplit) {
  Array out;
  if (sep == nullptr || sep->is_none()) {  // runs of whitespace, no empty strings
    const auto cps = CodePoints(s);
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && PyIsSpace(cps[i])) ++i;
      if (i == cps.size()) break;
      size_t j = i;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = cps.size();
        while (e > i && PyIsSpace(cps[e - 1])) --e;
        out.push_back(Value::String(FromCodePoints(cps, i, e)));
        break;
      }
      while (j < cps.size() && !PyIsSpace(cps[j])) ++j;
      out.push_back(Value::String(FromCodePoints(cps, i, j)));
      i = j;
    }
    return Value::MakeArray(std::move(out));
  }
  const std::string d = ToStr(*sep);
  if (d.empty()) Throw("empty separator");
  size_t last = 0;
  for (size_t at = s.find(d); at != std::string::npos; at = s.find(d, last)) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
    out.push_back(Value::String(s.substr(last, at - last)));
    last = at + d.size();
  }
  out.push_back(Value::String(s.substr(last)));
  return Value::MakeArray(std::move(out));
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between characters
    const auto cps = CodePoints(s);
    int64_t n = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (i < cps.size()) hf::AppendUtf8(cps[i], &out);
    }
    return out;
  }
  size_t last = 0;
  int64_t n = 0;
  for (size_t at = s.find(from); at != std::string::npos && (count < 0 || n < count);
       at = s.find(from, last), ++n) {
    out.append(s, last, at - last);
    out += to;
    last = at + from.size();
  }
  out.append(s, last);
  return out;
}

// Attribute lookup as filters do it (`map(attribute='a.b')`, `selectattr('x')`).
Value GetPath(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    if (cur.is_object()) {
      cur = cur.Get(part);
    } else if (cur.is_array() && !part.empty() &&
               std::all_of(part.begin(), part.end(), ::isdigit)) {
      size_t i = 0;  // from_chars: an index past size_t's range is a miss, not an exception
      const auto r = std::from_chars(part.data(), part.data() + part.size(), i);
      cur = r.ec == std::errc() && i < cur.array().size() ? cur.array()[i] : Value();
    } else {
      return Value();
    }
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Array Items(const Value& v) {
  if (v.is_array()) return v.array();
  Array out;
  if (v.is_object()) {
    for (const auto& [k, _] : v.object()) out.push_back(Value::String(k));
  } else if (v.is_string()) {
    for (uint32_t cp : CodePoints(v.str())) {
      std::string s;
      hf::AppendUtf8(cp, &s);
      out.push_back(Value::String(std::move(s)));
    }
  } else if (!v.is_undefined()) {
    Throw(common::StrCat("'", TypeName(v), "' object is not iterable"));
  }
  return out;
}

// select/reject/selectattr/rejectattr: `args` after the attribute are (test name, test args...).
Value SelectBy(const Value& seq, const Args& args, bool by_attr, bool keep) {
  size_t k = 0;
  std::string attr;
  if (by_attr) {
    if (args.positional.empty()) Throw("selectattr needs an attribute");
    attr = ToStr(args.positional[k++]);
  }
  std::string test;
  Args test_args;
  if (k < args.positional.size()) {
    test = ToStr(args.positional[k++]);
    test_args.positional.assign(args.positional.begin() + k, args.positional.end());
  }
  Array out;
  for (const Value& item : Items(seq)) {
    const Value v = by_attr ? GetPath(item, attr) : item;
    const bool pass = test.empty() ? Truthy(v) : CallTest(test, v, test_args);
    if (pass == keep) out.push_back(item);
  }
  return Value::MakeArray(std::move(out));
}

Value Bound(std::string name, Value::Function f) {
  return Value::Callable(std::move(name), std::move(f));
}

}  // namespace

bool CallTest(const std::string& name, const Value& v, const Args& args) {
  const Value* a0 = args.positional.empty() ? nullptr : &args.positional[0];
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true") return v.kind() == K::kBool && v.as_bool();
  if (name == "false") return v.kind() == K::kBool && !v.as_bool();
  if (name == "mapping") return v.is_object();
  if (name == "sequence") return v.is_array() || v.is_string() || v.is_object();
  if (name == "iterable") return v.is_array() || v.is_string() || v.is_object() || v.is_undefined();
  if (name == "callable") return v.kind() == K::kCallable;
  if (name == "odd") return v.as_int() % 2 != 0;
  if (name == "even") return v.as_int() % 2 == 0;
  if (name == "lower") return v.is_string() && MapCase(v.str(), 0) == v.str();
  if (name == "upper") return v.is_string() && MapCase(v.str(), 1) == v.str();
  if (a0 == nullptr && name != "divisibleby") {
    Throw(common::StrCat("no test named '", name, "'"));
  }
  if (name == "divisibleby")
    return a0 != nullptr && a0->as_int() != 0 && v.as_int() % a0->as_int() == 0;
  if (name == "eq" || name == "equalto" || name == "==") return Equal(v, *a0);
  if (name == "ne" || name == "!=") return !Equal(v, *a0);
  if (name == "lt" || name == "lessthan" || name == "<") return Compare3(v, *a0) < 0;
  if (name == "le" || name == "<=") return Compare3(v, *a0) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return Compare3(v, *a0) > 0;
  if (name == "ge" || name == ">=") return Compare3(v, *a0) >= 0;
  if (name == "sameas") {
    return v.kind() == a0->kind() &&
           (v.is_none() || v.kind() == K::kBool ? Equal(v, *a0) : v.same_payload(*a0));
  }
  if (name == "in") {
    if (a0->is_string()) return v.is_string() && a0->str().find(v.str()) != std::string::npos;
    if (a0->is_object()) return v.is_string() && !a0->Get(v.str()).is_undefined();
    for (const Value& x : Items(*a0)) {
      if (Equal(v, x)) return true;
    }
    return false;
  }
  Throw(common::StrCat("no test named '", name, "'"));
}

Value CallFilter(const std::string& name, const Value& v, const Args& args) {
  if (name == "trim") {
    const Value* chars = Arg(args, "chars", 0);
    return Value::String(Strip(ToStr(v), chars, true, true));
  }
  if (name == "tojson") {
    JsonOptions o;
    o.indent = static_cast<int>(IntArg(args, "indent", 0, -1));
    o.ensure_ascii = BoolArg(args, "ensure_ascii", 99, false);
    o.sort_keys = BoolArg(args, "sort_keys", 99, false);
    if (const Value* sep = Arg(args, "separators", 99);
        sep != nullptr && sep->is_array() && sep->array().size() == 2) {
      o.item_separator = ToStr(sep->array()[0]);
      o.key_separator = ToStr(sep->array()[1]);
    }
    std::string out;
    if (absl::Status s = ToJson(v, o, &out); !s.ok()) Throw(std::string(s.message()));
    return Value::String(std::move(out));
  }
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value::Int(static_cast<int64_t>(CodePointCount(v.str())));
    if (v.is_array()) return Value::Int(static_cast<int64_t>(v.array().size()));
    if (v.is_object()) return Value::Int(static_cast<int64_t>(v.object().size()));
    if (v.is_undefined()) return Value::Int(0);
    Throw(common::StrCat("object of type '", TypeName(v), "' has no len()"));
  }
  if (name == "string") return Value::String(ToStr(v));
  if (name == "safe" || name == "e" || name == "escape" || name == "forceescape") {
    if (name == "safe") return v.is_string() ? v : Value::String(ToStr(v));
    std::string out;
    for (char c : ToStr(v)) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&#34;";
          break;
        case '\'':
          out += "&#39;";
          break;
        default:
          out.push_back(c);
      }
    }
    return Value::String(std::move(out));
  }
  if (name == "upper") return Value::String(MapCase(ToStr(v), 1));
  if (name == "lower") return Value::String(MapCase(ToStr(v), 0));
  if (name == "capitalize") return Value::String(TitleCase(ToStr(v), true));
  if (name == "title") return Value::String(TitleCase(ToStr(v), false));
  if (name == "default" || name == "d") {
    const Value* dflt = Arg(args, "default_value", 0);
    const bool boolean = BoolArg(args, "boolean", 1, false);
    if (v.is_undefined() || (boolean && !Truthy(v))) return dflt ? *dflt : Value::String("");
    return v;
  }
  if (name == "first") {
    const Array items = Items(v);
    return items.empty() ? Value() : items.front();
  }
  if (name == "last") {
    const Array items = Items(v);
    return items.empty() ? Value() : items.back();
  }
  if (name == "list") return Value::MakeArray(Items(v));
  if (name == "reverse") {
    if (v.is_string()) {
      auto cps = CodePoints(v.str());
      std::reverse(cps.begin(), cps.end());
      return Value::String(FromCodePoints(cps, 0, cps.size()));
    }
    Array items = Items(v);
    std::reverse(items.begin(), items.end());
    return Value::MakeArray(std::move(items));
  }
  if (name == "join") {
    const std::string sep = StrArg(args, "d", 0, "");
    const Value* attr = Arg(args, "attribute", 1);
    std::string out;
    bool first = true;
    for (const Value& x : Items(v)) {
      if (!first) out += sep;
      first = false;
      out += ToStr(attr ? GetPath(x, ToStr(*attr)) : x);
    }
    return Value::String(std::move(out));
  }
  if (name == "items") {
    Array out;
    if (v.is_object()) {
      for (const auto& [k, x] : v.object()) {
        out.push_back(Value::MakeArray({Value::String(k), x}, /*tuple=*/true));
      }
    } else if (!v.is_undefined()) {
      Throw("items filter needs a mapping");
    }
    return Value::MakeArray(std::move(out));
  }
  if (name == "dictsort") {
    Value items = CallFilter("items", v, {});
    Array a = items.array();
    const bool by_value = StrArg(args, "by", 1, "key") == "value";
    const bool reverse = BoolArg(args, "reverse", 2, false);
    std::stable_sort(a.begin(), a.end(), [&](const Value& x, const Value& y) {
      const int c = Compare3(x.array()[by_value], y.array()[by_value]);
      return reverse ? c > 0 : c < 0;
    });
    return Value::MakeArray(std::move(a));
  }
  if (name == "sort") {
    Array a = Items(v);
    const bool reverse = BoolArg(args, "reverse", 0, false);
    const Value* attr = Arg(args, "attribute", 2);
    std::stable_sort(a.begin(), a.end(), [&](const Value& x, const Value& y) {
      const int c =
          attr ? Compare3(GetPath(x, ToStr(*attr)), GetPath(y, ToStr(*attr))) : Compare3(x, y);
      return reverse ? c > 0 : c < 0;
    });
    return Value::MakeArray(std::move(a));
  }
  if (name == "unique") {
    Array out;
    for (const Value& x : Items(v)) {
      bool seen = false;
      for (const Value& y : out) seen |= Equal(x, y);
      if (!seen) out.push_back(x);
    }
    return Value::MakeArray(std::move(out));
  }
  if (name == "map") {
    Array out;
    const Value* attr = Arg(args, "attribute", 99);
    if (attr != nullptr) {
      const Value* dflt = Arg(args, "default", 99);
      for (const Value& x : Items(v)) {
        Value y = GetPath(x, ToStr(*attr));
        out.push_back(y.is_undefined() && dflt ? *dflt : y);
      }
      return Value::MakeArray(std::move(out));
    }
    if (args.positional.empty()) Throw("map needs a filter or an attribute");
    const std::string filter = ToStr(args.positional[0]);
    Args rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    for (const Value& x : Items(v)) out.push_back(CallFilter(filter, x, rest));
    return Value::MakeArray(std::move(out));
  }
  if (name == "select") return SelectBy(v, args, false, true);
  if (name == "reject") return SelectBy(v, args, false, false);
  if (name == "selectattr") return SelectBy(v, args, true, true);
  if (name == "rejectattr") return SelectBy(v, args, true, false);
  if (name == "replace") {
    return Value::String(Replace(ToStr(v), StrArg(args, "old", 0, ""), StrArg(args, "new", 1, ""),
                                 IntArg(args, "count", 2, -1)));
  }
  if (name == "int") {
    if (v.kind() == K::kFloat) return Value::Int(static_cast<int64_t>(v.as_float()));
    if (v.kind() == K::kInt || v.kind() == K::kBool) return Value::Int(v.as_int());
    if (v.is_string()) {
      char* end = nullptr;
      const std::string s = Strip(v.str(), nullptr, true, true);
      const long long r = std::strtoll(s.c_str(), &end, 10);
      if (end != nullptr && *end == '\0' && !s.empty()) return Value::Int(r);
    }
    return Value::Int(IntArg(args, "default", 0, 0));
  }
  if (name == "float") {
    if (v.is_number() || v.kind() == K::kBool) return Value::Float(v.as_float());
    if (v.is_string()) {
      char* end = nullptr;
      const double r = std::strtod(v.str().c_str(), &end);
      if (end != nullptr && *end == '\0' && !v.str().empty()) return Value::Float(r);
    }
    return Value::Float(0);
  }
  if (name == "abs") {
    if (v.kind() == K::kFloat) return Value::Float(std::abs(v.as_float()));
    return Value::Int(std::abs(v.as_int()));
  }
  if (name == "round") {
    const int64_t precision = IntArg(args, "precision", 0, 0);
    double scale = 1;
    for (int64_t i = 0; i < precision; ++i) scale *= 10;
    return Value::Float(std::nearbyint(v.as_float() * scale) / scale);
  }
  if (name == "sum") {
    const Value* attr = Arg(args, "attribute", 0);
    Value total = Value::Int(IntArg(args, "start", 1, 0));
    for (const Value& x : Items(v)) {
      const Value y = attr ? GetPath(x, ToStr(*attr)) : x;
      total = total.kind() == K::kFloat || y.kind() == K::kFloat
                  ? Value::Float(total.as_float() + y.as_float())
                  : Value::Int(total.as_int() + y.as_int());
    }
    return total;
  }
  if (name == "min" || name == "max") {
    const Array items = Items(v);
    if (items.empty()) return Value();
    Value best = items[0];
    for (const Value& x : items) {
      const int c = Compare3(x, best);
      if (name == "min" ? c < 0 : c > 0) best = x;
    }
    return best;
  }
  if (name == "wordcount")
    return Value::Int(static_cast<int64_t>(Split(ToStr(v), nullptr, -1).array().size()));
  if (name == "indent") {
    const int64_t width = IntArg(args, "width", 0, 4);
    const bool first = BoolArg(args, "first", 1, false);
    const bool blank = BoolArg(args, "blank", 2, false);
    const std::string pad(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');
    const std::string s = ToStr(v);
    std::string out;
    size_t start = 0;
    bool first_line = true;
    while (start <= s.size()) {
      const size_t nl = s.find('\n', start);
      const std::string line = s.substr(start, nl == std::string::npos ? nl : nl - start);
      if ((!first_line || first) && (blank || !line.empty())) out += pad;
      out += line;
      if (nl == std::string::npos) break;
      out += '\n';
      start = nl + 1;
      first_line = false;
    }
    return Value::String(std::move(out));
  }
  Throw(common::StrCat("unsupported filter '", name, "'"));
}

Value MethodOf(const Value& obj, const std::string& name) {
  if (obj.is_string()) {
    const std::string s = obj.str();
    if (name == "startswith" || name == "endswith") {
      const bool start = name == "startswith";
      return Bound(name, [s, start](const Args& a) {
        if (a.positional.empty()) Throw("startswith needs an argument");
        Array options =
            a.positional[0].is_array() ? a.positional[0].array() : Array{a.positional[0]};
        for (const Value& o : options) {
          if (!o.is_string()) Throw("startswith first arg must be str or a tuple of str");
          const std::string& p = o.str();
          if (start ? s.compare(0, p.size(), p) == 0
                    : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0)
            return Value::Bool(true);
        }
        return Value::Bool(false);
      });
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const bool l = name != "rstrip", r = name != "lstrip";
      return Bound(name, [s, l, r](const Args& a) {
        return Value::String(Strip(s, a.positional.empty() ? nullptr : &a.positional[0], l, r));
      });
    }
    if (name == "split") {
      return Bound(name, [s](const Args& a) {
        return Split(s, Arg(a, "sep", 0), IntArg(a, "maxsplit", 1, -1));
      });
    }
    if (name == "upper" || name == "lower") {
      const int mode = name == "upper";
      return Bound(name, [s, mode](const Args&) { return Value::String(MapCase(s, mode)); });
    }
    if (name == "title" || name == "capitalize") {
      const bool cap = name == "capitalize";
      return Bound(name, [s, cap](const Args&) { return Value::String(TitleCase(s, cap)); });
    }
    if (name == "replace") {
      return Bound(name, [s](const Args& a) {
        return Value::String(Replace(s, StrArg(a, "old", 0, ""), StrArg(a, "new", 1, ""),
                                     IntArg(a, "count", 2, -1)));
      });
    }
    if (name == "find" || name == "count") {
      const bool find = name == "find";
      return Bound(name, [s, find](const Args& a) {
        const std::string sub = StrArg(a, "sub", 0, "");
        if (find) {
          const size_t at = s.find(sub);
          return Value::Int(
              at == std::string::npos ? -1 : static_cast<int64_t>(CodePointCount(s.substr(0, at))));
        }
        int64_t n = 0;
        if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePointCount(s)) + 1);
        for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size()))
          ++n;
        return Value::Int(n);
      });
    }
    if (name == "join") {
      return Bound(name, [s](const Args& a) {
        std::string out;
        bool first = true;
        for (const Value& x : a.positional.empty() ? Array{} : Items(a.positional[0])) {
          if (!x.is_string()) Throw("sequence item: expected str instance");
          if (!first) out += s;
          first = false;
          out += x.str();
        }
        return Value::String(std::move(out));
      });
    }
    if (name == "splitlines") {
      return Bound(name, [s](const Args&) {
        Array out;
        size_t start = 0;
        while (start < s.size()) {
          size_t nl = s.find_first_of("\r\n", start);
          if (nl == std::string::npos) {
            out.push_back(Value::String(s.substr(start)));
            break;
          }
          out.push_back(Value::String(s.substr(start, nl - start)));
          start = nl + (s[nl] == '\r' && nl + 1 < s.size() && s[nl + 1] == '\n' ? 2 : 1);
        }
        return Value::MakeArray(std::move(out));
      });
    }
    if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum") {
      return Bound(name, [s, name](const Args&) {
        const auto cps = CodePoints(s);
        if (cps.empty()) return Value::Bool(false);
        for (uint32_t cp : cps) {
          const auto c = utf8proc_category(static_cast<int32_t>(cp));
          const bool letter = c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
          const bool digit = c == UTF8PROC_CATEGORY_ND;
          const bool ok = name == "isdigit"   ? digit
                          : name == "isspace" ? PyIsSpace(cp)
                          : name == "isalpha" ? letter
                                              : letter || digit;
          if (!ok) return Value::Bool(false);
        }
        return Value::Bool(true);
      });
    }
    return Value();
  }
  if (obj.kind() == K::kObject) {
    if (name == "items") {
      return Bound(name, [obj](const Args&) { return CallFilter("items", obj, {}); });
    }
    if (name == "keys" || name == "values") {
      const bool keys = name == "keys";
      return Bound(name, [obj, keys](const Args&) {
        Array out;
        for (const auto& [k, x] : obj.object()) out.push_back(keys ? Value::String(k) : x);
        return Value::MakeArray(std::move(out));
      });
    }
    if (name == "get") {
      return Bound(name, [obj](const Args& a) {
        if (a.positional.empty()) Throw("get expected at least 1 argument");
        Value v = a.positional[0].is_string() ? obj.Get(a.positional[0].str()) : Value();
        if (!v.is_undefined()) return v;
        return a.positional.size() > 1 ? a.positional[1] : Value::None();
      });
    }
    return Value();
  }
  if (obj.is_array()) {
    if (name == "append" || name == "pop" || name == "insert" || name == "extend" ||
        name == "remove" || name == "clear" || name == "sort" || name == "reverse") {
      return Bound(name, [name](const Args&) -> Value {
        Throw(common::StrCat("access to attribute '", name, "' of 'list' object is unsafe"));
      });
    }
    if (name == "index" || name == "count") {
      const bool index = name == "index";
      return Bound(name, [obj, index](const Args& a) {
        if (a.positional.empty()) Throw("missing argument");
        int64_t n = 0;
        for (size_t i = 0; i < obj.array().size(); ++i) {
          if (Equal(obj.array()[i], a.positional[0])) {
            if (index) return Value::Int(static_cast<int64_t>(i));
            ++n;
          }
        }
        if (index) Throw("value is not in list");
        return Value::Int(n);
      });
    }
  }
  return Value();
}

}  // namespace kvgate::tokenizer::jinja
