#include "kvindex/canonicalize.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvindex/block_hash.h"

namespace kvgate::kvindex {
namespace {

using ::testing::HasSubstr;

std::string Chat(std::string_view body) {
  auto r = CanonicalizeRequest(body, ApiKind::kChatCompletions);
  EXPECT_TRUE(r.ok()) << r.status() << " for " << body.substr(0, 200);
  if (!r.ok() || r->prompts.size() != 1) {
    return "<error>";
  }
  return r->prompts[0].bytes;
}

absl::Status ChatStatus(std::string_view body) {
  return CanonicalizeRequest(body, ApiKind::kChatCompletions).status();
}

std::vector<BlockHash> Hashes(const std::string& canonical, uint32_t block = 64) {
  std::vector<BlockHash> out;
  HashTextBlocks(canonical, RootSeed(NamespaceSeed({"m", "", ""}), PromptKind::kChat), block, &out);
  return out;
}

constexpr std::string_view kConversation = R"({
  "model": "qwen", "stream": true,
  "tools": [{"type": "function", "function": {"name": "read_file", "description": "Reads a file",
             "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                            "required": ["path"]}}}],
  "messages": [
    {"role": "system", "content": "You are a helpful coding agent. Café au lait."},
    {"role": "user", "content": [{"type": "text", "text": "Read main.cc please"}]},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "read_file", "arguments": "{\"path\": \"main.cc\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "int main() { return 0; }"},
    {"role": "assistant", "content": "It returns zero.", "name": "bot"}
  ]})";

// Same conversation: other whitespace, key order, escapes, tools after messages.
constexpr std::string_view kConversationReordered =
    "{\"messages\":[{\"content\":\"You are a helpful coding agent. Caf\\u00e9 au "
    "lait.\",\"role\":\"system\"},{\"content\":[{\"text\":\"Read main.cc please\",\"type\":"
    "\"text\"}],\"role\":\"user\"},{\"tool_calls\":[{\"function\":{\"arguments\":\"{\\\"path\\\""
    ": \\\"main.cc\\\"}\",\"name\":\"read_file\"},\"type\":\"function\",\"id\":\"call_1\"}],"
    "\"role\":\"assistant\",\"content\":null},{\"content\":\"int main() { return 0; }\","
    "\"tool_call_id\":\"call_1\",\"role\":\"tool\"},{\"name\":\"bot\",\"role\":\"assistant\","
    "\"content\":\"It returns zero.\"}],\"stream\":true,\"tools\":[{\"function\":{\"parameters\""
    ":{\"required\":[\"path\"],\"properties\":{\"path\":{\"type\":\"string\"}},\"type\":"
    "\"object\"},\"description\":\"Reads \\u0061 file\",\"name\":\"read_file\"},\"type\":"
    "\"function\"}],\"model\":\"qwen\"}";

TEST(CanonicalizeTest, IndependentOfWhitespaceKeyOrderAndEscapes) {
  const std::string a = Chat(kConversation);
  const std::string b = Chat(kConversationReordered);
  EXPECT_EQ(a, b);
  EXPECT_EQ(Hashes(a), Hashes(b));
  EXPECT_FALSE(Hashes(a).empty());
}

// Text without a backslash is read in place in the body; it must equal the decoded text, with
// neither the quotes nor the whitespace before the next separator, in every API.
TEST(CanonicalizeTest, TextReadInPlaceEqualsTheDecodedText) {
  struct Case {
    ApiKind api;
    std::string_view spaced;   // backslash-free strings, whitespace after them
    std::string_view escaped;  // the same strings, each with an escape (decoded by simdjson)
  };
  const Case cases[] = {
      {ApiKind::kChatCompletions,
       "{\"messages\":[{\"role\":\"user\",\"content\":\"plain text\" \n\t ,\"name\":\"n\"},"
       "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"part one\"\r\n }]},"
       "{\"role\":\"user\",\"content\":\"last\"  }]}",
       R"({"messages":[{"role":"user","content":"pl\u0061in text","name":"n"},)"
       R"({"role":"assistant","content":[{"type":"text","text":"p\u0061rt one"}]},)"
       R"({"role":"user","content":"l\u0061st"}]})"},
      {ApiKind::kMessages,
       "{\"model\":\"m\",\"max_tokens\":8,\"system\":\"be brief\" ,\"messages\":["
       "{\"role\":\"user\",\"content\":\"plain text\"\n},{\"role\":\"assistant\",\"content\":"
       "[{\"type\":\"text\",\"text\":\"part one\" }]}]}",
       R"({"model":"m","max_tokens":8,"system":"be bri\u0065f","messages":[)"
       R"({"role":"user","content":"pl\u0061in text"},{"role":"assistant","content":)"
       R"([{"type":"text","text":"p\u0061rt one"}]}]})"},
      {ApiKind::kResponses, "{\"model\":\"m\",\"input\":\"plain text\"\t}",
       R"({"model":"m","input":"pl\u0061in text"})"},
  };
  for (const Case& c : cases) {
    auto spaced = CanonicalizeRequest(c.spaced, c.api);
    auto escaped = CanonicalizeRequest(c.escaped, c.api);
    ASSERT_TRUE(spaced.ok()) << spaced.status();
    ASSERT_TRUE(escaped.ok()) << escaped.status();
    ASSERT_EQ(spaced->prompts.size(), 1u);
    ASSERT_EQ(escaped->prompts.size(), 1u);
    EXPECT_EQ(spaced->prompts[0].bytes, escaped->prompts[0].bytes) << c.spaced;
    EXPECT_THAT(spaced->prompts[0].bytes, HasSubstr("plain text"));
  }
  // Read in place, a string is still consumed: what follows it is checked as after any value.
  for (std::string_view bad : {R"({"messages":[{"role":"user","content":"a":"b"}]})",
                               R"({"messages":[{"role":"user","content":["a":1]}]})",
                               R"({"model":"m","tools":[{"type":"function","function":{"name":"f",)"
                               R"("parameters":{"properties":"p": {"type":"string"}}}}],)"
                               R"("messages":[]})"}) {
    EXPECT_EQ(CanonicalizeRequest(bad, ApiKind::kChatCompletions).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  // Found by the messages fuzzer: a schema's string followed by ':'.
  EXPECT_FALSE(
      CanonicalizeRequest(
          "{\"model\": \"m\", \"max_tokens\": 64, \"stream\": true, \"system\": [{\"type\": "
          "\"text\", \"text\": \"x-anthrnohlgil-eader: cc_version=2.1.3; cch=aa;\"}, {\"type\": "
          "\"text\", \"text\": \"You are a coding agent.\", \"cache_control\": {\"type\": "
          "\"ephemeral\"}}], \"tools\": [{\"name\": \"Bash\", \"description\": \"Run\", "
          "\"input_schema\": {\"properties\":\"nucommand\": {\"type\": \"string\"}, \"n\": "
          "{\"type\": \"number\", \"minimum\": "
          "15\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n01.0}}}}], \"metadata\": "
          "{\"user_id\": \"{\\\"device_id\\\":\\\"d\\\",\\\"session_id\\\":\\\"s-0\\\"}\"}, "
          "\"messages\": [{\"role\": \"system\", \"content\": \"lead\"}, {\"role\": \"user\", "
          "\"content\": [{\"type\": \"text\", \"text\": \"ok\"}, {\"type\": \"t}ool_use\", \"id\": "
          "\"t1\", \"paraname\": \"Bash\", \"@nput\":  \"tool_use\", \"id\": \"tent\", \"source\": "
          "{\"type\": \"text\", \"data\": \"d\"}}]}]}",
          ApiKind::kMessages)
          .ok());
  // A string that ends in an escaped backslash, or holds an escaped quote, is decoded.
  EXPECT_THAT(Chat(R"({"messages":[{"role":"user","content":"a \\"}]})"), HasSubstr("a \\"));
  EXPECT_THAT(Chat(R"({"messages":[{"role":"user","content":"say \"hi\" "}]})"),
              HasSubstr("say \"hi\" "));
}

TEST(CanonicalizeTest, ExtractsModelAndSalt) {
  auto r = CanonicalizeRequest(R"({"cache_salt":"s1","model":"m","messages":[]})",
                               ApiKind::kChatCompletions);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(r->cache_salt, "s1");
  EXPECT_EQ(r->prompts.at(0).kind, PromptKind::kChat);
}

TEST(CanonicalizeTest, UnicodeEscapesDecode) {
  EXPECT_EQ(Chat(R"({"messages":[{"role":"user","content":"\u00e9\ud83d\ude00\/"}]})"),
            Chat("{\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\xa9\xf0\x9f\x98\x80/\"}]}"));
}

TEST(CanonicalizeTest, ChangingOneCharacterChangesChainFromThatBlockOn) {
  std::string text(5000, 'x');
  for (size_t i = 0; i < text.size(); ++i) {
    text[i] = static_cast<char>('a' + i % 26);
  }
  auto body = [&](const std::string& t) {
    return absl::StrCat(R"({"messages":[{"role":"user","content":")", t, R"("}]})");
  };
  const std::string base = Chat(body(text));
  const size_t pos_in_text = 3000;
  std::string changed_text = text;
  changed_text[pos_in_text] = '#';
  const std::string changed = Chat(body(changed_text));
  ASSERT_EQ(base.size(), changed.size());
  const size_t byte = base.find(text) + pos_in_text;
  const std::vector<BlockHash> h1 = Hashes(base), h2 = Hashes(changed);
  ASSERT_EQ(h1.size(), h2.size());
  const size_t block = byte / 64;
  for (size_t i = 0; i < h1.size(); ++i) {
    if (i < block) {
      EXPECT_EQ(h1[i], h2[i]) << i;
    } else {
      EXPECT_NE(h1[i], h2[i]) << i;
    }
  }
}

TEST(CanonicalizeTest, AppendingAMessageKeepsEarlierBlocks) {
  const std::string one = Chat(
      R"({"messages":[{"role":"system","content":"A long system prompt that spans more than one block of sixty-four bytes, surely."},{"role":"user","content":"hi"}]})");
  const std::string two = Chat(
      R"({"messages":[{"role":"system","content":"A long system prompt that spans more than one block of sixty-four bytes, surely."},{"role":"user","content":"hi"},{"role":"assistant","content":"hello there"}]})");
  ASSERT_EQ(two.compare(0, one.size(), one), 0) << "earlier stream must be a prefix";
  const auto h1 = Hashes(one), h2 = Hashes(two);
  ASSERT_LE(h1.size(), h2.size());
  for (size_t i = 0; i < h1.size(); ++i) {
    EXPECT_EQ(h1[i], h2[i]);
  }
}

TEST(CanonicalizeTest, MessageBoundariesAreUnambiguous) {
  const std::string a =
      Chat(R"({"messages":[{"role":"user","content":"ab"},{"role":"user","content":"c"}]})");
  const std::string b =
      Chat(R"({"messages":[{"role":"user","content":"a"},{"role":"user","content":"bc"}]})");
  const std::string c = Chat(R"({"messages":[{"role":"user","content":"abc"}]})");
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  // Framing bytes inside content are escaped and cannot forge a boundary.
  const std::string forged = Chat(
      absl::StrCat(R"({"messages":[{"role":"user","content":"ab\u0003\u0001ruser\u0002tc"}]})"));
  EXPECT_NE(forged, a);
  EXPECT_EQ(forged.find('\x03'), forged.size() - 1);
  // Roles matter.
  EXPECT_NE(Chat(R"({"messages":[{"role":"user","content":"x"}]})"),
            Chat(R"({"messages":[{"role":"assistant","content":"x"}]})"));
}

TEST(CanonicalizeTest, StringContentEqualsSingleTextPart) {
  EXPECT_EQ(Chat(R"({"messages":[{"role":"user","content":"hi"}]})"),
            Chat(R"({"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]})"));
}

TEST(CanonicalizeTest, EmptyAndNullContent) {
  EXPECT_NE(Chat(R"({"messages":[{"role":"user","content":""}]})"),
            Chat(R"({"messages":[{"role":"user","content":null}]})"));
  EXPECT_NE(Chat(R"({"messages":[{"role":"user","content":""}]})"),
            Chat(R"({"messages":[{"role":"user"}]})"));
  EXPECT_EQ(Chat(R"({"messages":[]})"), "");
}

TEST(CanonicalizeTest, MediaPartsContributeHashes) {
  const std::string img1 = Chat(
      R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/1.png","detail":"low"}}]}]})");
  const std::string img1b = Chat(
      R"({"messages":[{"role":"user","content":[{"image_url":{"detail":"low","url":"http:\/\/x\/1.png"},"type":"image_url"}]}]})");
  const std::string img2 = Chat(
      R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/2.png"}}]}]})");
  const std::string audio = Chat(
      R"({"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]}]})");
  EXPECT_EQ(img1, img1b);
  EXPECT_NE(img1, img2);
  EXPECT_NE(img1, audio);
  EXPECT_EQ(img1.find("http"), std::string::npos) << "URL is hashed, not copied";
}

