#include "kvindex/py_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "kvindex/canonicalize_impl.h"

namespace kvgate::kvindex::py_json {
using namespace walk;  // NOLINT(build/namespaces): the walk's helpers (canonicalize_impl.h)

void AppendEscaped(std::string_view s, std::string* out, bool ascii) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto unicode = [out](uint32_t c) {
    char buf[6] = {
        '\\',         'u', kHex[(c >> 12) & 0xf], kHex[(c >> 8) & 0xf], kHex[(c >> 4) & 0xf],
        kHex[c & 0xf]};
    out->append(buf, 6);
  };
  size_t run = 0;  // start of the pending run of bytes copied as they are
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      ++i;
      continue;
    }
    out->append(s.data() + run, i - run);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
      run = ++i;
      continue;
    }
    if (c < 0x80) {
      switch (c) {
        case '\n':
          out->append("\\n");
          break;
        case '\r':
          out->append("\\r");
          break;
        case '\t':
          out->append("\\t");
          break;
        case '\b':
          out->append("\\b");
          break;
        case '\f':
          out->append("\\f");
          break;
        default:
          unicode(c);
      }
      run = ++i;
      continue;
    }
    if (!ascii) {  // UTF-8 stays as it is: pending again from here (the document was validated)
      run = i++;
      continue;
    }
    // A UTF-8 sequence (simdjson validated the document); non-BMP code points as surrogates.
    const int extra = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
    uint32_t cp = c & (0x3f >> extra);
    for (int k = 1; k <= extra && i + k < s.size(); ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    }
    i = std::min(s.size(), i + 1 + extra);
    if (cp >= 0x10000) {
      cp -= 0x10000;
      unicode(0xd800 + (cp >> 10));
      unicode(0xdc00 + (cp & 0x3ff));
    } else {
      unicode(cp);
    }
    run = i;
  }
  out->append(s.data() + run, s.size() - run);
}

void AppendString(std::string_view s, std::string* out) {
  out->push_back('"');
  AppendEscaped(s, out, /*ascii=*/true);
  out->push_back('"');
}

// Python's repr(float): the shortest round-trip digits, positional for exponents in [-4, 16).
void AppendFloat(double d, std::string* out) {
  if (std::isinf(d)) {
    out->append(d < 0 ? "-Infinity" : "Infinity");
    return;
  }
  if (std::isnan(d)) {
    out->append("NaN");
    return;
  }
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, r.ptr - buf);  // [-]d[.ddd]e[+-]dd
  std::string digits;
  bool negative = false;
  size_t i = 0;
  if (sci[0] == '-') {
    negative = true;
    i = 1;
  }
  const size_t e = sci.find('e');
  for (; i < e; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  int exp10 = 0;
  std::from_chars(sci.data() + e + (sci[e + 1] == '+' ? 2 : 1), sci.data() + sci.size(), exp10);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (negative) out->push_back('-');
  if (exp10 >= -4 && exp10 < 16) {
    if (exp10 >= 0) {
      const size_t whole = static_cast<size_t>(exp10) + 1;
      if (digits.size() <= whole) {
        out->append(digits);
        out->append(whole - digits.size(), '0');
        out->append(".0");
      } else {
        out->append(digits, 0, whole);
        out->push_back('.');
        out->append(digits, whole);
      }
    } else {
      out->append("0.");
      out->append(static_cast<size_t>(-exp10 - 1), '0');
      out->append(digits);
    }
    return;
  }
  out->push_back(digits[0]);
  if (digits.size() > 1) {
    out->push_back('.');
    out->append(digits, 1);
  }
  out->push_back('e');
  out->push_back(exp10 < 0 ? '-' : '+');
  const int a = std::abs(exp10);
  if (a < 10) out->push_back('0');
  out->append(std::to_string(a));
}

