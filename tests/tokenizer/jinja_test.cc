// The Jinja subset: Python value semantics, scoping, whitespace control, errors for what the
// subset leaves out, and the bounds that keep a hostile template from hanging the gateway.
// (Byte parity with python3-jinja2 on real templates: tests/tokenizer/parity.sh.)
#include "tokenizer/jinja.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvgate::tokenizer::jinja {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::string> Render(std::string_view source, Value ctx = Value::MakeObject()) {
  auto t = Template::Parse(source);
  if (!t.ok()) return t.status();
  std::string out;
  if (absl::Status s = (*t)->Render(ctx, &out); !s.ok()) return s;
  return out;
}

std::string Ok(std::string_view source, Value ctx = Value::MakeObject()) {
  auto r = Render(source, ctx);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : "";
}

TEST(JinjaTest, PythonStrOfValues) {
  EXPECT_EQ(
      Ok("{{ 1e16 }} {{ 1e15 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 0.0001 }} {{ 2.0 }} {{ -0.0 }}"),
      "1e+16 1000000000000000.0 0.30000000000000004 1e-05 0.0001 2.0 -0.0");
  EXPECT_EQ(Ok("{{ none }} {{ true }} {{ [1, 'a', none] }} {{ {'k': \"it's\"} }} {{ (1,) }}"),
            "None True [1, 'a', None] {'k': \"it's\"} (1,)");
  EXPECT_EQ(Ok("{{ undefined_name }}|{{ 7 // -2 }} {{ -7 % 3 }} {{ 7 / 2 }}"), "|-4 2 3.5");
  EXPECT_EQ(Ok("{{ 1 == 1.0 }} {{ true == 1 }} {{ [1] == (1,) }} {{ 'é'|length }}"),
            "True True False 1");
}

TEST(JinjaTest, StringsAreSlicedByCodePoint) {
  EXPECT_EQ(Ok("{{ 'héllo'[1] }} {{ 'héllo'[::-1] }} {{ '日本語'[-1] }} {{ 'abc'[5:] }}|"),
            "é olléh 語 |");
}

TEST(JinjaTest, SetInsideALoopDoesNotLeakButNamespacesDo) {
  EXPECT_EQ(Ok("{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(Ok("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = i %}{% endfor %}"
               "{{ ns.x }}"),
            "2");
  EXPECT_EQ(Ok("{% if true %}{% set y = 3 %}{% endif %}{{ y }}"), "3");
}

TEST(JinjaTest, WhitespaceControlAsTransformersConfiguresIt) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indent before one.
  EXPECT_EQ(Ok("{% if true %}\n  a\n  {% endif %}\nb"), "  a\nb");
  EXPECT_EQ(Ok("x  {{- ' y ' -}}  z"), "x y z");
  EXPECT_EQ(Ok("  {%+ if true %}kept{% endif %}"), "  kept");
  EXPECT_EQ(Ok("a\n{# note #}\nb\n"), "a\nb");
}

