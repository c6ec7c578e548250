#include "common/json_util.h"

#include <cstdio>

namespace kvgate::common {

void AppendJsonString(std::string& out, std::string_view s) {
  out.push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

std::string OpenAiErrorBody(std::string_view message, std::string_view type,
                            std::string_view code) {
  std::string out = R"({"error":{"message":)";
  AppendJsonString(out, message);
  out += R"(,"type":)";
  AppendJsonString(out, type);
  out += R"(,"param":null,"code":)";
  if (code.empty()) {
    out += "null";
  } else {
    AppendJsonString(out, code);
  }
  out += "}}";
  return out;
}

}  // namespace kvgate::common
