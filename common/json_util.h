// File: common/json_util.h
// Small JSON helpers shared by the binaries: string escaping and OpenAI-style error bodies.
// Stateless; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace kvgate::common {

/// Appends `s` to `out` as a JSON string literal, quotes included.
void AppendJsonString(std::string& out, std::string_view s);

/// Returns `{"error":{"message":...,"type":...,"code":...}}`, the body OpenAI clients expect.
/// `code` is emitted as a string, or null when empty.
std::string OpenAiErrorBody(std::string_view message, std::string_view type, std::string_view code);

/// Returns `{"type":"error","error":{"type":...,"message":...}}`, the body Anthropic clients
/// expect, its type chosen by `status` as Anthropic's API does (invalid_request_error,
/// authentication_error, not_found_error, rate_limit_error, overloaded_error, api_error, ...).
std::string AnthropicErrorBody(int status, std::string_view message);

}  // namespace kvgate::common
