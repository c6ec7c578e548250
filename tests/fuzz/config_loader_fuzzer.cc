// libFuzzer target: the YAML config parser (every key, its validation and error messages).
// Any document: no crash, and a config it accepts passes ValidateConfig. Parsing does no I/O
// (files and tokenizers a document names are read by ResolveConfig, not fuzzed), so every
// input is taken, tokenizer names included.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "router/config/loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  auto c = kvgate::config::ParseConfig(yaml, "fuzz.yaml");
  if (c.ok() && !kvgate::config::ValidateConfig(c->config).ok()) __builtin_trap();
  if (!c.ok() && c.status().message().empty()) __builtin_trap();  // every refusal says why
  return 0;
}
