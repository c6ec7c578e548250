// The Jinja parser: tokens (tokenizer/jinja_lexer.h) -> syntax tree.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>

#include "absl/strings/match.h"
#include "common/strings.h"
#include "tokenizer/hf_text.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_memo.h"

namespace kvgate::tokenizer::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body ParseTemplate() {
    std::string end;
    Body b = ParseBody({}, &end);
    if (!end.empty()) Fail(Peek().line, common::StrCat("unexpected {% ", end, " %}"));
    return b;
  }

 private:
  using E = std::unique_ptr<Expr>;

  const Token& Peek(size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  const Token& Next() { return t_[std::min(p_++, t_.size() - 1)]; }
  bool IsOp(std::string_view op, size_t k = 0) const {
    return Peek(k).kind == Token::Kind::kOp && Peek(k).text == op;
  }
  bool IsName(std::string_view n, size_t k = 0) const {
    return Peek(k).kind == Token::Kind::kName && Peek(k).text == n;
  }
  void ExpectOp(std::string_view op) {
    if (!IsOp(op))
      Fail(Peek().line, common::StrCat("expected '", op, "', found '", Peek().text, "'"));
    ++p_;
  }
  std::string ExpectName() {
    if (Peek().kind != Token::Kind::kName) {
      Fail(Peek().line, common::StrCat("expected a name, found '", Peek().text, "'"));
    }
    return Next().text;
  }
  void ExpectBlockEnd() {
    if (Peek().kind != Token::Kind::kBlockEnd) {
      Fail(Peek().line, common::StrCat("expected the end of the tag, found '", Peek().text, "'"));
    }
    ++p_;
  }

  // Parses nodes until a block tag whose keyword is in `ends` (consumed up to the keyword;
  // its name goes to *end) or the end of the template.
  Body ParseBody(std::initializer_list<std::string_view> ends, std::string* end) {
    Body body;
    end->clear();
    while (Peek().kind != Token::Kind::kEof) {
      const Token& tok = Next();
      if (tok.kind == Token::Kind::kText) {
        auto n = std::make_unique<Template::Node>();
        n->kind = Template::Node::Kind::kText;
        n->text = tok.text;
        body.push_back(std::move(n));
        continue;
      }
      if (tok.kind == Token::Kind::kVarBegin) {
        auto n = std::make_unique<Template::Node>();
        n->kind = Template::Node::Kind::kOutput;
        n->line = tok.line;
        n->expr = ParseExpr();
        if (Peek().kind != Token::Kind::kVarEnd) {
          Fail(Peek().line, common::StrCat("expected '}}', found '", Peek().text, "'"));
        }
        ++p_;
        body.push_back(std::move(n));
        continue;
      }
      if (tok.kind != Token::Kind::kBlockBegin) Fail(tok.line, "unexpected token");
      const int line = Peek().line;
      const std::string kw = ExpectName();
      for (std::string_view e : ends) {
        if (kw == e) {
          *end = kw;
          return body;
        }
      }
      body.push_back(ParseStatement(kw, line));
    }
    if (ends.size() > 0) {
      Fail(Peek().line, common::StrCat("missing {% ", *(ends.end() - 1), " %} (template ended)"));
    }
    return body;
  }

  std::unique_ptr<Template::Node> ParseStatement(const std::string& kw, int line) {
    using K = Template::Node::Kind;
    if (++depth_ > kMaxDepth) Fail(line, "blocks nested too deeply");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    auto n = std::make_unique<Template::Node>();
    n->line = line;
    std::string end;
    if (kw == "if") {
      n->kind = K::kIf;
      n->conds.push_back(ParseExpr());
      ExpectBlockEnd();
      while (true) {
        n->bodies.push_back(ParseBody({"elif", "else", "endif"}, &end));
        if (end == "elif") {
          n->conds.push_back(ParseExpr());
          ExpectBlockEnd();
          continue;
        }
        if (end == "else") {
          ExpectBlockEnd();
          n->bodies.push_back(ParseBody({"endif"}, &end));
        }
        ExpectBlockEnd();
        return n;
      }
    }
    if (kw == "for") {
      n->kind = K::kFor;
      n->targets.push_back(ExpectName());
      while (IsOp(",")) {
        ++p_;
        n->targets.push_back(ExpectName());
      }
      if (!IsName("in")) Fail(Peek().line, "expected 'in' in a for loop");
      ++p_;
      n->expr = ParseExpr(/*with_cond=*/false);
      if (IsName("if")) {
        ++p_;
        n->conds.push_back(ParseExpr(false));
      }
      if (IsName("recursive")) Fail(line, "unsupported construct: recursive for loops");
      ExpectBlockEnd();
      n->bodies.push_back(ParseBody({"else", "endfor"}, &end));
      if (end == "else") {
        ExpectBlockEnd();
        n->bodies.push_back(ParseBody({"endfor"}, &end));
      }
      ExpectBlockEnd();
      return n;
    }
    if (kw == "set") {
      const std::string first = ExpectName();
      if (IsOp(".")) {
        ++p_;
        n->kind = K::kSet;
        n->text = first;
        n->attr = ExpectName();
        ExpectOp("=");
        n->expr = ParseExpr();
        ExpectBlockEnd();
        return n;
      }
      n->targets.push_back(first);
      while (IsOp(",")) {
        ++p_;
        n->targets.push_back(ExpectName());
      }
      if (Peek().kind == Token::Kind::kBlockEnd && n->targets.size() == 1) {
        ++p_;
        n->kind = K::kSetBlock;
        n->bodies.push_back(ParseBody({"endset"}, &end));
        ExpectBlockEnd();
        return n;
      }
      n->kind = K::kSet;
      ExpectOp("=");
      n->expr = ParseExpr();
      ExpectBlockEnd();
      return n;
    }
    if (kw == "macro") {
      n->kind = K::kMacro;
      n->text = ExpectName();
      ExpectOp("(");
      while (!IsOp(")")) {
        n->targets.push_back(ExpectName());
        if (IsOp("=")) {
          ++p_;
          n->conds.push_back(ParseExpr());
        } else {
          n->conds.push_back(nullptr);
        }
        if (!IsOp(")")) ExpectOp(",");
      }
      ++p_;
      ExpectBlockEnd();
      n->bodies.push_back(ParseBody({"endmacro"}, &end));
      ExpectBlockEnd();
      return n;
    }
    if (kw == "break" || kw == "continue") {
      n->kind = kw == "break" ? K::kBreak : K::kContinue;
      ExpectBlockEnd();
      return n;
    }
    if (kw == "generation") {
      n->kind = K::kScope;
      ExpectBlockEnd();
      n->bodies.push_back(ParseBody({"endgeneration"}, &end));
      ExpectBlockEnd();
      return n;
    }
    Fail(line, common::StrCat("unsupported construct: {% ", kw, " %}"));
  }

  // ---- expressions (Jinja's precedence) ----

  E Make(Expr::Op op, int line) {
    auto e = std::make_unique<Expr>();
    e->op = op;
    e->line = line;
    return e;
  }

  E ParseExpr(bool with_cond = true) {
    E e = ParseOr();
    while (with_cond && IsName("if")) {
      const int line = Next().line;
      auto c = Make(Expr::Op::kCond, line);
      c->kids.push_back(std::move(e));
      c->kids.push_back(ParseOr());
      if (IsName("else")) {
        ++p_;
        c->kids.push_back(ParseExpr());
      } else {
        c->kids.push_back(nullptr);
      }
      e = std::move(c);
    }
    return e;
  }

  E ParseOr() {
    E e = ParseAnd();
    while (IsName("or")) {
      auto o = Make(Expr::Op::kOr, Next().line);
      o->kids.push_back(std::move(e));
      o->kids.push_back(ParseAnd());
      e = std::move(o);
    }
    return e;
  }

  E ParseAnd() {
    E e = ParseNot();
    while (IsName("and")) {
      auto o = Make(Expr::Op::kAnd, Next().line);
      o->kids.push_back(std::move(e));
      o->kids.push_back(ParseNot());
      e = std::move(o);
    }
    return e;
  }

  E ParseNot() {
    if (IsName("not")) {
      auto o = Make(Expr::Op::kNot, Next().line);
      o->kids.push_back(ParseNot());
      return o;
    }
    return ParseCompare();
  }

  E ParseCompare() {
    E e = ParseMath1();
    E cmp;
    while (true) {
      std::string op;
      if (Peek().kind == Token::Kind::kOp &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" || Peek().text == ">" ||
           Peek().text == "<=" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        ++p_;
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        p_ += 2;
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = Make(Expr::Op::kCompare, Peek().line);
        cmp->kids.push_back(std::move(e));
      }
      cmp->ops.push_back(op);
      cmp->kids.push_back(ParseMath1());
    }
    return cmp ? std::move(cmp) : std::move(e);
  }

  E Binary(std::string op, E l, E r, int line) {
    auto b = Make(Expr::Op::kBinary, line);
    b->name = std::move(op);
    b->kids.push_back(std::move(l));
    b->kids.push_back(std::move(r));
    return b;
  }

  E ParseMath1() {
    E e = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const Token& t = Next();
      e = Binary(t.text, std::move(e), ParseConcat(), t.line);
    }
    return e;
  }

  E ParseConcat() {
    E e = ParseMath2();
    while (IsOp("~")) {
      const Token& t = Next();
      e = Binary("~", std::move(e), ParseMath2(), t.line);
    }
    return e;
  }

  E ParseMath2() {
    E e = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& t = Next();
      e = Binary(t.text, std::move(e), ParsePow(), t.line);
    }
    return e;
  }

  E ParsePow() {
    E e = ParseUnary(true);
    while (IsOp("**")) {
      const Token& t = Next();
      e = Binary("**", std::move(e), ParseUnary(true), t.line);
    }
    return e;
  }

  E ParseUnary(bool with_filter) {
    // Deep nesting would exhaust the stack of this recursive descent.
    if (++depth_ > kMaxDepth) Fail(Peek().line, "expression nested too deeply");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    E e;
    if (IsOp("-") || IsOp("+")) {
      const Token& t = Next();
      e = Make(t.text == "-" ? Expr::Op::kNeg : Expr::Op::kPos, t.line);
      e->kids.push_back(ParseUnary(false));
    } else {
      e = ParsePostfix(ParsePrimary());
    }
    return with_filter ? ParseFilters(std::move(e)) : std::move(e);
  }

  E ParsePrimary() {
    const Token& t = Next();
    switch (t.kind) {
      case Token::Kind::kString: {
        std::string s = t.text;
        while (Peek().kind == Token::Kind::kString) s += Next().text;  // adjacent literals
        auto e = Make(Expr::Op::kLiteral, t.line);
        e->literal = Value::String(std::move(s));
        return e;
      }
      case Token::Kind::kInt: {
        auto e = Make(Expr::Op::kLiteral, t.line);
        e->literal = Value::Int(t.i);
        return e;
      }
      case Token::Kind::kFloat: {
        auto e = Make(Expr::Op::kLiteral, t.line);
        e->literal = Value::Float(t.f);
        return e;
      }
      case Token::Kind::kName: {
        auto e = Make(Expr::Op::kLiteral, t.line);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value::Bool(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value::Bool(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::None();
        } else {
          e->op = Expr::Op::kName;
          e->name = t.text;
        }
        return e;
      }
      case Token::Kind::kOp:
        if (t.text == "(") {
          E inner = ParseExpr();
          if (IsOp(",")) {  // a tuple
            auto l = Make(Expr::Op::kList, t.line);
            l->name = "tuple";
            l->kids.push_back(std::move(inner));
            while (IsOp(",")) {
              ++p_;
              if (IsOp(")")) break;
              l->kids.push_back(ParseExpr());
            }
            inner = std::move(l);
          }
          ExpectOp(")");
          return inner;
        }
        if (t.text == "[") {
          auto l = Make(Expr::Op::kList, t.line);
          while (!IsOp("]")) {
            l->kids.push_back(ParseExpr());
            if (!IsOp("]")) ExpectOp(",");
          }
          ++p_;
          return l;
        }
        if (t.text == "{") {
          auto d = Make(Expr::Op::kDict, t.line);
          while (!IsOp("}")) {
            d->kids.push_back(ParseExpr());
            ExpectOp(":");
            d->kids.push_back(ParseExpr());
            if (!IsOp("}")) ExpectOp(",");
          }
          ++p_;
          return d;
        }
        break;
      default:
        break;
    }
    Fail(t.line, common::StrCat("unexpected '", t.text, "' in an expression"));
  }

  void ParseCallArgs(Expr* call) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (Peek().kind == Token::Kind::kName && IsOp("=", 1)) {
        call->keywords.push_back(Next().text);
        ++p_;
        call->kids.push_back(ParseExpr());
      } else {
        if (!call->keywords.empty()) Fail(Peek().line, "positional argument after keyword");
        call->kids.push_back(ParseExpr());
      }
      if (!IsOp(")")) ExpectOp(",");
    }
    ++p_;
  }

  E ParsePostfix(E e) {
    while (true) {
      if (IsOp(".")) {
        const int line = Next().line;
        auto a = Make(Expr::Op::kAttr, line);
        if (Peek().kind == Token::Kind::kInt) {  // x.0 is x[0]
          a->op = Expr::Op::kItem;
          a->kids.push_back(std::move(e));
          auto idx = Make(Expr::Op::kLiteral, line);
          idx->literal = Value::Int(Next().i);
          a->kids.push_back(std::move(idx));
        } else {
          a->name = ExpectName();
          a->kids.push_back(std::move(e));
        }
        e = std::move(a);
      } else if (IsOp("[")) {
        const int line = Next().line;
        E parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!IsOp(":") && !IsOp("]")) parts[k] = ParseExpr();
          if (k < 2 && IsOp(":")) {
            ++p_;
            slice = true;
          } else {
            break;
          }
        }
        ExpectOp("]");
        auto s = Make(slice ? Expr::Op::kSlice : Expr::Op::kItem, line);
        s->kids.push_back(std::move(e));
        if (slice) {
          for (auto& part : parts) s->kids.push_back(std::move(part));
        } else {
          if (!parts[0]) Fail(line, "empty subscript");
          s->kids.push_back(std::move(parts[0]));
        }
        e = std::move(s);
      } else if (IsOp("(")) {
        auto c = Make(Expr::Op::kCall, Peek().line);
        c->kids.push_back(std::move(e));
        ParseCallArgs(c.get());
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  E ParseFilters(E e) {
    while (true) {
      if (IsOp("|")) {
        const int line = Next().line;
        auto f = Make(Expr::Op::kFilter, line);
        f->name = ExpectName();
        f->kids.push_back(std::move(e));
        if (IsOp("(")) ParseCallArgs(f.get());
        e = std::move(f);
      } else if (IsName("is")) {
        const int line = Next().line;
        auto t = Make(Expr::Op::kTest, line);
        if (IsName("not")) {
          ++p_;
          t->negate = true;
        }
        t->name = ExpectName();
        t->kids.push_back(std::move(e));
        if (IsOp("(")) {
          ParseCallArgs(t.get());
        } else if (Peek().kind == Token::Kind::kString || Peek().kind == Token::Kind::kInt ||
                   Peek().kind == Token::Kind::kFloat ||
                   (Peek().kind == Token::Kind::kName && !IsName("else") && !IsName("or") &&
                    !IsName("and") && !IsName("if") && !IsName("in") && !IsName("not") &&
                    !IsName("is"))) {
          // `is divisibleby 3`, `is sameas none`: one argument without parentheses.
          t->kids.push_back(ParsePostfix(ParsePrimary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  static constexpr int kMaxDepth = 200;
  std::vector<Token> t_;
  size_t p_ = 0;
  int depth_ = 0;
};

// Whether any for loop iterates over `<name>['content']` or `<name>.content`.
bool LoopsOverContent(const Body& body) {
  for (const auto& n : body) {
    if (n->kind == Template::Node::Kind::kFor && n->expr) {
      const Expr& it = *n->expr;
      const bool attr = it.op == Expr::Op::kAttr && it.name == "content";
      const bool item = it.op == Expr::Op::kItem && it.kids.size() == 2 &&
                        it.kids[1]->op == Expr::Op::kLiteral && it.kids[1]->literal.is_string() &&
                        it.kids[1]->literal.str() == "content";
      if ((attr || item) && it.kids[0]->op == Expr::Op::kName) return true;
    }
    for (const Body& b : n->bodies) {
      if (LoopsOverContent(b)) return true;
    }
  }
  return false;
}

}  // namespace

const Body& TemplateAccess::body(const Template& t) { return t.body_; }

Template::Template() = default;
Template::~Template() = default;

Template::ReuseStats Template::reuse_stats() const {
  const RenderMemo::Stats s = memo_->stats();
  return {s.hits, s.misses, s.bytes};
}

void Template::set_reuse_bytes(size_t bytes) { memo_ = std::make_unique<RenderMemo>(bytes); }

absl::StatusOr<std::unique_ptr<Template>> Template::Parse(std::string_view source) {
  std::unique_ptr<Template> t(new Template());
  // Jinja drops one trailing newline of the source (keep_trailing_newline is off).
  if (absl::EndsWith(common::AbslView(source), "\r\n")) {
    source.remove_suffix(2);
  } else if (!source.empty() && source.back() == '\n') {
    source.remove_suffix(1);
  }
  t->source_ = std::string(source);
  try {
    Parser parser(Lex(t->source_));
    t->body_ = parser.ParseTemplate();
  } catch (const Error& e) {
    return absl::InvalidArgumentError(e.message);
  }
  AnalyzeLoops(t->body_);
  t->set_reuse_bytes(size_t{32} << 20);
  return t;
}

bool Template::IteratesContent() const { return LoopsOverContent(body_); }

}  // namespace kvgate::tokenizer::jinja
