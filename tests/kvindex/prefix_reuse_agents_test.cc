// Issue 31: prefix reuse for the agents' own APIs (Anthropic /v1/messages, OpenAI
// /v1/responses), whose conversion to chat carries state from one message to the next
// (inline system messages that join the system prompt or wait for a tool result; Responses
// items that add calls, text or reasoning to the assistant message before them). The property:
// with the cache, every body canonicalises exactly as a full pass does, whatever the next turn
// does to the previous one, and the cache is really used.
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kvindex/canonicalize.h"
#include "kvindex/prefix_reuse.h"
#include "tests/kvindex/prefix_reuse_expect.h"

namespace kvgate::kvindex {
namespace {

class Items {
 public:
  explicit Items(uint32_t seed) : rng_(seed) {}

  std::string Text(size_t bytes) {
    static const char* kPieces[] = {"def f():", "\\n", "\\t", "\\\"q\\\"", "\\\\",
                                    "\\u00e9",  "é",   "ok ", "\\u0001",   "\\ud83d\\ude00",
                                    "x"};
    std::string out;
    while (out.size() < bytes) out += kPieces[rng_() % std::size(kPieces)];
    return out;
  }

  // One element of a Messages `messages` array: every kind the conversion treats apart.
  std::string Anthropic(size_t bytes) {
    const std::string id = "toolu_" + std::to_string(next_id_++);
    switch (rng_() % 9) {
      case 0:
        return R"({"role":"user","content":")" + Text(bytes) + R"("})";
      case 1:  // thinking, text and a tool_use (what Claude Code's assistant turns are)
        return R"({"role":"assistant","content":[{"type":"thinking","thinking":")" + Text(40) +
               R"(","signature":"s"},{"type":"text","text":")" + Text(bytes) +
               R"("},{"type":"tool_use","id":")" + id +
               R"(","name":"Read","input":{"file_path":"/a/b.py","limit":)" +
               std::to_string(rng_() % 100) + "}}]}";
      case 2:  // tool results: a string, and text with an image (a user message after it)
        return R"({"role":"user","content":[{"type":"tool_result","tool_use_id":")" + id +
               R"(","content":")" + Text(bytes) +
               R"("},{"type":"tool_result","tool_use_id":"x","content":[{"type":"text","text":"a"},)"
               R"({"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}}]},)"
               R"({"type":"text","text":"<system-reminder>r</system-reminder>"}]})";
      case 3:  // inline system: leading, held after a tool_use, or in place
        return R"({"role":"system","content":")" + Text(bytes / 8 + 1) + R"("})";
      case 4:
        return R"({"content":")" + Text(bytes) + R"(","role":"assistant"})";
      case 5:  // a tool_result in an assistant message, a dropped and an unknown block
        return R"({"role":"assistant","content":[{"type":"tool_result","tool_use_id":"t","content":"r"},)"
               R"({"type":"redacted_thinking","data":"d"},{"type":"document","text":")" +
               Text(bytes) + R"("}]})";
      case 6:  // an assistant message with only a tool_use
        return R"({"role":"assistant","content":[{"type":"tool_use","id":")" + id +
               R"(","name":"Bash","input":{"command":"ls"}}]})";
      case 7:  // a system message as blocks, one of them the billing header
        return R"({"role":"system","content":[{"type":"text","text":"x-anthropic-billing-header: a"},)"
               R"({"type":"text","text":")" +
               Text(20) + R"("}]})";
      default:
        return R"({"role":"user","content":[{"type":"text","text":")" + Text(bytes) +
               R"(","cache_control":{"type":"ephemeral"}}]})";
    }
  }

  // One element of a Responses `input` array.
  std::string Responses(size_t bytes) {
    const std::string id = "call_" + std::to_string(next_id_++);
    switch (rng_() % 8) {
      case 0:
        return R"({"role":"user","content":")" + Text(bytes) + R"("})";
      case 1:
        return R"({"type":"message","role":"user","content":[{"type":"input_text","text":")" +
               Text(bytes) + R"("},{"type":"input_image","image_url":"https://i/x.png"}]})";
      case 2:  // merges into an assistant message before it, when that has no content
        return R"({"type":"message","role":"assistant","content":[{"type":"output_text","text":")" +
               Text(bytes) + R"("}]})";
      case 3:  // joins the assistant message before it
        return R"({"type":"function_call","call_id":")" + id +
               R"(","name":"shell","arguments":"{\"cmd\":[\"ls\"]}"})";
      case 4:
        return R"({"type":"function_call_output","call_id":")" + id + R"(","output":")" +
               Text(bytes) + R"("})";
      case 5:  // sets the reasoning of the assistant message before it
        return R"({"type":"reasoning","summary":[{"type":"summary_text","text":")" + Text(30) +
               R"("}]})";
      case 6:
        return R"({"role":"developer","content":")" + Text(bytes / 4 + 1) + R"("})";
      default:
        return R"({"type":"custom_tool_call","call_id":")" + id +
               R"(","name":"apply_patch","input":"*** Begin Patch"})";
    }
  }

  std::mt19937& rng() { return rng_; }

 private:
  std::mt19937 rng_;
  int next_id_ = 0;
};

