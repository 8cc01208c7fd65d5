// Thousands of seeded simulations of Raft groups under faults (see sim.h). A failing seed prints
// the command that replays it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "libs/raft/sim.h"

namespace adam::raft::sim {
namespace {

// Seeds per shard of the parameterized test; RAFT_SIM_SEEDS overrides the total.
constexpr int kShards = 10;
int SeedsPerShard() {
  if (const char* s = std::getenv("RAFT_SIM_SEEDS")) return std::max(1, std::atoi(s) / kShards);
  return 200;
}

struct Outcome {
  std::string failure;
  size_t committed = 0;
  size_t leaders = 0;
  uint64_t reads = 0;
};

Outcome RunSeed(uint64_t seed) {
  // The seed picks the group size and the fault mix.
  const int nodes = seed % 3 == 0 ? 5 : 3;
  Faults f;
  f.drop = 0.02 * static_cast<double>(seed % 6);  // 0..10% loss
  f.duplicate = 0.05;
  f.max_delay = 1 + static_cast<int>(seed % 7);  // up to 7 ticks: reordering
  f.partition = seed % 4 == 1 ? 0.0 : 0.008;
  f.crash = seed % 5 == 2 ? 0.0 : 0.012;
  f.compact = 0.01;
  Sim sim(seed, nodes, f);
  for (int t = 0; t < 1500 && sim.ok(); ++t) sim.Step();
  Outcome o;
  if (sim.ok() && !sim.Converge(3000) && sim.ok())
    o.failure = "no progress after the faults stopped (liveness)";
  if (!sim.ok()) o.failure = sim.failure();
  o.committed = sim.committed();
  o.leaders = sim.leaders_seen();
  o.reads = sim.reads_answered();
  return o;
}

std::string Replay(uint64_t seed) {
  return "replay: RAFT_SIM_SEED=" + std::to_string(seed) +
         " build/tests/raft_sim_test --gtest_filter=RaftSim.Replay";
}

class RaftSim : public ::testing::TestWithParam<int> {};

TEST_P(RaftSim, SafeAndLiveUnderFaults) {
  const int per = SeedsPerShard();
  size_t committed = 0, leaders = 0;
  uint64_t reads = 0;
  for (int i = 0; i < per; ++i) {
    const uint64_t seed = static_cast<uint64_t>(GetParam() * per + i + 1);
    const Outcome o = RunSeed(seed);
    ASSERT_TRUE(o.failure.empty()) << "seed " << seed << ": " << o.failure << "\n" << Replay(seed);
    committed += o.committed;
    leaders += o.leaders;
    reads += o.reads;
  }
  // The faults must not starve the runs: they elect leaders, commit and answer reads.
  EXPECT_GT(committed, static_cast<size_t>(per) * 50);
  EXPECT_GT(leaders, static_cast<size_t>(per) * 2);
  EXPECT_GT(reads, static_cast<uint64_t>(per));
}

INSTANTIATE_TEST_SUITE_P(Seeds, RaftSim, ::testing::Range(0, kShards));

TEST(RaftSim, Replay) {
  const char* s = std::getenv("RAFT_SIM_SEED");
  if (s == nullptr) GTEST_SKIP() << "set RAFT_SIM_SEED to replay one seed";
  const uint64_t seed = std::strtoull(s, nullptr, 10);
  const Outcome o = RunSeed(seed);
  EXPECT_TRUE(o.failure.empty()) << "seed " << seed << ": " << o.failure;
  std::printf("seed %llu: %zu committed, %zu leaders, %llu reads\n",
              static_cast<unsigned long long>(seed), o.committed, o.leaders,
              static_cast<unsigned long long>(o.reads));
}

}  // namespace
}  // namespace adam::raft::sim
