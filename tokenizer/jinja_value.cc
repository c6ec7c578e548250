// Jinja values with Python's semantics: str(), repr(), ==, ordering, truthiness and
// json.dumps as transformers' tojson calls it.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "common/strings.h"
#include "tokenizer/hf_text.h"
#include "tokenizer/jinja_ast.h"

namespace kvgate::tokenizer::jinja {

using K = Value::Kind;

void Throw(std::string msg) { throw Error{std::move(msg)}; }

const char* TypeName(const Value& v) {
  switch (v.kind()) {
    case K::kUndefined:
      return "Undefined";
    case K::kNone:
      return "NoneType";
    case K::kBool:
      return "bool";
    case K::kInt:
      return "int";
    case K::kFloat:
      return "float";
    case K::kString:
      return "str";
    case K::kArray:
      return "list";
    case K::kObject:
      return "dict";
    case K::kNamespace:
      return "Namespace";
    case K::kCallable:
      return "function";
  }
  return "?";
}

// Python's float repr: the shortest round-trip digits, fixed notation for exponents in
// [-4, 16), scientific otherwise, and ".0" on integral values.
std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, r.ptr - buf);
  std::string out;
  if (sci[0] == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t epos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, epos)) {
    if (c != '.') digits.push_back(c);
  }
  const int exp = std::atoi(std::string(sci.substr(epos + 1)).c_str());
  const int decpt = exp + 1;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits;
      out.append(decpt - digits.size(), '0');
      out += ".0";
    } else {
      out += digits.substr(0, decpt);
      out += '.';
      out += digits.substr(decpt);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  out += exp < 0 ? "e-" : "e+";
  const int a = std::abs(exp);
  if (a < 10) out += '0';
  out += std::to_string(a);
  return out;
}

// Python's str.isspace set (wider than Rust's: it has U+001C..U+001F).
bool PyIsSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::vector<uint32_t> CodePoints(std::string_view s) {
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const int32_t cp = hf::DecodeUtf8(s, &i);
    cps.push_back(cp < 0 ? 0xFFFD : static_cast<uint32_t>(cp));
  }
  return cps;
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string FromCodePoints(const std::vector<uint32_t>& cps, size_t b, size_t e) {
  std::string out;
  for (size_t i = b; i < e; ++i) hf::AppendUtf8(cps[i], &out);
  return out;
}

static void ReprString(std::string_view s, std::string* out) {
  const bool dq = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char q = dq ? '"' : '\'';
  out->push_back(q);
  size_t i = 0;
  while (i < s.size()) {
    const size_t at = i;
    const int32_t cp = hf::DecodeUtf8(s, &i);
    if (cp == q || cp == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      *out += "\\n";
    } else if (cp == '\r') {
      *out += "\\r";
    } else if (cp == '\t') {
      *out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0)) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
      *out += buf;
    } else {
      out->append(s.substr(at, i - at));
    }
  }
  out->push_back(q);
}

static void ReprInto(const Value& v, std::string* out) {
  switch (v.kind()) {
    case K::kString:
      ReprString(v.str(), out);
      return;
    case K::kArray: {
      out->push_back(v.is_tuple() ? '(' : '[');
      bool first = true;
      for (const Value& x : v.array()) {
        if (!first) *out += ", ";
        first = false;
        ReprInto(x, out);
      }
      if (v.is_tuple() && v.array().size() == 1) out->push_back(',');
      out->push_back(v.is_tuple() ? ')' : ']');
      return;
    }
    case K::kObject: {
      out->push_back('{');
      bool first = true;
      for (const auto& [k, x] : v.object()) {
        if (!first) *out += ", ";
        first = false;
        ReprString(k, out);
        *out += ": ";
        ReprInto(x, out);
      }
      out->push_back('}');
      return;
    }
    case K::kNamespace:
      *out += "<Namespace>";
      return;
    default:
      *out += ToStr(v);
  }
}

static void JsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    // A run of bytes that need no escape is appended at once (a push_back a byte was a twentieth
    // of a precise-mode turn: the template's tojson over the tools, every turn).
    size_t run = i;
    while (run < s.size()) {
      const unsigned char c = static_cast<unsigned char>(s[run]);
      if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') break;
      ++run;
    }
    if (run > i) {
      out->append(s.data() + i, run - i);
      i = run;
      continue;
    }
    const size_t at = i;
    const int32_t cp = hf::DecodeUtf8(s, &i);
    char buf[16];
    switch (cp) {
      case '"':
        *out += "\\\"";
        continue;
      case '\\':
        *out += "\\\\";
        continue;
      case '\n':
        *out += "\\n";
        continue;
      case '\r':
        *out += "\\r";
        continue;
      case '\t':
        *out += "\\t";
        continue;
      case '\b':
        *out += "\\b";
        continue;
      case '\f':
        *out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      *out += buf;
    } else if (ensure_ascii && cp >= 0x80) {
      if (cp >= 0x10000) {
        const uint32_t v = static_cast<uint32_t>(cp) - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      }
      *out += buf;
    } else {
      out->append(s.substr(at, i - at));
    }
  }
  out->push_back('"');
}

