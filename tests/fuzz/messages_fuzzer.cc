// libFuzzer target: Anthropic Messages bodies through the canonicaliser and the converter to
// chat (tests/fuzz/agent_api_fuzz.h). Built and run by tests/fuzz/run_fuzzers.sh.
#include "tests/fuzz/agent_api_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return FuzzAgentApi(kvgate::kvindex::ApiKind::kMessages, data, size);
}