struct AgentTurn {
  ApiKind api = ApiKind::kMessages;
  std::string model = "claude";
  std::string system;
  std::vector<std::string> items;
  bool system_first = true;  // the system prompt before or after the conversation
  bool tools_first = false;  // the tools, stream and metadata before or after the conversation
  int tool_count = 1;        // 0: `"tools":null`

  std::string Body() const {
    const bool messages = api == ApiKind::kMessages;
    std::string sys = messages ? R"("system":[{"type":"text","text":")" + system +
                                     R"(","cache_control":{"type":"ephemeral"}}])"
                               : R"("instructions":")" + system + R"(")";
    std::string tools = tool_count == 0 ? R"("tools":null)" : R"("tools":[)";
    for (int i = 0; i < tool_count; ++i) {
      const std::string name =
          "\"" + std::string(messages ? "Read" : "shell") + std::to_string(i) + "\"";
      if (i > 0) tools += ",";
      tools +=
          messages
              ? R"({"name":)" + name + R"(,"description":"d","input_schema":{"type":"object"}})"
              : R"({"type":"function","name":)" + name + R"(,"parameters":{"type":"object"}})";
    }
    if (tool_count > 0) tools += "]";
    std::string b = R"({"model":")" + model + R"(",)";
    if (system_first) b += sys + ",";
    const std::string fields = R"("stream":true,"metadata":{"user_id":"u"})";
    if (tools_first) b += tools + "," + fields + ",";  // (what Claude Code sends)
    b += messages ? R"("messages":[)" : R"("input":[)";
    for (size_t i = 0; i < items.size(); ++i) b += (i > 0 ? ",\n" : "") + items[i];
    b += "],";
    if (!system_first) b += sys + ",";
    if (!tools_first) b += tools + "," + fields + ",";
    b += R"("max_tokens":100})";
    return b;
  }
};

void EveryNextTurnCanonicalisesAsAFullPass(ApiKind api) {
  PrefixReuseCache cache(size_t{256} << 20);
  Canonicalizer reusing(CanonicalizeOptions{.reuse = &cache});
  Canonicalizer whole;
  const auto item = [&](Items& gen, size_t bytes) {
    return api == ApiKind::kMessages ? gen.Anthropic(bytes) : gen.Responses(bytes);
  };
  int resumed = 0;   // turns whose block hashes resumed from the previous turn's
  int borrowed = 0;  // turns whose prompt borrowed the reused bytes instead of copying them
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    Items gen(seed * 7919);
    AgentTurn t;
    t.api = api;
    t.system = gen.Text(12000);
    t.tools_first = seed % 2 == 0;
    while (t.Body().size() < PrefixReuseCache::kMinBodyBytes + 4096) {
      t.items.push_back(item(gen, 3000));
    }
    ExpectSameAsFullPass(reusing, whole, t.Body(), api, "first turn");
    for (int turn = 0; turn < 40; ++turn) {
      std::string what = "seed " + std::to_string(seed) + " turn " + std::to_string(turn);
      AgentTurn next = t;
      switch (gen.rng()() % 10) {
        case 0:
          next.items[gen.rng()() % next.items.size()] = item(gen, 2000);
          what += " edit";
          break;
        case 1:
          next.items.resize(next.items.size() - 1 - gen.rng()() % 3);
          what += " truncate";
          break;
        case 2:
          next.system += "x";
          what += " system";
          break;
        case 3:
          next.system_first = !next.system_first;
          what += " system moved";
          break;
        case 5:
          if (gen.rng()() % 2 == 0) {
            next.tools_first = !next.tools_first;
            what += " tools moved";
          } else {  // a tool added, or all of them dropped
            next.tool_count = (next.tool_count + 1) % 3;
            what += " tools changed";
          }
          break;
        case 4:  // a new first message (a new session of the same agent)
          next.items.insert(next.items.begin(), item(gen, 500));
          what += " new session";
          break;
        default:
          for (int k = 1 + static_cast<int>(gen.rng()() % 3); k > 0; --k) {
            next.items.push_back(item(gen, 1 + gen.rng()() % 4000));
          }
          what += " append";
      }
      ExpectSameAsFullPass(reusing, whole, next.Body(), api, what, turn % 7 == 6 ? 48 : 64,
                           &resumed, &borrowed);
      std::string broken = next.Body();
      broken.insert(broken.rfind(']'), ",{\"role\":");
      ExpectSameAsFullPass(reusing, whole, broken, api, what + " broken");
      t = next;
    }
  }
  const PrefixReuseCache::Stats s = cache.stats();
  EXPECT_GT(s.hits, 100u);
  EXPECT_GT(s.reused_bytes, s.hits * 30000);
  EXPECT_GT(resumed, 80);
  EXPECT_GT(borrowed, 80);
  EXPECT_GT(s.late_tools, 20u);  // tools after the conversation, the same as the turn before
}