TEST(JinjaTest, MacrosLoopsAndControls) {
  EXPECT_EQ(Ok("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}"),
            "1B23");
  EXPECT_EQ(Ok("{% for i in range(6) if i is odd %}{% if i > 3 %}{% break %}{% endif %}"
               "{{ loop.index }}:{{ i }}{{ ',' if not loop.last }}{% endfor %}"),
            "1:1,2:3,");
  EXPECT_EQ(Ok("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Ok("{% for k, v in {'a': 1}.items() %}{{ k }}={{ v }}{% endfor %}"), "a=1");
}

// A chain of `+` is summed in one pass (strings joined once); mixed chains keep Python's
// left-to-right pairwise meaning, errors included.
TEST(JinjaTest, ChainsOfPlusAreSummedLeftToRight) {
  EXPECT_EQ(Ok("{{ 'a' + 'b' + 'c' + 'd' }}|{% set s = 'x' + 'y' + 'z' %}{{ s }}|{{ s|length }}"),
            "abcd|xyz|3");
  EXPECT_EQ(
      Ok("{{ 1 + 2 + 3.5 }} {{ [1] + [2] + [3] }} {{ 'a' + ('b' + 'c') }} {{ (1 + 2) ~ 'x' }}"),
      "6.5 [1, 2, 3] abc 3x");
  EXPECT_EQ(Ok("{{ ('a' + 'b' + 'c')[1:] }} {{ '' + '' + '' }}|"), "bc |");
  EXPECT_THAT(Render("{{ 'a' + 'b' + 1 }}").status().message(), HasSubstr("unsupported operand"));
  EXPECT_THAT(Render("{{ 1 + 2 + 'a' }}").status().message(), HasSubstr("unsupported operand"));
  EXPECT_THAT(Render("{{ 'a' + nothing + 'b' }}").status().message(), HasSubstr("undefined"));
}

TEST(JinjaTest, TojsonIsPythonJsonDumps) {
  EXPECT_EQ(Ok("{{ {'a': [1, 2.5, none, true], 'é': '\"\\n'}|tojson }}"),
            "{\"a\": [1, 2.5, null, true], \"é\": \"\\\"\\n\"}");
  EXPECT_EQ(Ok("{{ {'a': [1]}|tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(Ok("{{ 'é'|tojson(ensure_ascii=true) }}"), "\"\\u00e9\"");
  EXPECT_EQ(Ok("{{ 'plain run \\\\ then\\ttab é \"q\" end'|tojson }}"),
            "\"plain run \\\\ then\\ttab é \\\"q\\\" end\"");
}

TEST(JinjaTest, TemplateErrorsAreStatuses) {
  auto raised = Render("{{ raise_exception('roles must alternate') }}");
  EXPECT_EQ(raised.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(raised.status().message(), HasSubstr("roles must alternate"));
  EXPECT_THAT(Render("{{ nothing() }}").status().message(), HasSubstr("undefined"));
  EXPECT_THAT(Render("{{ none.x.y }}").status().message(), HasSubstr("undefined"));
  EXPECT_THAT(Render("{{ 'a' + 1 }}").status().message(), HasSubstr("unsupported operand"));
  EXPECT_THAT(Render("{{ 'x' in none }}").status().message(), HasSubstr("not iterable"));
  EXPECT_THAT(Render("{{ [1].append(2) }}").status().message(), HasSubstr("unsafe"));
  EXPECT_THAT(Render("{{ x|nosuchfilter }}").status().message(), HasSubstr("nosuchfilter"));
}

TEST(JinjaTest, ConstructsOutsideTheSubsetNameThemselves) {
  for (const char* src :
       {"{% include 'x' %}", "{% extends 'base' %}", "{% raw %}x{% endraw %}",
        "{% with a = 1 %}{% endwith %}", "{% for x in y recursive %}{% endfor %}"}) {
    auto t = Template::Parse(src);
    ASSERT_FALSE(t.ok()) << src;
    EXPECT_THAT(t.status().message(), HasSubstr("unsupported construct")) << src;
  }
  EXPECT_THAT(Template::Parse("{% if x %}").status().message(), HasSubstr("endif"));
  EXPECT_THAT(Template::Parse("{{ 'unterminated }}").status().message(), HasSubstr("string"));
}

TEST(JinjaTest, HostileTemplatesAreBounded) {
  EXPECT_THAT(Render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").status().message(),
              HasSubstr("nested too deeply"));
  EXPECT_THAT(Render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                     "{% endfor %}")
                  .status()
                  .message(),
              HasSubstr("too long"));
  EXPECT_THAT(Template::Parse("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}")
                  .status()
                  .message(),
              HasSubstr("nested too deeply"));
  // Found by the fuzzer: string repetition by a huge count looped (an empty string) or would
  // have allocated without bound.
  EXPECT_EQ(Ok("{{ '' * 5555555545555555 }}|{{ 'ab' * 3 }}|{{ 2 * 'c' }}|{{ 'ab' * -2 }}|"),
            "|ababab|cc||");
  EXPECT_THAT(Render("{{ 'ab' * 5555555545555555 }}").status().message(),
              HasSubstr("string repetition too large"));
}

TEST(JinjaTest, DetectsTemplatesThatIterateContent) {
  auto loops = Template::Parse(
      "{% for m in messages %}{% for p in m['content'] %}{% endfor %}"
      "{% endfor %}");
  auto plain = Template::Parse("{% for m in messages %}{{ m.content }}{% endfor %}");
  ASSERT_TRUE(loops.ok() && plain.ok());
  EXPECT_TRUE((*loops)->IteratesContent());
  EXPECT_FALSE((*plain)->IteratesContent());
}

}  // namespace
}  // namespace kvgate::tokenizer::jinja
