#include "controller/shard_state.h"

#include <gtest/gtest.h>

#include <set>

#include "testing/controller_states.h"

namespace adam::controller {
namespace {

using testing::Bootstrapped;
using testing::Registered;

std::set<uint32_t> Holders(const v1::ShardRecord& r) {
  std::set<uint32_t> s(r.replicas().begin(), r.replicas().end());
  s.insert(r.copying().begin(), r.copying().end());
  return s;
}

TEST(ShardState, BootstrapPutsEveryCopyOnADifferentServerAndBalancesPrimaries) {
  const v1::ControllerState s = Bootstrapped(4, 40, 3);
  ASSERT_EQ(s.shards_size(), 40);
  std::vector<int> primaries(4);
  for (const auto& r : s.shards()) {
    ASSERT_EQ(r.replicas_size(), 3);
    EXPECT_EQ(Holders(r).size(), 3u);
    ++primaries[r.replicas(0)];
  }
  for (int p : primaries) EXPECT_EQ(p, 10);
  EXPECT_EQ(Bootstrapped(2, 4, 3).copies(), 2u);  // never more copies than servers
}

TEST(ShardState, RegistrationMarksAliveAndRepeatsChangeNothing) {
  ShardState st = Registered(3, 6, 3);
  const uint64_t v = st.state().version();
  EXPECT_TRUE(st.state().servers(1).alive());
  v1::Command again;
  again.mutable_register_()->set_id(1);
  again.mutable_register_()->set_address("ps-1");
  ASSERT_TRUE(st.Apply(again).ok());
  EXPECT_EQ(st.state().version(), v);
  v1::Command unknown;
  unknown.mutable_register_()->set_id(9);
  EXPECT_NE(st.Apply(unknown).message().find("server 9 is not in the job"), std::string::npos);
}

TEST(ShardState, FailoverPromotesTheFreshestCopyAndRebuildsTheThirdElsewhere) {
  ShardState st = Registered(4, 12, 3);
  const v1::ControllerState& s = st.state();
  CopyVersions versions;
  for (const auto& r : s.shards())
    for (int i = 0; i < r.replicas_size(); ++i)
      versions[{r.shard(), r.replicas(i)}] = 100 + uint64_t(i);  // the last secondary is freshest
  auto plan = PlanFailover(s, {0}, versions);
  ASSERT_TRUE(plan.has_value());
  const v1::ControllerState before = s;
  v1::Command c;
  *c.mutable_reassign() = *plan;
  ASSERT_TRUE(st.Apply(c).ok());
  EXPECT_FALSE(st.state().servers(0).alive());
  EXPECT_EQ(st.state().version(), before.version() + 1);
  int promoted = 0;
  for (const auto& r : st.state().shards()) {
    const auto& old = before.shards(int(r.shard()));
    EXPECT_EQ(Holders(r).count(0), 0u);
    EXPECT_EQ(Holders(r).size(), 3u) << "shard " << r.shard();
    if (old.replicas(0) == 0) {
      ++promoted;
      EXPECT_EQ(r.replicas(0), old.replicas(2));  // the freshest survivor
      EXPECT_EQ(r.copying_size(), 1);
    } else if (Holders(old).count(0)) {
      EXPECT_EQ(r.replicas(0), old.replicas(0));  // primary unchanged
    }
  }
  EXPECT_GT(promoted, 0);
  // A plan made against an older version is refused.
  EXPECT_FALSE(st.Apply(c).ok());
}

// Two failures within one recovery: the primary lost, the freshest copy promoted, and that one
// lost too before its first forward reached the third copy, which may lack a push the first
// primary acknowledged with the second. The third copy alone is not promoted: the shard waits
// for the second to come back. Once it has taken the promoted copy's state (its term reaches
// the promotion), it may be.
TEST(ShardState, ACopyPromotedAMomentAgoIsNotSucceededByOneWithoutItsState) {
  ShardState st = Registered(3, 1, 3);
  const v1::ShardRecord first = st.state().shards(0);
  const uint32_t p = first.replicas(0), a = first.replicas(1), b = first.replicas(2);
  EXPECT_EQ(first.primary_since(), 0u);
  CopyVersions versions = {{{0, a}, 7}, {{0, b}, 5}};  // b lags: a holds a push b lacks
  CopyTerms terms = {{{0, a}, 0}, {{0, b}, 0}};
  auto plan = PlanFailover(st.state(), {p}, versions, {}, terms);
  ASSERT_TRUE(plan.has_value());
  v1::Command c;
  *c.mutable_reassign() = *plan;
  ASSERT_TRUE(st.Apply(c).ok());
  const v1::ShardRecord promoted = st.state().shards(0);
  ASSERT_EQ(promoted.replicas_size(), 2);
  EXPECT_EQ(promoted.replicas(0), a);
  EXPECT_EQ(promoted.primary_since(), st.state().version());  // the plan's own map version
  EXPECT_FALSE(HoldsAcknowledged(promoted, b, terms));

  // a is lost before forwarding to b: b (R = 2, so one survivor would do by count) must wait.
  auto second = PlanFailover(st.state(), {a}, versions, {}, terms);
  ASSERT_TRUE(second.has_value());
  EXPECT_NE(second->reason().find("wait for them to come back"), std::string::npos);
  ASSERT_EQ(second->shards(0).replicas_size(), 2);
  EXPECT_EQ(second->shards(0).replicas(0), a);  // the lost primary first: it serves when back
  // And PlanRepair does not serve it by b alone either.
  ShardState waiting = st;
  *c.mutable_reassign() = *second;
  ASSERT_TRUE(waiting.Apply(c).ok());
  auto repair = PlanRepair(waiting.state(), {}, true, versions, terms);
  EXPECT_TRUE(!repair.has_value() || repair->shards(0).replicas(0) != b);

  // Had b taken a's state (a forward in a's term), b would have been promoted at once.
  terms[{0, b}] = promoted.primary_since() + 1;  // a's term: the map version it first saw
  auto later = PlanFailover(st.state(), {a}, versions, {}, terms);
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(later->shards(0).replicas(0), b);
  EXPECT_EQ(later->reason(), "servers stopped heartbeating");
  // ... and so is the waiting shard, once b holds it: by PlanRepair.
  auto served = PlanRepair(waiting.state(), {}, true, versions, terms);
  ASSERT_TRUE(served.has_value());
  EXPECT_EQ(served->shards(0).replicas(0), b);
  EXPECT_EQ(served->shards(0).primary_since(), waiting.state().version() + 1);
}

TEST(ShardState, NewCopiesAvoidHostsThatAlreadyHoldTheShard) {
  // Servers 0 and 3 share host "a" (labels arrive with registration, after the bootstrap).
  ShardState st = Registered(5, 20, 3, {"a", "b", "c", "a", "d"});
  auto plan = PlanFailover(st.state(), {1}, {});
  ASSERT_TRUE(plan.has_value());
  v1::Command c;
  *c.mutable_reassign() = *plan;
  ASSERT_TRUE(st.Apply(c).ok());
  int rebuilt = 0;
  for (const auto& r : st.state().shards()) {
    std::set<std::string> hosts;
    for (uint32_t id : r.replicas()) hosts.insert(st.state().servers(int(id)).host());
    for (uint32_t id : r.copying()) {
      ++rebuilt;
      EXPECT_EQ(hosts.count(st.state().servers(int(id)).host()), 0u) << "shard " << r.shard();
    }
  }
  EXPECT_GT(rebuilt, 0);
}

TEST(ShardState, CopyDoneMakesTheCopyInSyncAndSurvivesASnapshot) {
  ShardState st = Registered(4, 8, 3);
  auto plan = PlanFailover(st.state(), {2}, {});
  v1::Command c;
  *c.mutable_reassign() = *plan;
  ASSERT_TRUE(st.Apply(c).ok());
  const v1::ShardRecord* copying = nullptr;
  for (const auto& r : st.state().shards())
    if (r.copying_size() > 0) copying = &r;
  ASSERT_NE(copying, nullptr);
  const uint32_t shard = copying->shard(), server = copying->copying(0);
  v1::Command done;
  done.mutable_copy_done()->set_shard(shard);
  done.mutable_copy_done()->set_server(server);
  done.mutable_copy_done()->set_expected_version(st.state().version());
  ASSERT_TRUE(st.Apply(done).ok());
  const auto& r = st.state().shards(int(shard));
  EXPECT_EQ(r.copying_size(), 0);
  EXPECT_EQ(r.replicas(r.replicas_size() - 1), server);
  ShardState restored;
  ASSERT_TRUE(restored.Restore(st.Serialize()).ok());
  EXPECT_EQ(restored.state().SerializeAsString(), st.state().SerializeAsString());
  EXPECT_EQ(restored.Restore("\xff\xff garbage").code(), StatusCode::kDataLoss);
}

TEST(ShardState, WithoutASpareServerAShardStaysUnderReplicatedUntilRepair) {
  ShardState st = Registered(3, 6, 3);
  auto plan = PlanFailover(st.state(), {1}, {});
  v1::Command c;
  *c.mutable_reassign() = *plan;
  ASSERT_TRUE(st.Apply(c).ok());
  for (const auto& r : st.state().shards()) EXPECT_EQ(Holders(r).size(), 2u);
  EXPECT_FALSE(PlanRepair(st.state()).has_value());
  // Server 1 comes back: repair adds the third copies on it.
  v1::Command back;
  back.mutable_register_()->set_id(1);
  back.mutable_register_()->set_address("ps-1b");
  ASSERT_TRUE(st.Apply(back).ok());
  auto repair = PlanRepair(st.state());
  ASSERT_TRUE(repair.has_value());
  EXPECT_EQ(repair->shards_size(), 6);
  for (const auto& r : repair->shards()) EXPECT_EQ(r.copying(0), 1u);
}

// Every server lost at once (the whole job restarted): no shard is left without its copies; a
// shard is served again once its freshest copy is back, or two of its three copies are, and the
// copies still away are rebuilt elsewhere; none is served by a dead server.
TEST(ShardState, AShardThatLostEveryCopyWaitsForItsCopiesToComeBack) {
  ShardState st = Registered(3, 6, 3);
  CopyVersions versions;
  for (const auto& r : st.state().shards())
    for (int i = 0; i < r.replicas_size(); ++i)
      versions[{r.shard(), r.replicas(i)}] = 100 + uint64_t(i);  // the last copy is freshest
  const v1::ControllerState before = st.state();
  auto plan = PlanFailover(before, {0, 1, 2}, versions);
  ASSERT_TRUE(plan.has_value());
  EXPECT_NE(plan->reason().find("6 shard(s) lost too many copies"), std::string::npos)
      << plan->reason();
  v1::Command c;
  *c.mutable_reassign() = *plan;
  ASSERT_TRUE(st.Apply(c).ok());
  for (const auto& r : st.state().shards()) {
    const auto& old = before.shards(int(r.shard()));
    ASSERT_EQ(r.replicas_size(), 3) << "shard " << r.shard();
    EXPECT_EQ(r.replicas(0), old.replicas(2));  // the freshest first
    EXPECT_EQ(Holders(r), Holders(old));
  }
  EXPECT_FALSE(PlanRepair(st.state()).has_value());  // nobody back: nothing to do
  // Server 1 comes back (a new process that restored its checkpoint).
  v1::Command back;
  back.mutable_register_()->set_id(1);
  back.mutable_register_()->set_address("ps-1b");
  back.mutable_register_()->set_incarnation(7);
  ASSERT_TRUE(st.Apply(back).ok());
  // Not yet, while the leader waits for the others (it has just started leading).
  EXPECT_FALSE(PlanRepair(st.state(), {}, /*drop_dead=*/false).has_value());
  auto repair = PlanRepair(st.state());
  ASSERT_TRUE(repair.has_value());
  *c.mutable_reassign() = *repair;
  ASSERT_TRUE(st.Apply(c).ok());
  int served = 0;
  for (const auto& r : st.state().shards()) {
    const auto& old = before.shards(int(r.shard()));
    if (old.replicas(2) == 1u) {  // its freshest copy is back: it serves alone
      ASSERT_EQ(r.replicas_size(), 1) << "shard " << r.shard();
      EXPECT_EQ(r.replicas(0), 1u);
      EXPECT_EQ(r.copying_size(), 0);  // no other server alive to copy to yet
      ++served;
    } else {  // one of three back, not the freshest: it waits
      EXPECT_EQ(r.replicas_size(), 3) << "shard " << r.shard();
      EXPECT_NE(r.replicas(0), 1u);
    }
  }
  EXPECT_GT(served, 0);
  EXPECT_LT(served, 6);
  // The others come back: every shard is served by its freshest copy, and the copies that were
  // dropped are filled again as new copies.
  for (uint32_t id : {0u, 2u}) {
    back.mutable_register_()->set_id(id);
    back.mutable_register_()->set_address("ps-" + std::to_string(id) + "b");
    ASSERT_TRUE(st.Apply(back).ok());
  }
  for (int round = 0; round < 2; ++round) {
    repair = PlanRepair(st.state());
    if (!repair) break;
    *c.mutable_reassign() = *repair;
    ASSERT_TRUE(st.Apply(c).ok());
  }
  for (const auto& r : st.state().shards()) {
    EXPECT_EQ(r.replicas(0), before.shards(int(r.shard())).replicas(2));
    EXPECT_EQ(Holders(r).size(), 3u);
  }
}

// Two of a shard's three copies stall at once, the primary among them: the survivor may lack a
// push the other two acknowledged, so it does not serve alone. The shard keeps its copies and
// is served again once the primary or one more copy is back. A shard whose primary survived is
// served by it (it holds every acknowledged push).
TEST(ShardState, APrimaryLostWithAMajorityOfItsCopiesWaitsForOneOfThem) {
  ShardState st = Registered(3, 6, 3);
  const v1::ControllerState before = st.state();
  CopyVersions versions;
  for (const auto& r : before.shards())
    for (uint32_t id : r.replicas()) versions[{r.shard(), id}] = id == 2 ? 999 : 1;  // 2 "fresh"
  auto plan = PlanFailover(before, {0, 1}, versions);
  ASSERT_TRUE(plan.has_value());
  v1::Command c;
  *c.mutable_reassign() = *plan;
  ASSERT_TRUE(st.Apply(c).ok());
  int waiting = 0;
  for (const auto& r : st.state().shards()) {
    const auto& old = before.shards(int(r.shard()));
    if (old.replicas(0) == 2u) {
      ASSERT_EQ(r.replicas_size(), 1) << "shard " << r.shard();
      EXPECT_EQ(r.replicas(0), 2u);
    } else {
      EXPECT_EQ(std::vector<uint32_t>(r.replicas().begin(), r.replicas().end()),
                std::vector<uint32_t>(old.replicas().begin(), old.replicas().end()))
          << "shard " << r.shard();  // the dead primary first
      ++waiting;
    }
  }
  EXPECT_GT(waiting, 0);
  // Nobody back: the waiting shards stay as they are.
  auto repair = PlanRepair(st.state());
  if (repair) {
    for (const auto& r : repair->shards()) {
      EXPECT_NE(r.replicas(0), 2u) << "shard " << r.shard() << " served by the lone survivor";
    }
  }
  // Server 1 is back (its heartbeats went through again): two of three copies are there.
  v1::Command back;
  back.mutable_register_()->set_id(1);
  back.mutable_register_()->set_address("ps-1");
  ASSERT_TRUE(st.Apply(back).ok());
  repair = PlanRepair(st.state());
  ASSERT_TRUE(repair.has_value());
  *c.mutable_reassign() = *repair;
  ASSERT_TRUE(st.Apply(c).ok());
  for (const auto& r : st.state().shards()) {
    const auto& old = before.shards(int(r.shard()));
    if (old.replicas(0) == 2u) continue;
    // Served by those back, in their order: 1 and 2; 0 is dropped and filled again later.
    std::vector<uint32_t> want;
    for (uint32_t id : old.replicas())
      if (id != 0u) want.push_back(id);
    EXPECT_EQ(std::vector<uint32_t>(r.replicas().begin(), r.replicas().end()), want)
        << "shard " << r.shard();
  }
}

}  // namespace

// A job starting: the servers register one by one. One that has not registered yet is not dead:
// the first to register does not take every shard.
TEST(ShardState, ServersNotYetRegisteredKeepTheirCopies) {
  ShardState st;
  v1::Command c;
  *c.mutable_bootstrap() = Bootstrapped(3, 6, 3);
  ASSERT_TRUE(st.Apply(c).ok());
  v1::Command r;
  r.mutable_register_()->set_id(0);
  r.mutable_register_()->set_address("ps-0");
  ASSERT_TRUE(st.Apply(r).ok());
  EXPECT_FALSE(PlanRepair(st.state()).has_value());
}

// A server back from the dead gets no new copy while on probation, neither from repair nor from a
// failover that needs a new home for copies; once off probation it does.
TEST(ShardState, NoNewCopyGoesToAServerOnProbation) {
  ShardState st = Registered(4, 12, 3);
  auto plan = PlanFailover(st.state(), {1}, {});
  v1::Command c;
  *c.mutable_reassign() = *plan;
  ASSERT_TRUE(st.Apply(c).ok());
  v1::Command back;
  back.mutable_register_()->set_id(1);
  back.mutable_register_()->set_address("ps-1");
  ASSERT_TRUE(st.Apply(back).ok());
  // Copies placed on 0, 2, 3 by the first failover; server 2 now dies with 1 on probation.
  auto again = PlanFailover(st.state(), {2}, {}, {1});
  ASSERT_TRUE(again.has_value());
  for (const auto& r : again->shards()) EXPECT_EQ(Holders(r).count(1), 0u) << "shard " << r.shard();
  *c.mutable_reassign() = *again;
  ASSERT_TRUE(st.Apply(c).ok());
  EXPECT_FALSE(PlanRepair(st.state(), {1}).has_value());
  auto repair = PlanRepair(st.state());
  ASSERT_TRUE(repair.has_value());
  int on_one = 0;
  for (const auto& r : repair->shards()) on_one += int(Holders(r).count(1));
  EXPECT_GT(on_one, 0);
}

// A registration under a new incarnation (the process restarted) is recorded, not a repeat.
TEST(ShardState, ANewIncarnationIsRecorded) {
  ShardState st = Registered(3, 6, 3);
  v1::Command r;
  r.mutable_register_()->set_id(1);
  r.mutable_register_()->set_address("ps-1");
  r.mutable_register_()->set_incarnation(7);
  const uint64_t v = st.state().version();
  ASSERT_TRUE(st.Apply(r).ok());
  EXPECT_EQ(st.state().version(), v + 1);
  EXPECT_EQ(st.state().servers(1).incarnation(), 7u);
  ASSERT_TRUE(st.Apply(r).ok());
  EXPECT_EQ(st.state().version(), v + 1);
}

}  // namespace adam::controller
