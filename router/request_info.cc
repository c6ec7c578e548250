#include "router/request_info.h"

#include "common/strings.h"
#include "simdjson.h"

namespace kvgate::router {
namespace {

constexpr int kMaxDepth = 512;

// Walks a value completely so that malformed JSON anywhere in the body is caught by the gateway
// (400) instead of the worker.
simdjson::error_code Validate(simdjson::ondemand::value value, int depth) {
  if (depth > kMaxDepth) return simdjson::DEPTH_ERROR;
  simdjson::ondemand::json_type type;
  if (auto err = value.type().get(type)) return err;
  switch (type) {
    case simdjson::ondemand::json_type::object: {
      simdjson::ondemand::object obj;
      if (auto err = value.get_object().get(obj)) return err;
      for (auto field : obj) {
        std::string_view key;
        if (auto err = field.unescaped_key().get(key)) return err;
        simdjson::ondemand::value v;
        if (auto err = field.value().get(v)) return err;
        if (auto err = Validate(v, depth + 1)) return err;
      }
      return simdjson::SUCCESS;
    }
    case simdjson::ondemand::json_type::array: {
      simdjson::ondemand::array arr;
      if (auto err = value.get_array().get(arr)) return err;
      for (auto element : arr) {
        simdjson::ondemand::value v;
        if (auto err = element.get(v)) return err;
        if (auto err = Validate(v, depth + 1)) return err;
      }
      return simdjson::SUCCESS;
    }
    case simdjson::ondemand::json_type::string: {
      std::string_view s;
      return value.get_string().get(s);
    }
    case simdjson::ondemand::json_type::number: {
      double d;
      auto err = value.get_double().get(d);
      return err == simdjson::NUMBER_OUT_OF_RANGE ? simdjson::SUCCESS : err;
    }
    case simdjson::ondemand::json_type::boolean: {
      bool b;
      return value.get_bool().get(b);
    }
    case simdjson::ondemand::json_type::null:
      return value.is_null() ? simdjson::SUCCESS : simdjson::INCORRECT_TYPE;
  }
  return simdjson::INCORRECT_TYPE;
}

}  // namespace

absl::StatusOr<RequestInfo> ParseRequestInfo(std::string& body) {
  if (body.capacity() < body.size() + simdjson::SIMDJSON_PADDING) {
    body.reserve(body.size() + simdjson::SIMDJSON_PADDING);
  }
  thread_local simdjson::ondemand::parser parser;
  RequestInfo info;
  auto invalid = [](std::string_view why) {
    return absl::InvalidArgumentError(common::StrCat("request body is not valid JSON: ", why));
  };
  simdjson::ondemand::document doc;
  if (auto err = parser.iterate(body.data(), body.size(), body.capacity()).get(doc)) {
    return invalid(simdjson::error_message(err));
  }
  simdjson::ondemand::object obj;
  if (auto err = doc.get_object().get(obj)) {
    if (err == simdjson::INCORRECT_TYPE) {
      return absl::InvalidArgumentError("request body must be a JSON object");
    }
    return invalid(simdjson::error_message(err));
  }
  for (auto field : obj) {
    std::string_view key;
    if (auto err = field.unescaped_key().get(key)) return invalid(simdjson::error_message(err));
    simdjson::ondemand::value value;
    if (auto err = field.value().get(value)) return invalid(simdjson::error_message(err));
    if (key == "model") {
      std::string_view s;
      if (value.get_string().get(s)) {
        return absl::InvalidArgumentError("'model' must be a string");
      }
      info.model = std::string(s);
    } else if (key == "stream") {
      bool b = false;
      if (value.is_null()) continue;
      if (value.get_bool().get(b)) return absl::InvalidArgumentError("'stream' must be a boolean");
      info.stream = b;
    } else if (key == "user") {
      std::string_view s;
      if (!value.get_string().get(s)) info.user = std::string(s);
    } else {
      if (auto err = Validate(value, 1)) return invalid(simdjson::error_message(err));
    }
  }
  const char* trailing = nullptr;
  if (!doc.current_location().get(trailing)) {
    return invalid("trailing content after the top-level object");
  }
  return info;
}

}  // namespace kvgate::router
