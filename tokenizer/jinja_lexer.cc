// File: tokenizer/jinja_lexer.cc
#include "tokenizer/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>

#include "absl/strings/match.h"
#include "common/strings.h"
#include "tokenizer/hf_text.h"
#include "tokenizer/jinja.h"

namespace kvgate::tokenizer::jinja {

[[noreturn]] void Fail(int line, std::string_view what) {
  throw Error{common::StrCat("template line ", line, ": ", what)};
}

namespace {

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  std::vector<Token> Run() {
    size_t pos = 0;
    bool strip_next = false;  // a `-` closed the previous tag
    while (pos <= src_.size()) {
      size_t open = FindOpener(pos);
      size_t tb = pos, te = open == npos ? src_.size() : open;
      if (strip_next) {
        while (tb < te && IsSpace(src_[tb])) ++tb;
      }
      strip_next = false;
      if (open == npos) {
        Emit(Token::Kind::kText, std::string(src_.substr(tb, te - tb)));
        break;
      }
      const char kind = src_[open + 1];  // '{', '%' or '#'
      const char modifier = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (modifier == '-') {
        while (te > tb && IsSpace(src_[te - 1])) --te;
      } else if ((kind == '%' || kind == '#') && modifier != '+') {
        // lstrip_blocks: spaces and tabs from the start of the line up to a block tag.
        size_t k = open;
        while (k > pos && (src_[k - 1] == ' ' || src_[k - 1] == '\t')) --k;
        if (k == 0 || src_[k - 1] == '\n') te = std::max(tb, k);
      }
      const std::string_view text = src_.substr(tb, te - tb);
      Emit(Token::Kind::kText, std::string(text));
      line_ += Count(src_.substr(pos, open - pos));
      size_t body = open + 2 + (modifier == '-' || modifier == '+' ? 1 : 0);
      if (kind == '#') {
        const size_t close = src_.find("#}", body);
        if (close == npos) Fail(line_, "unclosed comment");
        line_ += Count(src_.substr(open, close - open));
        pos = close + 2;
        if (close > body && src_[close - 1] == '-') {
          strip_next = true;
        } else {
          pos = TrimBlock(pos);
        }
        continue;
      }
      const bool block = kind == '%';
      Emit(block ? Token::Kind::kBlockBegin : Token::Kind::kVarBegin, "");
      pos = LexTag(body, block, &strip_next);
      if (block && !strip_next && !plus_close_) pos = TrimBlock(pos);
    }
    Emit(Token::Kind::kEof, "");
    return std::move(tokens_);
  }

 private:
  static constexpr size_t npos = std::string_view::npos;