TEST(CanonicalizeTest, ToolsAffectStreamAndComeFirst) {
  const std::string with = Chat(
      R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]})");
  const std::string without = Chat(R"({"messages":[{"role":"user","content":"x"}]})");
  const std::string other_tool = Chat(
      R"({"tools":[{"type":"function","function":{"name":"g"}}],"messages":[{"role":"user","content":"x"}]})");
  EXPECT_NE(with, without);
  EXPECT_NE(with, other_tool);
  EXPECT_EQ(with.substr(0, 2), std::string("\x01x"));
}

TEST(CanonicalizeTest, ToolCallArgumentsAndIdsMatter) {
  auto call = [](const std::string& args, const std::string& id) {
    return Chat(absl::StrCat(R"({"messages":[{"role":"assistant","tool_calls":[{"id":")", id,
                             R"(","type":"function","function":{"name":"f","arguments":")", args,
                             R"("}}]}]})"));
  };
  EXPECT_NE(call("{}", "a"), call("{ }", "a"));
  EXPECT_NE(call("{}", "a"), call("{}", "b"));
  EXPECT_EQ(call("{}", "a"), call("{}", "a"));
}

TEST(CanonicalizeTest, NumbersAreNormalised) {
  EXPECT_EQ(Chat(R"({"tools":[{"x":1.0,"y":100}],"messages":[]})"),
            Chat(R"({"tools":[{"y":1e2,"x":1}],"messages":[]})"));
  // 19+ significant digits: simdjson 3.0's get_number() reads these as 0; the value counts.
  const std::string digits(71, '6');
  EXPECT_EQ(Chat(absl::StrCat(R"({"tools":[{"x":)", digits, R"(1500.0}],"messages":[]})")),
            Chat(R"({"tools":[{"x":6.666666666666666e+74}],"messages":[]})"));
  EXPECT_NE(Chat(R"({"tools":[{"x":1666666666666666666.0}],"messages":[]})"),
            Chat(R"({"tools":[{"x":0}],"messages":[]})"));
}

