// The tokenizer fuzz target (tests/fuzz/tokenizer_fuzzer.cc, linked into this binary) over its
// seed corpus: the gcc ASan/UBSan pass of `make test` replays the seeds; the fuzzing itself
// needs clang (tests/fuzz/run_fuzzers.sh).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

TEST(TokenizerFuzzSeedsTest, ReplaysTheSeedCorpus) {
  const std::filesystem::path dir =
      std::filesystem::path(KVGATE_TEST_SOURCE_DIR) / "tests/fuzz/corpus/tokenizer";
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size()), 0)
        << e.path();
    ++n;
  }
  EXPECT_GE(n, 3u);
}

}  // namespace
