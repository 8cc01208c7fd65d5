// Shard cutting and assignment.
#include "shard/shard_map.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

namespace adam::shard {
namespace {

TEST(ShardMap, CoversEveryParameterOnceInOrder) {
  auto map = ShardMap::Make(298090, 1 << 16, 3, 1);
  ASSERT_TRUE(map.ok());
  int64_t next = 0;
  for (const auto& s : map->shards()) {
    EXPECT_EQ(s.offset, next);
    EXPECT_GT(s.count, 0);
    EXPECT_LE(s.count, (1 << 16) / 4);
    next += s.count;
  }
  EXPECT_EQ(next, 298090);
  EXPECT_EQ(map->shards().size(), size_t((298090 + 16383) / 16384));
}

TEST(ShardMap, SpreadsShardsEvenlyAcrossServers) {
  for (int servers : {1, 2, 3, 7}) {
    auto map = ShardMap::Make(1000003, 4096, servers, 42);
    ASSERT_TRUE(map.ok());
    std::map<int, int> count;
    for (const auto& s : map->shards()) count[s.server]++;
    EXPECT_EQ(int(count.size()), servers);
    const auto [lo, hi] = std::minmax_element(count.begin(), count.end(),
                                              [](auto& a, auto& b) { return a.second < b.second; });
    EXPECT_LE(hi->second - lo->second, 1) << servers << " servers";
  }
}

TEST(ShardMap, IsDeterministicAndDependsOnSalt) {
  auto a = ShardMap::Make(100000, 1024, 4, 7), b = ShardMap::Make(100000, 1024, 4, 7),
       c = ShardMap::Make(100000, 1024, 4, 8);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  bool differs = false;
  for (size_t i = 0; i < a->shards().size(); ++i) {
    EXPECT_EQ(a->shards()[i].server, b->shards()[i].server);
    differs |= a->shards()[i].server != c->shards()[i].server;
  }
  EXPECT_TRUE(differs);
  size_t held = 0;
  for (int s = 0; s < 4; ++s) held += a->ShardsOf(s).size();
  EXPECT_EQ(held, a->shards().size());
}

TEST(ShardMap, RejectsBadInput) {
  EXPECT_FALSE(ShardMap::Make(0, 1024, 1, 0).ok());
  EXPECT_FALSE(ShardMap::Make(10, 6, 1, 0).ok());
  EXPECT_FALSE(ShardMap::Make(10, 8, 0, 0).ok());
}

}  // namespace
}  // namespace adam::shard

namespace adam::shard {
namespace {

TEST(ShardMapCopies, InitialCopiesStartAtTheServerAndAreDistinct) {
  auto m = *ShardMap::Make(1000, 40, 3, 5);
  for (const auto& s : m.shards()) {
    auto c = m.InitialCopies(s.id, 3);
    ASSERT_EQ(c.size(), 3u);
    EXPECT_EQ(c[0], s.server);
    EXPECT_EQ(std::set<int>(c.begin(), c.end()).size(), 3u);
  }
  EXPECT_EQ(m.InitialCopies(0, 5).size(), 3u);  // never more copies than servers
}

TEST(ShardMapCopies, WithServersKeepsTheCutAndChecksEveryEntry) {
  auto m = *ShardMap::Make(1000, 40, 3, 5);
  std::vector<int> all_on_2(m.shards().size(), 2);
  auto r = m.WithServers(all_on_2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ShardsOf(2).size(), m.shards().size());
  EXPECT_EQ(r->shards()[3].offset, m.shards()[3].offset);
  all_on_2[1] = 3;
  EXPECT_NE(m.WithServers(all_on_2).status().message().find("shard 1 on server 3"),
            std::string::npos);
  EXPECT_FALSE(m.WithServers({1, 2}).ok());
  // Over more servers (servers joined the job): server 3 is in range then.
  auto grown = m.WithServers(std::vector<int>(m.shards().size(), 3), 4);
  ASSERT_TRUE(grown.ok());
  EXPECT_EQ(grown->num_servers(), 4);
  EXPECT_EQ(grown->shards()[0].server, 3);
}

}  // namespace
}  // namespace adam::shard