namespace {

absl::Status AppendNumber(od::value& v, std::string* out, bool json_safe) {
  std::string_view raw = v.raw_json_token();
  while (!raw.empty() &&
         (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' || raw.back() == '\t')) {
    raw.remove_suffix(1);
  }
  double d = 0;
  const auto ec = v.get_double().get(d);
  // A token the number parser refuses (`0"x"`, `1.e`) is invalid JSON, as the canonical walk's
  // Validate says too: both walks must agree on what a body is.
  if (ec && ec != simdjson::NUMBER_OUT_OF_RANGE) return JsonError(ec, "number");
  // For a chat body (json_safe), what the canonical JSON keeps, the spelling, whenever a double
  // cannot hold the number.
  if (ec && json_safe) {
    out->append(raw);
    return absl::OkStatus();
  }
  if (raw.find_first_of(".eE") == std::string_view::npos) {  // a Python int: its digits
    out->append(raw == "-0" ? std::string_view("0") : raw);
    return absl::OkStatus();
  }
  if (ec == simdjson::NUMBER_OUT_OF_RANGE) d = raw.starts_with('-') ? -HUGE_VAL : HUGE_VAL;
  AppendFloat(d, out);
  return absl::OkStatus();
}

}  // namespace

// json.dumps(value); an object without "type" gets "type": "object" last when
// `default_object_type` (vLLM completes a tool's input_schema so).
absl::Status Dumps(od::value v, std::string* out, int depth, int max_depth,
                   bool default_object_type, bool json_safe) {
  if (depth > max_depth) return absl::InvalidArgumentError("JSON nesting too deep");
  od::json_type t = od::json_type::null;
  KVINDEX_STATUS_TRY(TypeOf(v, &t, "value"));
  switch (t) {
    case od::json_type::object: {
      od::object obj;
      KVINDEX_JSON_TRY(v.get_object().get(obj), "object");
      out->push_back('{');
      bool first = true, has_type = false;
      for (auto field : obj) {
        std::string_view key;
        KVINDEX_JSON_TRY(field.unescaped_key().get(key), "object key");
        od::value fv;
        KVINDEX_JSON_TRY(field.value().get(fv), "object value");
        if (!first) out->append(", ");
        first = false;
        has_type = has_type || key == "type";
        AppendString(key, out);
        out->append(": ");
        KVINDEX_STATUS_TRY(Dumps(fv, out, depth + 1, max_depth, false, json_safe));
      }
      if (default_object_type && !has_type) {
        out->append(first ? "\"type\": \"object\"" : ", \"type\": \"object\"");
      }
      out->push_back('}');
      return absl::OkStatus();
    }
    case od::json_type::array: {
      od::array arr;
      KVINDEX_JSON_TRY(v.get_array().get(arr), "array");
      out->push_back('[');
      bool first = true;
      for (auto element : arr) {
        od::value ev;
        KVINDEX_JSON_TRY(element.get(ev), "array element");
        if (!first) out->append(", ");
        first = false;
        KVINDEX_STATUS_TRY(Dumps(ev, out, depth + 1, max_depth, false, json_safe));
      }
      out->push_back(']');
      return absl::OkStatus();
    }
    case od::json_type::string: {
      std::string_view s;
      KVINDEX_JSON_TRY(v.get_string().get(s), "string");
      AppendString(s, out);
      return absl::OkStatus();
    }
    case od::json_type::number:
      return AppendNumber(v, out, json_safe);
    case od::json_type::boolean: {
      bool b = false;
      KVINDEX_JSON_TRY(v.get_bool().get(b), "boolean");
      out->append(b ? "true" : "false");
      return absl::OkStatus();
    }
    case od::json_type::null: {
      bool is_null = false;
      KVINDEX_JSON_TRY(v.is_null().get(is_null), "null");
      if (!is_null) return absl::InvalidArgumentError("invalid JSON literal");
      out->append("null");
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError("unknown JSON value type");
}

}  // namespace kvgate::kvindex::py_json
