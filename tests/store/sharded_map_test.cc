// The master's object map split in shards (store/sharded_map.h): the absl map's behaviour on
// the calls the master makes, and growth that rehashes one shard at a time.
#include "store/sharded_map.h"

#include <cstdint>
#include <map>
#include <string>

#include "gtest/gtest.h"

namespace kvgate::store {
namespace {

TEST(ShardedMapTest, BehavesAsOneMap) {
  ShardedMap<std::string, int, 16> m;
  std::map<std::string, int> model;  // what one map would hold
  EXPECT_EQ(m.begin(), m.end());
  for (int i = 0; i < 1000; ++i) {
    const std::string k = "key" + std::to_string(i * 7919 % 1000);
    auto [it, inserted] = m.try_emplace(k, i);
    EXPECT_EQ(inserted, model.emplace(k, i).second);
    EXPECT_EQ(it->first, k);
  }
  m["extra"] = -1;
  model["extra"] = -1;
  EXPECT_EQ(m.size(), model.size());
  EXPECT_EQ(m.find("absent"), m.end());
  ASSERT_NE(m.find("key5"), m.end());
  EXPECT_EQ(m.find("key5")->second, model["key5"]);

  // Erasing while walking, as the master drops a node's objects: every entry is visited once
  // and the odd ones go.
  std::map<std::string, int> seen;
  for (auto it = m.begin(); it != m.end();) {
    auto cur = it++;
    EXPECT_TRUE(seen.emplace(cur->first, cur->second).second) << cur->first;
    if (cur->second % 2 != 0) m.erase(cur);
  }
  EXPECT_EQ(seen, model);
  for (const auto& [k, v] : model) {
    EXPECT_EQ(m.find(k) != m.end(), v % 2 == 0) << k;
  }
  size_t walked = 0;
  const auto& cm = m;
  for (const auto& [k, v] : cm) {
    EXPECT_EQ(v % 2, 0);
    ++walked;
  }
  EXPECT_EQ(walked, m.size());
}

// A million keys in 256 shards: no shard holds more than a few times its share, so an insert
// never rehashes more than that (one absl map would rehash all million at its last doubling).
TEST(ShardedMapTest, GrowthRehashesOneShard) {
  ShardedMap<uint64_t, uint64_t> m;
  constexpr size_t kKeys = 1 << 20;
  for (uint64_t i = 0; i < kKeys; ++i) m[i * 0x9E3779B97F4A7C15ULL] = i;
  EXPECT_EQ(m.size(), kKeys);
  EXPECT_LE(m.max_shard_capacity(), 4 * kKeys / 256);
}

}  // namespace
}  // namespace kvgate::store