TEST(CanonicalizeTest, HugeContent) {
  std::string big(8 << 20, 'z');
  const std::string body =
      absl::StrCat(R"({"messages":[{"role":"user","content":")", big, R"("}]})");
  const std::string c = Chat(body);
  EXPECT_GT(c.size(), big.size());
  EXPECT_EQ(Hashes(c).size(), c.size() / 64);
}

TEST(CanonicalizeTest, DeepNestingIsAnErrorNotACrash) {
  std::string deep = R"({"tools":[)";
  for (int i = 0; i < 5000; ++i) {
    deep += R"({"a":)";
  }
  deep += "1";
  for (int i = 0; i < 5000; ++i) {
    deep += "}";
  }
  deep += R"(],"messages":[]})";
  EXPECT_FALSE(ChatStatus(deep).ok());

  std::string ok = R"({"tools":[)";
  for (int i = 0; i < 30; ++i) {
    ok += "[";
  }
  for (int i = 0; i < 30; ++i) {
    ok += "]";
  }
  ok += R"(],"messages":[]})";
  EXPECT_TRUE(ChatStatus(ok).ok()) << ChatStatus(ok);
}

TEST(CanonicalizeTest, MalformedInputIsInvalidArgument) {
  const char* bad[] = {
      "",
      "[]",
      "{",
      R"({"messages":)",
      R"({"messages":"hi"})",
      R"({"messages":[1]})",
      R"({"messages":[{"role":1,"content":"x"}]})",
      R"({"messages":[{"role":"user","content":5}]})",
      R"({"messages":[{"role":"user","content":[{"text":"no type"}]}]})",
      R"({"messages":[{"role":"user","content":"unterminated}]})",
      R"({"messages":[{"role":"user","content":"\uZZZZ"}]})",
      R"({"model":"x"})",
      R"({"messages":[{"role":"assistant","tool_calls":[{"id":"a"}]}]})",
      R"({"tools":{},"messages":[]})",
      // Fuzzer regression: malformed text inside a partly read content part.
      R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"3]}
