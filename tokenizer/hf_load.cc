// File: tokenizer/hf_load.cc
// HfTokenizer::Load and its steps: tokenizer.json (normalizer, pre-tokenizer, BPE model, added
// tokens, post-processor), tokenizer_config.json and the chat template. The tokenizer's only
// file reads; encoding lives in hf_tokenizer.cc.
#include <simdjson.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "common/strings.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_added.h"
#include "tokenizer/hf_bpe.h"
#include "tokenizer/hf_text.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/incremental.h"

namespace kvgate::tokenizer {
namespace hf {
namespace {

// ---- JSON helpers (simdjson DOM) ----

using simdjson::dom::element;

std::string_view TypeOf(element e) {
  std::string_view t;
  if (e.is_object() && e["type"].get(t) == simdjson::SUCCESS) return t;
  return "";
}

bool Bool(element e, std::string_view key, bool fallback) {
  bool b;
  return e.is_object() && e[key].get(b) == simdjson::SUCCESS ? b : fallback;
}

std::optional<std::string> Str(element e, std::string_view key) {
  std::string_view s;
  if (e.is_object() && e[key].get(s) == simdjson::SUCCESS) return std::string(s);
  return std::nullopt;
}

// A special token in tokenizer_config.json: "<s>", {"content": "<s>", ...} or null.
std::optional<std::string> TokenContent(element e) {
  std::string_view s;
  if (e.get(s) == simdjson::SUCCESS) return std::string(s);
  if (e.is_object()) return Str(e, "content");
  return std::nullopt;
}

absl::StatusOr<std::shared_ptr<const Regex>> PatternOf(element e, std::string_view where) {
  element pattern;
  if (e["pattern"].get(pattern) != simdjson::SUCCESS || !pattern.is_object()) {
    return absl::InvalidArgumentError(common::StrCat(where, ": missing \"pattern\""));
  }
  if (auto s = Str(pattern, "String")) return Regex::Compile(Regex::Quote(*s));
  if (auto r = Str(pattern, "Regex")) {
    auto re = Regex::Compile(*r);
    if (!re.ok())
      return absl::InvalidArgumentError(common::StrCat(where, ": ", re.status().message()));
    return re;
  }
  return absl::InvalidArgumentError(common::StrCat(where, ": pattern is neither String nor Regex"));
}

absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(element e, const std::string& where) {
  const std::string_view type = TypeOf(e);
  if (type == "NFC") return MakeUnicodeNormalizer(UnicodeForm::kNfc);
  if (type == "NFD") return MakeUnicodeNormalizer(UnicodeForm::kNfd);
  if (type == "NFKC") return MakeUnicodeNormalizer(UnicodeForm::kNfkc);
  if (type == "NFKD") return MakeUnicodeNormalizer(UnicodeForm::kNfkd);
  if (type == "Lowercase") return MakeLowercaseNormalizer();
  if (type == "Strip") {
    return MakeStripNormalizer(Bool(e, "strip_left", true), Bool(e, "strip_right", true));
  }
  if (type == "Prepend") {
    auto p = Str(e, "prepend");
    if (!p) return absl::InvalidArgumentError(where + ": Prepend without \"prepend\"");
    return MakePrependNormalizer(*p);
  }
  if (type == "Replace") {
    auto content = Str(e, "content");
    if (!content) return absl::InvalidArgumentError(where + ": Replace without \"content\"");
    element pattern;
    if (e["pattern"].get(pattern) == simdjson::SUCCESS) {
      if (auto s = Str(pattern, "String")) return MakeLiteralReplaceNormalizer(*s, *content);
    }
    auto re = PatternOf(e, where);
    if (!re.ok()) return re.status();
    return MakeReplaceNormalizer(*std::move(re), *content);
  }
  if (type == "Sequence") {
    simdjson::dom::array list;
    if (e["normalizers"].get(list) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(where + ": Sequence without \"normalizers\"");
    }
    std::vector<std::unique_ptr<Normalizer>> all;
    size_t i = 0;
    for (element n : list) {
      auto one = ParseNormalizer(n, common::StrCat(where, ".normalizers[", i++, "]"));
      if (!one.ok()) return one.status();
      all.push_back(*std::move(one));
    }
    return MakeSequenceNormalizer(std::move(all));
  }
  return absl::InvalidArgumentError(
      common::StrCat(where, ": normalizer type \"", type, "\" is not supported"));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(element e, const std::string& where,
                                                                bool last, bool* byte_level) {
  const std::string_view type = TypeOf(e);
  if (type == "ByteLevel") {
    if (!last) {
      return absl::InvalidArgumentError(
          where + ": a ByteLevel pre-tokenizer followed by others is not supported");
    }
    *byte_level = true;
    std::shared_ptr<const Regex> gpt2;
    const bool use_regex = Bool(e, "use_regex", true);
    if (use_regex) {
      auto re = Regex::Compile(kGpt2Pattern);
      if (!re.ok()) return re.status();
      gpt2 = *std::move(re);
    }
    return MakeByteLevelPreTokenizer(Bool(e, "add_prefix_space", true), use_regex, std::move(gpt2));
  }
  if (type == "Split") {
    auto re = PatternOf(e, where);
    if (!re.ok()) return re.status();
    const std::string behavior = Str(e, "behavior").value_or("Isolated");
    SplitBehavior b;
    if (behavior == "Removed") {
      b = SplitBehavior::kRemoved;
    } else if (behavior == "Isolated") {
      b = SplitBehavior::kIsolated;
    } else if (behavior == "MergedWithPrevious") {
      b = SplitBehavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      b = SplitBehavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      b = SplitBehavior::kContiguous;
    } else {
      return absl::InvalidArgumentError(
          common::StrCat(where, ": unknown Split behavior \"", behavior, "\""));
    }
    return MakeSplitPreTokenizer(*std::move(re), b, Bool(e, "invert", false));
  }
  if (type == "Metaspace") {
    const std::string replacement = Str(e, "replacement").value_or("\xE2\x96\x81");
    PrependScheme scheme = PrependScheme::kAlways;
    if (auto s = Str(e, "prepend_scheme")) {
      if (*s == "first") {
        scheme = PrependScheme::kFirst;
      } else if (*s == "never") {
        scheme = PrependScheme::kNever;
      } else if (*s != "always") {
        return absl::InvalidArgumentError(
            common::StrCat(where, ": unknown Metaspace prepend_scheme \"", *s, "\""));
      }
    } else if (!Bool(e, "add_prefix_space", true)) {
      scheme = PrependScheme::kNever;
    }
    return MakeMetaspacePreTokenizer(replacement, scheme, Bool(e, "split", true));
  }
  if (type == "Digits") return MakeDigitsPreTokenizer(Bool(e, "individual_digits", false));
  if (type == "Sequence") {
    simdjson::dom::array list;
    if (e["pretokenizers"].get(list) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(where + ": Sequence without \"pretokenizers\"");
    }
    std::vector<std::unique_ptr<PreTokenizer>> all;
    const size_t n = list.size();
    size_t i = 0;
    for (element p : list) {
      auto one = ParsePreTokenizer(p, common::StrCat(where, ".pretokenizers[", i, "]"),
                                   last && i + 1 == n, byte_level);
      ++i;
      if (!one.ok()) return one.status();
      all.push_back(*std::move(one));
    }
    return MakeSequencePreTokenizer(std::move(all));
  }
  return absl::InvalidArgumentError(
      common::StrCat(where, ": pre-tokenizer type \"", type, "\" is not supported"));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(common::StrCat("cannot read ", path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// simdjson rejects integers past 64 bits; transformers writes model_max_length as
// 1000000000000000019884624838656. Such literals (outside strings) become a float.
void TameBigIntegers(std::string* json) {
  std::string out;
  out.reserve(json->size());
  bool in_string = false;
  for (size_t i = 0; i < json->size(); ++i) {
    const char c = (*json)[i];
    if (in_string) {
      out.push_back(c);
      if (c == '\\' && i + 1 < json->size()) {
        out.push_back((*json)[++i]);
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    if (c >= '0' && c <= '9' &&
        (i == 0 || !std::isalnum(static_cast<unsigned char>((*json)[i - 1])))) {
      size_t j = i;
      while (j < json->size() && (*json)[j] >= '0' && (*json)[j] <= '9') ++j;
      if (j - i > 19 &&
          (j == json->size() || ((*json)[j] != '.' && (*json)[j] != 'e' && (*json)[j] != 'E'))) {
        out += common::StrCat((*json).substr(i, j - i), ".0");
        i = j - 1;
        continue;
      }
    }
    out.push_back(c);
  }
  json->swap(out);
}

// Parses a JSON file into `parser`'s document.
absl::Status LoadJson(const std::string& path, simdjson::dom::parser& parser, element* root) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  TameBigIntegers(&*text);
  if (auto err = parser.parse(*text).get(*root); err != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(
        common::StrCat(path, ": not valid JSON (", simdjson::error_message(err), ")"));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace hf

using hf::element;

// Load's steps, one member each. A nested class, so that it may fill the tokenizer's private
// parts. The tokenizer.json steps return bare messages, which Load prefixes with the file.
class HfTokenizer::Loader {
 public:
  explicit Loader(HfTokenizer& t) : t_(t) {}

  // The pre-tokenizer (which says whether the vocabulary is byte-level) and the normalizer.
  absl::Status Normalization(element root, bool* byte_level);
  absl::Status Model(element root, bool byte_level);
  // Special ones first in the matching set, as the library orders it.
  absl::Status AddedTokens(element root);
  absl::Status PostProcessor(element p, const std::string& where);
  // tokenizer_config.json: special tokens for templates, transformers' BOS rule, the template.
  absl::Status Config(const std::string& config_path, std::string* template_source);
  void SetChatTemplate(const std::string& source);

 private:
  absl::Status Vocabulary(element model);
  absl::Status TemplateProcessing(element p, const std::string& where);
  absl::Status BosEosRule(element config, const std::string& config_path);

  HfTokenizer& t_;
};

absl::StatusOr<std::shared_ptr<const HfTokenizer>> HfTokenizer::Load(
    const HfTokenizerFiles& files) {
  namespace fs = std::filesystem;
  auto in_dir = [&](const std::string& given, const char* name) {
    return given.empty() && !files.dir.empty() ? (fs::path(files.dir) / name).string() : given;
  };
  const std::string json_path = in_dir(files.tokenizer_json, "tokenizer.json");
  const std::string config_path = in_dir(files.tokenizer_config, "tokenizer_config.json");
  const std::string template_path = in_dir(files.chat_template, "chat_template.jinja");
  if (json_path.empty()) return absl::InvalidArgumentError("no tokenizer.json given");
  std::error_code ec;
  if (!fs::is_regular_file(json_path, ec)) {
    return absl::NotFoundError(common::StrCat(json_path, " does not exist"));
  }
  auto fail = [&](const auto& what) {
    return absl::InvalidArgumentError(common::StrCat(json_path, ": ", what));
  };

  std::shared_ptr<HfTokenizer> t(new HfTokenizer());
  t->name_ = files.dir.empty() ? json_path : files.dir;
  simdjson::dom::parser parser;
  element root;
  if (absl::Status s = hf::LoadJson(json_path, parser, &root); !s.ok()) return s;
  if (!root.is_object()) return fail("not a JSON object");
  Loader loader(*t);
  bool byte_level = false;
  if (auto s = loader.Normalization(root, &byte_level); !s.ok()) return fail(s.message());
  if (auto s = loader.Model(root, byte_level); !s.ok()) return fail(s.message());
  if (auto s = loader.AddedTokens(root); !s.ok()) return fail(s.message());
  element e;
  if (root["post_processor"].get(e) == simdjson::SUCCESS && !e.is_null()) {
    if (auto s = loader.PostProcessor(e, "post_processor"); !s.ok()) return fail(s.message());
  }

  std::string template_source;
  if (fs::is_regular_file(config_path, ec)) {
    if (auto s = loader.Config(config_path, &template_source); !s.ok()) return s;
  }
  if (fs::is_regular_file(template_path, ec)) {
    auto src = hf::ReadFile(template_path);
    if (!src.ok()) return src.status();
    template_source = *std::move(src);
  }
  loader.SetChatTemplate(template_source);
  t->cache_ = std::make_unique<IncrementalCache>(IncrementalCache::Options{});
  return std::shared_ptr<const HfTokenizer>(std::move(t));
}

absl::Status HfTokenizer::Loader::Normalization(element root, bool* byte_level) {
  element e;
  if (root["pre_tokenizer"].get(e) == simdjson::SUCCESS && !e.is_null()) {
    auto p = hf::ParsePreTokenizer(e, "pre_tokenizer", true, byte_level);
    if (!p.ok()) return p.status();
    t_.pre_tokenizer_ = *std::move(p);
  }
  if (root["normalizer"].get(e) == simdjson::SUCCESS && !e.is_null()) {
    auto n = hf::ParseNormalizer(e, "normalizer");
    if (!n.ok()) return n.status();
    t_.normalizer_ = *std::move(n);
  }
  return absl::OkStatus();
}

absl::Status HfTokenizer::Loader::Model(element root, bool byte_level) {
  element model;
  if (root["model"].get(model) != simdjson::SUCCESS || !model.is_object()) {
    return absl::InvalidArgumentError("no \"model\" object");
  }
  const std::string_view type = hf::TypeOf(model);
  if (type != "BPE" && !(type.empty() && model["merges"].error() == simdjson::SUCCESS)) {
    return absl::InvalidArgumentError(
        common::StrCat("model type \"", type, "\" is not supported (only BPE)"));
  }
  double dropout = 0;
  if (model["dropout"].get(dropout) == simdjson::SUCCESS && dropout > 0) {
    return absl::InvalidArgumentError("BPE dropout is random: not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (auto s = hf::Str(model, key); s && !s->empty()) {
      return absl::InvalidArgumentError(
          common::StrCat("model.", key, " \"", *s, "\" is not supported"));
    }
  }
  hf::BpeModel::Options mo;
  mo.byte_level = byte_level;
  mo.byte_fallback = hf::Bool(model, "byte_fallback", false);
  mo.fuse_unk = hf::Bool(model, "fuse_unk", false);
  mo.ignore_merges = hf::Bool(model, "ignore_merges", false);
  mo.unk_token = hf::Str(model, "unk_token");
  t_.model_ = std::make_unique<hf::BpeModel>(mo);
  if (auto s = Vocabulary(model); !s.ok()) return s;
  return t_.model_->Finish();
}

// model.vocab and model.merges into the BPE model.
absl::Status HfTokenizer::Loader::Vocabulary(element model) {
  simdjson::dom::object vocab;
  if (model["vocab"].get(vocab) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("model.vocab is not an object");
  }
  for (auto [key, value] : vocab) {
    uint64_t id;
    if (value.get(id) != simdjson::SUCCESS || id > UINT32_MAX) {
      return absl::InvalidArgumentError(
          common::StrCat("model.vocab[\"", key, "\"] is not a token id"));
    }
    if (auto s = t_.model_->AddToken(key, static_cast<uint32_t>(id)); !s.ok()) return s;
  }
  simdjson::dom::array merges;
  if (model["merges"].get(merges) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("model.merges is not a list");
  }
  for (element m : merges) {
    std::string_view s, a, b;
    simdjson::dom::array pair;
    if (m.get(s) == simdjson::SUCCESS) {
      const size_t sp = s.find(' ', 1);
      if (sp == std::string_view::npos || s.find(' ', sp + 1) != std::string_view::npos) {
        return absl::InvalidArgumentError(
            common::StrCat("model.merges: \"", s, "\" is not two tokens"));
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.get(pair) == simdjson::SUCCESS && pair.size() == 2 &&
               pair.at(0).get(a) == simdjson::SUCCESS && pair.at(1).get(b) == simdjson::SUCCESS) {
    } else {
      return absl::InvalidArgumentError("model.merges: an entry is neither \"a b\" nor [a, b]");
    }
    if (auto st = t_.model_->AddMerge(a, b); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status HfTokenizer::Loader::AddedTokens(element root) {
  t_.added_ = std::make_unique<hf::AddedVocab>();
  hf::AddedVocab& added = *t_.added_;
  simdjson::dom::array list;
  if (root["added_tokens"].get(list) == simdjson::SUCCESS) {
    for (element a : list) {
      hf::AddedToken tok;
      uint64_t id;
      auto content = hf::Str(a, "content");
      if (!content || a["id"].get(id) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError("added_tokens: an entry lacks \"content\" or \"id\"");
      }
      tok.content = *content;
      tok.id = static_cast<uint32_t>(id);
      tok.special = hf::Bool(a, "special", false);
      tok.single_word = hf::Bool(a, "single_word", false);
      tok.lstrip = hf::Bool(a, "lstrip", false);
      tok.rstrip = hf::Bool(a, "rstrip", false);
      tok.normalized = hf::Bool(a, "normalized", !tok.special);
      added.cut_safe &= !tok.single_word && !tok.lstrip && !tok.rstrip;
      added.tokens.push_back(std::move(tok));
    }
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < added.tokens.size(); ++i) {
      const hf::AddedToken& tok = added.tokens[i];
      if (tok.special != (pass == 0)) continue;
      if (!tok.normalized) {
        added.raw.Add(tok.content, static_cast<int32_t>(i));
        continue;
      }
      std::string normalized = tok.content;
      if (t_.normalizer_) {
        if (auto s = t_.normalizer_->Normalize(tok.content, &normalized); !s.ok()) return s;
      }
      added.normalized.Add(normalized, static_cast<int32_t>(i));
    }
  }
  return absl::OkStatus();
}

absl::Status HfTokenizer::Loader::PostProcessor(element p, const std::string& where) {
  const std::string_view pt = hf::TypeOf(p);
  if (pt == "ByteLevel") return absl::OkStatus();  // offsets only
  if (pt == "Sequence") {
    simdjson::dom::array list;
    if (p["processors"].get(list) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(where + ": Sequence without \"processors\"");
    }
    size_t i = 0;
    for (element q : list) {
      if (auto s = PostProcessor(q, common::StrCat(where, ".processors[", i++, "]")); !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  if (pt == "TemplateProcessing") return TemplateProcessing(p, where);
  if (pt == "BertProcessing" || pt == "RobertaProcessing") {
    uint64_t cls, sep;
    if (p["cls"].at(1).get(cls) != simdjson::SUCCESS ||
        p["sep"].at(1).get(sep) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(where + ": cls/sep missing");
    }
    t_.prefix_ids_.push_back(static_cast<uint32_t>(cls));
    t_.suffix_ids_.push_back(static_cast<uint32_t>(sep));
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      common::StrCat(where, ": post-processor type \"", pt, "\" is not supported"));
}

// The special tokens of "single" before its sequence go before the text, those after it after.
absl::Status HfTokenizer::Loader::TemplateProcessing(element p, const std::string& where) {
  simdjson::dom::array single;
  simdjson::dom::object specials;
  if (p["single"].get(single) != simdjson::SUCCESS ||
      p["special_tokens"].get(specials) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(where + ": TemplateProcessing without single/special");
  }
  bool seen_sequence = false;
  for (element item : single) {
    element x;
    if (item["Sequence"].get(x) == simdjson::SUCCESS) {
      if (seen_sequence) {
        return absl::InvalidArgumentError(where + ": more than one sequence in \"single\"");
      }
      seen_sequence = true;
      continue;
    }
    std::string_view sid;
    if (item["SpecialToken"].get(x) != simdjson::SUCCESS || x["id"].get(sid)) {
      return absl::InvalidArgumentError(where + ": unknown item in \"single\"");
    }
    simdjson::dom::array ids;
    if (specials[sid]["ids"].get(ids) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(
          common::StrCat(where, ": special token \"", sid, "\" has no ids"));
    }
    for (element i : ids) {
      uint64_t v;
      if (i.get(v) != simdjson::SUCCESS) return absl::InvalidArgumentError(where + ": bad id");
      (seen_sequence ? t_.suffix_ids_ : t_.prefix_ids_).push_back(static_cast<uint32_t>(v));
    }
  }
  return absl::OkStatus();
}

absl::Status HfTokenizer::Loader::Config(const std::string& config_path,
                                         std::string* template_source) {
  simdjson::dom::parser parser;
  element config;
  if (absl::Status s = hf::LoadJson(config_path, parser, &config); !s.ok()) return s;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    element v;
    if (config[key].get(v) != simdjson::SUCCESS) continue;
    if (auto c = hf::TokenContent(v)) t_.special_tokens_.named.emplace_back(key, *c);
  }
  simdjson::dom::array extra;
  if (config["additional_special_tokens"].get(extra) == simdjson::SUCCESS) {
    for (element v : extra) {
      if (auto c = hf::TokenContent(v)) t_.special_tokens_.additional.push_back(*c);
    }
  }
  if (auto s = BosEosRule(config, config_path); !s.ok()) return s;
  element tpl;
  std::string_view s;
  simdjson::dom::array named;
  if (config["chat_template"].get(tpl) == simdjson::SUCCESS) {
    if (tpl.get(s) == simdjson::SUCCESS) {
      *template_source = std::string(s);
    } else if (tpl.get(named) == simdjson::SUCCESS) {
      for (element entry : named) {
        if (hf::Str(entry, "name").value_or("") == "default") {
          *template_source = hf::Str(entry, "template").value_or("");
        }
      }
    }
  }
  return absl::OkStatus();
}

// transformers' LlamaTokenizerFast and GemmaTokenizerFast rebuild the post-processor from
// add_bos_token (default true) and add_eos_token (default false), whatever tokenizer.json says;
// other classes keep the file's.
absl::Status HfTokenizer::Loader::BosEosRule(element config, const std::string& config_path) {
  std::string cls = hf::Str(config, "tokenizer_class").value_or("");
  cls = std::string(absl::StripSuffix(cls, "Fast"));
  if (cls != "LlamaTokenizer" && cls != "GemmaTokenizer" && cls != "CodeLlamaTokenizer") {
    return absl::OkStatus();
  }
  t_.prefix_ids_.clear();
  t_.suffix_ids_.clear();
  auto special = [&](const char* key) -> std::optional<std::string> {
    for (const auto& [k, v] : t_.special_tokens_.named) {
      if (k == key) return v;
    }
    return std::nullopt;
  };
  for (auto [key, flag, fallback, ids] :
       {std::tuple{"bos_token", "add_bos_token", true, &t_.prefix_ids_},
        std::tuple{"eos_token", "add_eos_token", false, &t_.suffix_ids_}}) {
    if (!hf::Bool(config, flag, fallback)) continue;
    auto content = special(key);
    std::optional<uint32_t> id = content ? t_.TokenToId(*content) : std::nullopt;
    if (!id) {
      return absl::InvalidArgumentError(
          common::StrCat(config_path, ": ", flag, " is set but ", key, " is not a token"));
    }
    ids->push_back(*id);
  }
  return absl::OkStatus();
}

// A template outside the supported subset is not a load error: chat_template_status() says why.
void HfTokenizer::Loader::SetChatTemplate(const std::string& source) {
  if (source.empty()) {
    t_.template_status_ = absl::FailedPreconditionError("the model has no chat template");
    return;
  }
  auto tpl = ChatTemplate::Parse(source);
  if (tpl.ok()) {
    t_.template_ = *std::move(tpl);
  } else {
    t_.template_status_ = tpl.status();
  }
}

}  // namespace kvgate::tokenizer
