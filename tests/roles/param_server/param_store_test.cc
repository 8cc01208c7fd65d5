// ParamStore: exact sums under concurrency, batched and dense application against plain loops,
// all-or-nothing validation.
#include "param_server/param_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <random>
#include <thread>

#include "model/layout.h"
#include "update/update_plan.h"

namespace adam::ps {
namespace {

using ::testing::HasSubstr;

TEST(ParamStore, HoldsOnlyItsShardsWithInitialValues) {
  auto map = shard::ShardMap::Make(1000, 400, 2, 3);
  ASSERT_TRUE(map.ok());
  std::vector<float> init(1000);
  for (size_t i = 0; i < init.size(); ++i) init[i] = float(i);
  ParamStore s0(*map, 0, init.data()), s1(*map, 1, init.data());
  EXPECT_EQ(s0.total_floats() + s1.total_floats(), 1000);
  for (const auto& sh : map->shards()) {
    ParamStore& mine = sh.server == 0 ? s0 : s1;
    ParamStore& other = sh.server == 0 ? s1 : s0;
    std::vector<float> out(size_t(sh.count));
    ASSERT_TRUE(mine.Read(sh.id, out.data(), sh.count).ok());
    EXPECT_EQ(out[0], float(sh.offset));
    EXPECT_EQ(other.Read(sh.id, out.data(), sh.count).status().code(), StatusCode::kNotFound);
  }
}

TEST(ParamStore, SetReplacesAShardAndItsVersionAfterEarlierUpdates) {
  auto map = shard::ShardMap::Make(100, 400, 1, 3);
  std::vector<float> init(100, 1.0f), delta(100, 2.0f), copy(100, 7.0f), out(100);
  ParamStore s(*map, 0, init.data());
  ASSERT_TRUE(s.Add(0, delta.data(), 100).ok());
  ShardMeta meta;
  meta.version = 42;
  auto set = s.SetState(0, copy.data(), 100, meta);
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(*set, SetResult::kApplied);
  EXPECT_EQ(s.Version(0), 42u);
  ASSERT_TRUE(s.Add(0, delta.data(), 100).ok());
  auto v = s.Read(0, out.data(), 100);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 43u);
  EXPECT_EQ(out[99], 9.0f);
  EXPECT_FALSE(s.SetState(0, copy.data(), 99, meta).ok());  // whole shards only
}

TEST(ParamStore, ConcurrentPushesSumExactly) {
  auto map = shard::ShardMap::Make(4096, 4096, 1, 1);  // 4 shards of 1024 floats
  ASSERT_TRUE(map.ok());
  std::vector<float> zeros(4096, 0.f);
  ParamStore store(*map, 0, zeros.data(), {.threads = 2});
  constexpr int kThreads = 8, kPushes = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::vector<float> delta(1024, 1.f);
      for (int i = 0; i < kPushes; ++i)
        ASSERT_TRUE(store.Add(uint32_t((t + i) % 4), delta.data(), 1024).ok());
    });
  for (auto& th : threads) th.join();
  double total = 0;
  uint64_t versions = 0;
  for (uint32_t id = 0; id < 4; ++id) {
    std::vector<float> out(1024);
    auto v = store.Read(id, out.data(), 1024);
    ASSERT_TRUE(v.ok());
    versions += *v;
    for (float x : out) total += x;
    for (float x : out) EXPECT_EQ(x, out[0]);  // every element of a shard got every push
  }
  EXPECT_EQ(versions, uint64_t(kThreads * kPushes));
  EXPECT_EQ(total, double(kThreads) * kPushes * 1024);
}