,"image_url":{"url":"x"}}]},{"rolessistant","conten@":null,"tool_callsl_id":"c1"}]})",
      R"({"messages":[],"messages":[]})",
  };
  for (const char* body : bad) {
    absl::Status s = ChatStatus(body);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << body << " -> " << s;
  }
  EXPECT_THAT(std::string(ChatStatus(R"({"model":"x"})").message()), HasSubstr("messages"));
}

TEST(CanonicalizeTest, Completions) {
  Canonicalizer c;
  auto text = c.Canonicalize(R"({"prompt":"caf\u00e9"})", ApiKind::kCompletions);
  ASSERT_TRUE(text.ok()) << text.status();
  ASSERT_EQ(text->prompts.size(), 1u);
  EXPECT_EQ(text->prompts[0].kind, PromptKind::kText);
  EXPECT_EQ(text->prompts[0].bytes, "caf\xc3\xa9");

  auto tokens = c.Canonicalize(R"({"prompt":[1, 2 ,4294967295]})", ApiKind::kCompletions);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->prompts.size(), 1u);
  EXPECT_EQ(tokens->prompts[0].kind, PromptKind::kTokens);
  EXPECT_EQ(tokens->prompts[0].tokens, (std::vector<uint32_t>{1, 2, 4294967295u}));

  auto list = c.Canonicalize(R"({"prompt":["a",[7,8],"b"]})", ApiKind::kCompletions);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->prompts.size(), 3u);
  EXPECT_EQ(list->prompts[1].tokens, (std::vector<uint32_t>{7, 8}));
  EXPECT_EQ(list->prompts[2].bytes, "b");

  for (const char* bad :
       {R"({"prompt":[1,"a"]})", R"({"prompt":["a",1]})", R"({"prompt":[-1]})",
        R"({"prompt":[4294967296]})", R"({"prompt":[1.5]})", R"({"prompt":{}})", R"({})"}) {
    EXPECT_EQ(c.Canonicalize(bad, ApiKind::kCompletions).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(CanonicalizeTest, ReusedCanonicalizerGivesSameAnswers) {
  Canonicalizer c;
  CanonicalRequest out;
  ASSERT_TRUE(c.Canonicalize(kConversation, ApiKind::kChatCompletions, &out).ok());
  const std::string first = out.prompts[0].bytes;
  ASSERT_FALSE(c.Canonicalize("{bad", ApiKind::kChatCompletions, &out).ok());
  ASSERT_TRUE(c.Canonicalize(kConversationReordered, ApiKind::kChatCompletions, &out).ok());
  EXPECT_EQ(out.prompts[0].bytes, first);
}

TEST(CanonicalizeTest, PaddedVariantMatchesCopyingVariant) {
  Canonicalizer c;
  std::string body(kConversation);
  const size_t size = body.size();
  body.reserve(size + Canonicalizer::kPaddingBytes);
  CanonicalRequest padded, copied;
  ASSERT_TRUE(c.CanonicalizePadded(std::string_view(body.data(), size), body.capacity(),
                                   ApiKind::kChatCompletions, &padded)
                  .ok());
  ASSERT_TRUE(c.Canonicalize(body, ApiKind::kChatCompletions, &copied).ok());
  EXPECT_EQ(padded.prompts.at(0).bytes, copied.prompts.at(0).bytes);
  // Too little capacity falls back to copying.
  ASSERT_TRUE(c.CanonicalizePadded(body, size, ApiKind::kChatCompletions, &padded).ok());
  EXPECT_EQ(padded.prompts.at(0).bytes, copied.prompts.at(0).bytes);
}

std::string AppendEscapedOf(std::string_view text) {
  std::string out = "prefix";  // appends: what was there stays
  AppendEscaped(text, &out);
  EXPECT_EQ(out.substr(0, 6), "prefix");
  return out.substr(6);
}

TEST(AppendEscapedTest, EscapesFramingBytesOnly) {
  std::string out;
  AppendEscaped(std::string_view("a\x00\x08\x09zzzzzzzzzzzz\x01", 17), &out);
  EXPECT_EQ(out, std::string("a\x00\x40\x00\x48\x09zzzzzzzzzzzz\x00\x41", 20));
}

// Byte by byte, the definition: what the wide paths (16 and 8 bytes a test) must equal.
std::string EscapedByDefinition(std::string_view text) {
  std::string out;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= canonical::kMaxFramingByte) {
      out.push_back(canonical::kEscape);
      out.push_back(static_cast<char>(c | 0x40));
    } else {
      out.push_back(ch);
    }
  }
  return out;
}

TEST(AppendEscapedTest, AFramingByteIsFoundAtEveryOffsetOfEveryLength) {
  // Every length up to 200 (each tail the 64-, 16- and 8-byte steps leave) with one framing
  // byte at every offset, two at once, and the bytes around the limit (0x08 framing, 0x09 not).
  for (size_t n = 0; n <= 200; ++n) {
    std::string text(n, 'x');
    ASSERT_EQ(AppendEscapedOf(text), text);
    for (size_t i = 0; i < n; ++i) {
      for (const char b : {'\x00', '\x08', '\x09', '\x7f', '\xff'}) {
        text[i] = b;
        ASSERT_EQ(AppendEscapedOf(text), EscapedByDefinition(text)) << "n=" << n << " i=" << i;
        if (i + 37 < n) {
          text[i + 37] = '\x01';
          ASSERT_EQ(AppendEscapedOf(text), EscapedByDefinition(text)) << "n=" << n << " i=" << i;
          text[i + 37] = 'x';
        }
      }
      text[i] = 'x';
    }
  }
}

}  // namespace
}  // namespace kvgate::kvindex
