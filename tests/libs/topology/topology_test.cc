// Thread placement on hwloc synthetic topologies, and binding on the real machine.
#include "topology/topology.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <map>
#include <set>
#include <thread>

namespace adam::topology {
namespace {

TEST(Topology, SyntheticTwoPackagesTwoNumaNodesEach) {
  auto t = Topology::Synthetic("pack:2 numa:2 core:4 pu:2");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->num_numa_nodes(), 4);
  ASSERT_EQ(t->cores().size(), 16u);
  std::set<int> pus;
  for (const auto& c : t->cores()) pus.insert(c.pu);
  EXPECT_EQ(pus.size(), 16u);  // one hardware thread per core, never two of one core
  EXPECT_EQ(t->cores()[0].numa_node, 0);
  EXPECT_EQ(t->cores()[15].numa_node, 3);
}

std::map<int, int> PerNode(const std::vector<Placement>& ps) {
  std::map<int, int> n;
  for (const auto& p : ps) n[p.core.numa_node]++;
  return n;
}

TEST(Topology, SpreadsThreadsEvenlyOverNodesAndCores) {
  auto t = Topology::Synthetic("pack:2 numa:2 core:4 pu:1");
  ASSERT_TRUE(t.ok());
  for (int threads : {1, 3, 4, 8, 16}) {
    auto ps = t->PlaceThreads(threads);
    ASSERT_EQ(int(ps.size()), threads);
    std::set<int> pus;
    for (const auto& p : ps) pus.insert(p.core.pu);
    EXPECT_EQ(int(pus.size()), threads) << "two threads share a core with cores to spare";
    auto n = PerNode(ps);
    int lo = threads, hi = 0;
    for (int node = 0; node < 4; ++node) lo = std::min(lo, n[node]), hi = std::max(hi, n[node]);
    EXPECT_LE(hi - lo, 1) << threads << " threads";
  }
  auto over = t->PlaceThreads(20);  // more threads than cores: wrap, still balanced
  ASSERT_EQ(over.size(), 20u);
  for (const auto& [node, count] : PerNode(over)) EXPECT_EQ(count, 5) << node;
}

TEST(Topology, UnevenNodesGetThreadsInProportion) {
  auto t = Topology::Synthetic("numa:2 core:6 pu:1");
  ASSERT_TRUE(t.ok());
  auto n = PerNode(t->PlaceThreads(6));
  EXPECT_EQ(n[0], 3);
  EXPECT_EQ(n[1], 3);
}

// Pinning only where the cpuset is the pod's own: as many CPUs as its whole-CPU limit.
TEST(Pinning, OnlyWhenTheAllowedCpusAreThePodsOwn) {
  EXPECT_TRUE(DecidePinning(4, 4000).pin);      // the static CPU manager's 4 exclusive cores
  EXPECT_TRUE(DecidePinning(8, 0).pin);         // not on Kubernetes: the launcher's own cores
  const auto shared = DecidePinning(16, 4000);  // every core of the node: shared with other pods
  EXPECT_FALSE(shared.pin);
  EXPECT_NE(shared.why.find("16 CPUs but the CPU limit is 4"), std::string::npos) << shared.why;
  const auto fraction = DecidePinning(16, 3500);
  EXPECT_FALSE(fraction.pin);
  EXPECT_NE(fraction.why.find("3500m is not whole CPUs"), std::string::npos) << fraction.why;
}

TEST(Topology, RejectsBadSyntheticDescription) {
  EXPECT_FALSE(Topology::Synthetic("pack:banana").ok());
}

TEST(Topology, SyntheticCannotBind) {
  auto t = Topology::Synthetic("core:2 pu:1");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->BindThisThread(t->PlaceThreads(1)[0]).ok());
}

TEST(Topology, BindsAThreadToItsCoreOnThisMachine) {
  auto t = Topology::Discover();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_FALSE(t->cores().empty());
  const Placement p = t->PlaceThreads(int(t->cores().size())).back();
  int cpu = -1;
  Status st;
  std::thread th([&] {
    st = t->BindThisThread(p);
    cpu = sched_getcpu();
  });
  th.join();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(cpu, p.core.pu);
}

}  // namespace
}  // namespace adam::topology