TEST(ParamStore, BatchedRangesMatchAPlainLoopAndReadsSeeEarlierUpdates) {
  // 20,000 floats in 3 shards (8192 + 8192 + 3616): ranges cross 16 KiB block edges.
  auto map = shard::ShardMap::Make(20000, 8192 * 4, 1, 1);
  ASSERT_TRUE(map.ok());
  std::vector<float> init(20000);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : init) x = u(rng);
  ParamStore store(*map, 0, init.data(), {.threads = 2});
  std::vector<float> want = init;
  // Many queued updates at once (so workers drain batches), then a read of each shard.
  std::vector<std::vector<float>> payloads;
  std::vector<Op> ops;
  for (int i = 0; i < 300; ++i) {
    const auto& sh = map->shards()[size_t(i % 3)];
    const int64_t off = int64_t(rng() % uint64_t(sh.count));
    const int64_t cnt = 1 + int64_t(rng() % uint64_t(sh.count - off));
    payloads.emplace_back(size_t(cnt));
    for (auto& x : payloads.back()) x = u(rng);
    for (int64_t k = 0; k < cnt; ++k)
      want[size_t(sh.offset + off + k)] += payloads.back()[size_t(k)];
    Op op;
    op.shard = sh.id;
    op.offset = off;
    op.count = cnt;
    ASSERT_TRUE(store.CheckRange(sh.id, off, cnt).ok());
    ops.push_back(op);
  }
  std::promise<void> applied;
  Completion done(int(ops.size()), [&] { applied.set_value(); });
  for (size_t i = 0; i < ops.size(); ++i) {
    ops[i].values = payloads[i].data();
    ops[i].done = &done;
  }
  store.Submit(ops.data(), ops.size());
  // A read queued right after sees every update queued before it, without waiting first.
  std::vector<float> out(8192);
  auto v = store.Read(0, out.data(), 8192);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 100u);
  applied.get_future().wait();
  for (const auto& sh : map->shards()) {
    std::vector<float> got(size_t(sh.count));
    ASSERT_TRUE(store.Read(sh.id, got.data(), sh.count).ok());
    for (int64_t k = 0; k < sh.count; ++k)
      ASSERT_NEAR(got[size_t(k)], want[size_t(sh.offset + k)], 1e-4) << sh.id << " " << k;
  }
}

TEST(ParamStore, RejectsRangesOutsideTheShard) {
  auto map = shard::ShardMap::Make(100, 400, 1, 1);
  ASSERT_TRUE(map.ok());
  std::vector<float> init(100, 0.f), delta(99, 1.f);
  ParamStore store(*map, 0, init.data());
  Status st = store.Add(0, delta.data(), 99);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("shard 0: delta has 99 floats, shard has 100"));
  st = store.CheckRange(0, 90, 11);
  EXPECT_THAT(st.message(), HasSubstr("shard 0: floats [90, 101) are outside the shard's 100"));
  EXPECT_EQ(store.CheckRange(3, 0, 1).code(), StatusCode::kNotFound);
  EXPECT_TRUE(store.CheckRange(0, 90, 10).ok());
}

TEST(ApplyDense, MatchesTheOuterProductOnAShardCutMidRow) {
  // A 5 x 7 layer at offset 3, bias at 38; the shard covers [10, 40): rows 1..4 (row 1 partial)
  // and the bias of units 0 and 1.
  update::DenseLayer L{0, 7, 5, 3, 38};
  const int images = 3;
  std::vector<int32_t> rows = {0, 1, 2, 3, 4};
  std::vector<float> a(images * 7), e(images * 5);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : a) x = u(rng);
  for (auto& x : e) x = u(rng);
  std::vector<float> model(50);
  for (auto& x : model) x = u(rng);
  std::vector<float> want = model;
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 7; ++c)
      for (int k = 0; k < images; ++k)
        want[size_t(3 + r * 7 + c)] += e[size_t(k * 5 + r)] * a[size_t(k * 7 + c)];
  for (int r = 0; r < 5; ++r)
    for (int k = 0; k < images; ++k) want[size_t(38 + r)] += e[size_t(k * 5 + r)];
  std::vector<float> shard(model.begin() + 10, model.begin() + 40);
  ApplyDense(shard.data(), 10, 30, {&L, rows.data(), 5, images, a.data(), e.data()});
  for (int i = 0; i < 30; ++i) EXPECT_NEAR(shard[size_t(i)], want[size_t(10 + i)], 1e-5) << i;
}

// A small dense model: 1x4x4 input, dense 6, softmax 3 (6*16+6 + 3*6+3 = 123 parameters).

}  // namespace
}  // namespace adam::ps
