// File: kvindex/py_json.h
// Internal to kvindex: Python's json.dumps with its default arguments (", " and ": "
// separators, ensure_ascii, keys in the order sent, floats as repr), written from a simdjson
// value. vLLM builds a chat tool call's `arguments` from an Anthropic tool_use `input` so; kvgate
// must produce the same bytes to hash the same prompt. Stateless; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "simdjson.h"

namespace kvgate::kvindex::py_json {

/// Appends `s` as json.dumps writes a str.
void AppendString(std::string_view s, std::string* out);
/// Appends `s` escaped as a JSON string's body, without the quotes: as json.dumps escapes it
/// with `ascii`, else with UTF-8 kept as it is (any JSON reader decodes both alike).
void AppendEscaped(std::string_view s, std::string* out, bool ascii);
/// Appends repr(d) (json.dumps of a float).
void AppendFloat(double d, std::string* out);
/// Appends json.dumps(v). An object without "type" gets "type": "object" last when
/// `default_object_type` (vLLM completes a tool's input_schema so). `json_safe`: a number out of
/// a double's range keeps its spelling instead of Python's `Infinity` (which is not JSON).
/// @return kInvalidArgument for malformed JSON or nesting past `max_depth`.
absl::Status Dumps(simdjson::ondemand::value v, std::string* out, int depth, int max_depth,
                   bool default_object_type = false, bool json_safe = false);

}  // namespace kvgate::kvindex::py_json