static void JsonInto(const Value& v, const JsonOptions& o, int level, std::string* out) {
  const std::string item_sep = !o.item_separator.empty() ? o.item_separator
                               : o.indent >= 0           ? ","
                                                         : ", ";
  auto newline = [&](int lv) {
    if (o.indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(o.indent) * lv, ' ');
  };
  switch (v.kind()) {
    case K::kNone:
      *out += "null";
      return;
    case K::kBool:
      *out += v.as_bool() ? "true" : "false";
      return;
    case K::kInt:
      *out += std::to_string(v.as_int());
      return;
    case K::kFloat: {
      const double d = v.as_float();
      *out += std::isnan(d)   ? "NaN"
              : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                              : FloatRepr(d);
      return;
    }
    case K::kString:
      JsonString(v.str(), o.ensure_ascii, out);
      return;
    case K::kArray: {
      if (v.array().empty()) {
        *out += "[]";
        return;
      }
      out->push_back('[');
      bool first = true;
      for (const Value& x : v.array()) {
        if (!first) *out += item_sep;
        first = false;
        newline(level + 1);
        JsonInto(x, o, level + 1, out);
      }
      newline(level);
      out->push_back(']');
      return;
    }
    case K::kObject:
    case K::kNamespace: {
      if (v.object().empty()) {
        *out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.object()) items.push_back(&kv);
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      bool first = true;
      for (const auto* kv : items) {
        if (!first) *out += item_sep;
        first = false;
        newline(level + 1);
        JsonString(kv->first, o.ensure_ascii, out);
        *out += o.key_separator;
        JsonInto(kv->second, o, level + 1, out);
      }
      newline(level);
      out->push_back('}');
      return;
    }
    default:
      Throw(common::StrCat("Object of type ", TypeName(v), " is not JSON serializable"));
  }
}

int Compare3(const Value& a, const Value& b) {
  if ((a.is_number() || a.kind() == K::kBool) && (b.is_number() || b.kind() == K::kBool)) {
    if (a.kind() != K::kFloat && b.kind() != K::kFloat) {
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    }
    const double x = a.as_float(), y = b.as_float();
    return x < y ? -1 : x > y;
  }
  if (a.is_string() && b.is_string()) return a.str().compare(b.str()) < 0 ? -1 : a.str() != b.str();
  if (a.is_array() && b.is_array()) {
    const auto& x = a.array();
    const auto& y = b.array();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!Equal(x[i], y[i])) return Compare3(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  Throw(common::StrCat("'<' not supported between instances of '", TypeName(a), "' and '",
                       TypeName(b), "'"));
}

// ---- Value ----------------------------------------------------------------------------------

Value Value::Get(std::string_view key) const {
  if (!is_object()) return Value();
  for (const auto& [k, v] : object()) {
    if (k == key) return v;
  }
  return Value();
}

void Value::Set(std::string_view key, Value v) const {
  for (auto& [k, x] : mutable_object()) {
    if (k == key) {
      x = std::move(v);
      return;
    }
  }
  mutable_object().emplace_back(std::string(key), std::move(v));
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case K::kUndefined:
    case K::kNone:
      return false;
    case K::kBool:
    case K::kInt:
      return v.as_int() != 0;
    case K::kFloat:
      return v.as_float() != 0;
    case K::kString:
      return !v.str().empty();
    case K::kArray:
      return !v.array().empty();
    case K::kObject:
      return !v.object().empty();
    default:
      return true;
  }
}

std::string ToStr(const Value& v) {
  switch (v.kind()) {
    case K::kUndefined:
      return "";
    case K::kNone:
      return "None";
    case K::kBool:
      return v.as_bool() ? "True" : "False";
    case K::kInt:
      return std::to_string(v.as_int());
    case K::kFloat:
      return FloatRepr(v.as_float());
    case K::kString:
      return v.str();
    case K::kCallable:
      return common::StrCat("<function ", v.callable_name(), ">");
    default: {
      std::string out;
      ReprInto(v, &out);
      return out;
    }
  }
}

std::string Repr(const Value& v) {
  if (v.is_undefined()) return "Undefined";
  std::string out;
  ReprInto(v, &out);
  return out;
}

bool Equal(const Value& a, const Value& b) {
  const bool an = a.is_number() || a.kind() == K::kBool;
  const bool bn = b.is_number() || b.kind() == K::kBool;
  if (an && bn) {
    if (a.kind() != K::kFloat && b.kind() != K::kFloat) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.str() == b.str();
    case K::kArray: {
      if (a.is_tuple() != b.is_tuple() || a.array().size() != b.array().size()) return false;
      for (size_t i = 0; i < a.array().size(); ++i) {
        if (!Equal(a.array()[i], b.array()[i])) return false;
      }
      return true;
    }
    case K::kObject: {
      if (a.object().size() != b.object().size()) return false;
      for (const auto& [k, v] : a.object()) {
        const Value w = b.Get(k);
        if (w.is_undefined() || !Equal(v, w)) return false;
      }
      return true;
    }
    default:
      return a.same_payload(b);
  }
}

absl::Status ToJson(const Value& v, const JsonOptions& options, std::string* out) {
  try {
    JsonInto(v, options, 0, out);
  } catch (const Error& e) {
    return absl::InvalidArgumentError(e.message);
  }
  return absl::OkStatus();
}

}  // namespace kvgate::tokenizer::jinja
