// kvgate-tokenize: a model's tokenizer and chat template from the command line, for checking
// kvgate's token ids against an engine's (and for the parity tests).
//
//   kvgate-tokenize --tokenizer DIR [--incremental] < lines.jsonl
//
// DIR holds tokenizer.json and tokenizer_config.json as Hugging Face ships them (and optionally
// chat_template.jinja). Each input line is one JSON object:
//   {"text": "...", "add_special_tokens": false}        (add_special_tokens defaults to true)
//   {"messages": [...], "tools": [...], "add_generation_prompt": true, ...}   (a chat body)
// and gets one output line: {"ids": [...]} for text, {"ids": [...], "rendered": "..."} for
// messages, or {"error": "..."}. --incremental tokenises chat lines through the session cache
// (the gateway's path) instead of from scratch. Exits 1 if any line failed, 2 on bad usage.
#include <simdjson.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "common/build_info.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/jinja.h"

namespace {

std::string JsonString(const std::string& s) {
  std::string out;
  (void)kvgate::tokenizer::jinja::ToJson(kvgate::tokenizer::jinja::Value::String(s), {}, &out);
  return out;
}

void PrintIds(const std::vector<uint32_t>& ids, std::string* out) {
  *out += "\"ids\":[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out->push_back(',');
    *out += std::to_string(ids[i]);
  }
  out->push_back(']');
}

int Usage() {
  std::fprintf(stderr, "usage: kvgate-tokenize --tokenizer DIR [--incremental] < lines.jsonl\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (kvgate::common::PrintVersionIfAsked(argc, argv, "kvgate-tokenize")) return 0;
  std::string dir;
  bool incremental = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokenizer" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a.rfind("--tokenizer=", 0) == 0) {
      dir = a.substr(12);
    } else if (a == "--incremental") {
      incremental = true;
    } else {
      return Usage();
    }
  }
  if (dir.empty()) return Usage();
  kvgate::tokenizer::HfTokenizerFiles files;
  files.dir = dir;
  auto loaded = kvgate::tokenizer::HfTokenizer::Load(files);
  if (!loaded.ok()) {
    std::fprintf(stderr, "kvgate-tokenize: %s\n", std::string(loaded.status().message()).c_str());
    return 2;
  }
  const kvgate::tokenizer::HfTokenizer& tok = **loaded;
  if (!tok.has_chat_template()) {
    std::fprintf(stderr, "kvgate-tokenize: no chat template: %s\n",
                 std::string(tok.chat_template_status().message()).c_str());
  }
  std::ios::sync_with_stdio(false);
  simdjson::dom::parser parser;
  std::string line, out;
  std::vector<uint32_t> ids;
  int failed = 0;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    out = "{";
    auto fail = [&](std::string_view why) {
      out += "\"error\":" + JsonString(std::string(why));
      ++failed;
    };
    simdjson::dom::element doc;
    if (parser.parse(line).get(doc) != simdjson::SUCCESS || !doc.is_object()) {
      fail("the line is not a JSON object");
    } else if (std::string_view text; doc["text"].get(text) == simdjson::SUCCESS) {
      bool add_special = true;
      if (doc["add_special_tokens"].get(add_special) != simdjson::SUCCESS) add_special = true;
      if (auto s = tok.Encode(text, add_special, &ids); s.ok()) {
        PrintIds(ids, &out);
      } else {
        fail(std::string(s.message()));
      }
    } else if (doc["messages"].error() == simdjson::SUCCESS) {
      std::string rendered;
      bool add_special = false;
      absl::Status s = tok.RenderChat(line, &rendered, &add_special);
      if (s.ok()) {
        s = incremental ? tok.TokenizeChat(line, &ids) : tok.Encode(rendered, add_special, &ids);
      }
      if (s.ok()) {
        PrintIds(ids, &out);
        out += ",\"rendered\":" + JsonString(rendered);
      } else {
        fail(std::string(s.message()));
      }
    } else {
      fail("the line has neither \"text\" nor \"messages\"");
    }
    out += "}\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return failed > 0 ? 1 : 0;
}
