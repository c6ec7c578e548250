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

std::string AnthropicErrorBody(int status, std::string_view message) {
  std::string_view type = "api_error";
  switch (status) {
    case 400:
    case 405:
    case 408:
    case 411:
    case 415:
    case 431:
      type = "invalid_request_error";
      break;
    case 401:
      type = "authentication_error";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 413:
      type = "request_too_large";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
    case 529:
      type = "overloaded_error";
      break;
    default:
      break;
  }
  std::string out = R"({"type":"error","error":{"type":)";
  AppendJsonString(out, type);
  out += R"(,"message":)";
  AppendJsonString(out, message);
  out += "}}";
  return out;
}

}  // namespace kvgate::common