  size_t FindOpener(size_t from) const {
    for (size_t i = src_.find('{', from); i != npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return npos;
  }
  static int Count(std::string_view s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n;
  }
  static bool IsSpace(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  }
  // trim_blocks: the first newline after a block tag goes.
  size_t TrimBlock(size_t pos) const {
    if (pos < src_.size() && src_[pos] == '\n') return pos + 1;
    if (pos + 1 < src_.size() && src_[pos] == '\r' && src_[pos + 1] == '\n') return pos + 2;
    return pos;
  }
  void Emit(Token::Kind kind, std::string text) {
    if (kind == Token::Kind::kText && text.empty()) return;
    tokens_.push_back(Token{kind, std::move(text), line_});
  }

  // Lexes the inside of a tag up to its closer; returns the position after it.
  size_t LexTag(size_t pos, bool block, bool* strip_next) {
    const char close0 = block ? '%' : '}';
    plus_close_ = false;
    static constexpr const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                           "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                           "]",  "{",  "}",  ",",  ".",  ":",  "|"};
    int depth = 0;  // brackets: a `}` inside a dict literal does not close the tag
    while (true) {
      while (pos < src_.size() && IsSpace(src_[pos])) {
        line_ += src_[pos] == '\n';
        ++pos;
      }
      if (pos >= src_.size()) Fail(line_, block ? "unclosed {% tag" : "unclosed {{ tag");
      const std::string_view rest = src_.substr(pos);
      if (depth == 0) {
        auto closes = [&](size_t at) {
          return rest.size() >= at + 2 && rest[at] == close0 && rest[at + 1] == '}';
        };
        if ((rest[0] == '-' || rest[0] == '+') && closes(1)) {
          *strip_next = rest[0] == '-';
          plus_close_ = rest[0] == '+';
          Emit(block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, "");
          return pos + 3;
        }
        if (closes(0)) {
          Emit(block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, "");
          return pos + 2;
        }
      }
      const char c = rest[0];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t n = 1;
        while (n < rest.size() &&
               (std::isalnum(static_cast<unsigned char>(rest[n])) || rest[n] == '_'))
          ++n;
        Emit(Token::Kind::kName, std::string(rest.substr(0, n)));
        pos += n;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t n = 0;
        bool is_float = false;
        while (n < rest.size() &&
               (std::isdigit(static_cast<unsigned char>(rest[n])) || rest[n] == '_'))
          ++n;
        if (n + 1 < rest.size() && rest[n] == '.' &&
            std::isdigit(static_cast<unsigned char>(rest[n + 1]))) {
          is_float = true;
          ++n;
          while (n < rest.size() && std::isdigit(static_cast<unsigned char>(rest[n]))) ++n;
        }
        if (n < rest.size() && (rest[n] == 'e' || rest[n] == 'E')) {
          size_t m = n + 1;
          if (m < rest.size() && (rest[m] == '+' || rest[m] == '-')) ++m;
          if (m < rest.size() && std::isdigit(static_cast<unsigned char>(rest[m]))) {
            is_float = true;
            n = m;
            while (n < rest.size() && std::isdigit(static_cast<unsigned char>(rest[n]))) ++n;
          }
        }
        std::string digits;
        for (char d : rest.substr(0, n)) {
          if (d != '_') digits.push_back(d);
        }
        Token t{is_float ? Token::Kind::kFloat : Token::Kind::kInt, digits, line_};
        if (is_float) {
          t.f = std::strtod(digits.c_str(), nullptr);
        } else {
          t.i = std::strtoll(digits.c_str(), nullptr, 10);
        }
        tokens_.push_back(std::move(t));
        pos += n;
      } else if (c == '\'' || c == '"') {
        pos = LexString(pos);
      } else {
        bool matched = false;
        for (const char* op : kOps) {
          const size_t n = std::strlen(op);
          if (rest.substr(0, n) == op) {
            if (op[0] == '(' || op[0] == '[' || op[0] == '{') ++depth;
            if ((op[0] == ')' || op[0] == ']' || op[0] == '}') && depth > 0) --depth;
            Emit(Token::Kind::kOp, op);
            pos += n;
            matched = true;
            break;
          }
        }
        if (!matched) Fail(line_, common::StrCat("unexpected character '", rest.substr(0, 1), "'"));
      }
    }
  }

  // A Python-style string literal with backslash escapes.
  size_t LexString(size_t pos) {
    const char q = src_[pos++];
    std::string out;
    while (true) {
      if (pos >= src_.size()) Fail(line_, "unterminated string literal");
      const char c = src_[pos++];
      if (c == q) break;
      if (c == '\n') ++line_;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos >= src_.size()) Fail(line_, "unterminated string literal");
      const char e = src_[pos++];
      auto hex = [&](int n) {
        if (pos + n > src_.size()) Fail(line_, "bad escape in string literal");
        uint32_t v = 0;  // exactly n hex digits: std::stoul would throw on "\\xx|"
        const char* first = src_.data() + pos;
        const auto r = std::from_chars(first, first + n, v, 16);
        if (r.ec != std::errc() || r.ptr != first + n) Fail(line_, "bad escape in string literal");
        pos += n;
        hf::AppendUtf8(v, &out);
      };
      switch (e) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case '0':
          out.push_back('\0');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case '\n':
          ++line_;
          break;
        case 'x':
          hex(2);
          break;
        case 'u':
          hex(4);
          break;
        case 'U':
          hex(8);
          break;
        default:  // Python keeps unknown escapes as written
          out.push_back('\\');
          out.push_back(e);
      }
    }
    tokens_.push_back(Token{Token::Kind::kString, std::move(out), line_});
    return pos;
  }

  std::string_view src_;
  std::vector<Token> tokens_;
  int line_ = 1;
  bool plus_close_ = false;
};

}  // namespace

std::vector<Token> Lex(std::string_view source) { return Lexer(source).Run(); }

}  // namespace kvgate::tokenizer::jinja