TEST(PrefixReuseAgents, EveryNextMessagesTurnCanonicalisesAsAFullPass) {
  EveryNextTurnCanonicalisesAsAFullPass(ApiKind::kMessages);
}

TEST(PrefixReuseAgents, EveryNextResponsesTurnCanonicalisesAsAFullPass) {
  EveryNextTurnCanonicalisesAsAFullPass(ApiKind::kResponses);
}

// Where the conversion still waits on what comes next, a next turn cannot start its walk:
// after an assistant Responses item (the next item may add to it), and while inline system
// messages wait (leading ones join the system prompt, one after a tool_use waits for the tool
// result).
TEST(PrefixReuseAgents, AWalkResumesOnlyWhereEveryConvertedMessageIsFinal) {
  PrefixReuseCache cache(size_t{64} << 20);
  Canonicalizer reusing(CanonicalizeOptions{.reuse = &cache});
  Items gen(3);
  const std::string big = gen.Text(70000);

  AgentTurn r;
  r.api = ApiKind::kResponses;
  r.system = big;
  r.items = {R"({"role":"user","content":"a"})",
             R"({"type":"function_call","call_id":"c","name":"f","arguments":"{}"})",
             R"({"type":"function_call_output","call_id":"c","output":"o"})",
             R"({"type":"function_call","call_id":"d","name":"f","arguments":"{}"})"};
  CanonicalRequest out;
  ASSERT_TRUE(reusing.Parse(r.Body(), 0, ApiKind::kResponses, true, &out).ok());
  r.items.push_back(R"({"type":"function_call","call_id":"e","name":"f","arguments":"{}"})");
  PrefixMatch m = cache.Find(r.Body(), static_cast<uint8_t>(ApiKind::kResponses));
  ASSERT_TRUE(m.prefix);
  EXPECT_EQ(m.messages, 2);  // after the call output, not after the call that "e" joins
  // The same bytes as a Messages body are another API's: no match.
  EXPECT_FALSE(cache.Find(r.Body(), static_cast<uint8_t>(ApiKind::kMessages)).prefix);

  AgentTurn a;
  a.system = big;
  a.items = {
      R"({"role":"system","content":"leading"})", R"({"role":"user","content":"u"})",
      R"({"role":"assistant","content":[{"type":"tool_use","id":"t","name":"R","input":{}}]})",
      R"({"role":"system","content":"held"})",
      R"({"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r"}]})"};
  ASSERT_TRUE(reusing.Parse(a.Body(), 0, ApiKind::kMessages, true, &out).ok());
  a.items.push_back(R"({"role":"user","content":"next"})");
  // The leading system message stays pending to the end (it joins the system prompt): a
  // body that has one is always parsed whole.
  EXPECT_FALSE(cache.Find(a.Body(), static_cast<uint8_t>(ApiKind::kMessages)).prefix);
  a.items.erase(a.items.begin());
  ASSERT_TRUE(reusing.Parse(a.Body(), 0, ApiKind::kMessages, true, &out).ok());
  a.items.push_back(R"({"role":"user","content":"more"})");
  m = cache.Find(a.Body(), static_cast<uint8_t>(ApiKind::kMessages));
  ASSERT_TRUE(m.prefix);
  EXPECT_EQ(m.messages, 4);  // "next"; the held system message (2) is never a start
  EXPECT_EQ(m.prefix->states[2] & ReusablePrefix::kResumable, 0);
  EXPECT_NE(m.prefix->states[1] & ReusablePrefix::kAfterToolUse, 0);
}

}  // namespace
}  // namespace kvgate::kvindex
