// File: tokenizer/jinja_lexer.h
// The Jinja lexer: template source -> tokens (text, tag delimiters, names, literals,
// operators), with the whitespace control transformers' environment sets (trim_blocks,
// lstrip_blocks, and the -/+ modifiers). Internal to the template engine; stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::tokenizer::jinja {

struct Token {
  enum class Kind : uint8_t {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof
  };
  Kind kind;
  std::string text;
  int line;
  int64_t i = 0;
  double f = 0;
};

/// Throws Error{"template line N: what"}: the lexer and parser unwind with it to Template::Parse.
[[noreturn]] void Fail(int line, std::string_view what);

/// The tokens of `source`, ending with a kEof token. Throws Error on malformed source.
std::vector<Token> Lex(std::string_view source);

}  // namespace kvgate::tokenizer::jinja
