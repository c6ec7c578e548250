// Shared by the prefix-reuse property tests: a body canonicalised with the cache must give what a
// full pass gives (status, fields, canonical bytes), and its block hashes, resumed from the
// previous turn's where it reused them, the full chain's.
#pragma once

#include <string>

#include "gtest/gtest.h"
#include "kvindex/block_hash.h"
#include "kvindex/block_memo.h"
#include "kvindex/canonicalize.h"

namespace kvgate::kvindex {

/// Adds 1 to `*resumed_hashes` when the block hashes resumed from an earlier turn's.
inline void ExpectSameAsFullPass(Canonicalizer& reusing, Canonicalizer& whole,
                                 const std::string& body, ApiKind api, const std::string& what,
                                 uint32_t block_bytes = 64, int* resumed_hashes = nullptr,
                                 int* borrowed = nullptr) {
  CanonicalRequest a, b;
  const absl::Status sa = reusing.Parse(body, 0, api, true, &a);
  const absl::Status sb = whole.Parse(body, 0, api, true, &b);
  ASSERT_EQ(sa, sb) << what;
  if (!sa.ok()) return;
  EXPECT_EQ(a.model, b.model) << what;
  EXPECT_EQ(a.stream, b.stream) << what;
  EXPECT_EQ(a.prompt_error, b.prompt_error) << what;
  EXPECT_EQ(a.metadata_user_id, b.metadata_user_id) << what;
  ASSERT_EQ(a.prompts.size(), b.prompts.size()) << what;
  for (size_t i = 0; i < a.prompts.size(); ++i) {
    const uint64_t ns = NamespaceSeed({a.model, "", a.cache_salt});
    HashOptions options;
    options.text_block_bytes = block_bytes;
    // The reusing side first: it keeps its chain for the next turn. And before Text(), whose
    // join would hide what hashing reads of a borrowed prompt.
    const std::vector<BlockHash> chain = HashPrompt(a.prompts[i], ns, options);
    ASSERT_TRUE(chain == HashPrompt(b.prompts[i], ns, options)) << what << ": block hashes differ";
    EXPECT_EQ(a.prompts[i].size(), b.prompts[i].bytes.size()) << what;
    ASSERT_TRUE(a.prompts[i].Text() == b.prompts[i].bytes)
        << what << ": canonical prompts differ (" << a.prompts[i].Text().size() << " vs "
        << b.prompts[i].bytes.size() << " bytes)";
    const CanonicalPrompt& p = a.prompts[i];
    if (borrowed != nullptr && p.borrowed != nullptr) ++*borrowed;
    if (resumed_hashes != nullptr && p.reused_blocks != nullptr && p.reused_bytes >= block_bytes &&
        !p.reused_blocks->Get(RootSeed(ns, p.kind), block_bytes).empty()) {
      ++*resumed_hashes;
    }
  }
}

}  // namespace kvgate::kvindex
