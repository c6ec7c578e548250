// libFuzzer target: the YAML config loader (every key, its validation and error messages).
// Any document: no crash, and a config it accepts passes ValidateConfig. Inputs naming a
// tokenizer are skipped: that key names files the operator chose, which the loader opens.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "router/config/loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  if (yaml.find("tokenizer") != std::string_view::npos) return 0;
  auto c = kvgate::config::LoadConfigFromString(yaml, "fuzz.yaml");
  if (c.ok() && !kvgate::config::ValidateConfig(*c).ok()) __builtin_trap();
  if (!c.ok() && c.status().message().empty()) __builtin_trap();  // every refusal says why
  return 0;
}
