// Elastic parameter servers in the controller's state machine: Resize, and PlanRebalance driven to
// the end the way the servers would (every copy being filled reports in sync after each step).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "controller/shard_state.h"
#include "testing/controller_states.h"

namespace adam::controller {
namespace {

// Every server registered (testing/controller_states.h).
ShardState Started(int servers, int shards, int copies, std::vector<std::string> hosts = {}) {
  return testing::Registered(servers, shards, copies, std::move(hosts));
}

Status Resize(ShardState* st, int servers) {
  v1::Command c;
  c.mutable_resize()->set_servers(uint32_t(servers));
  return st->Apply(c);
}

void Register(ShardState* st, int id, const std::string& host = "") {
  v1::Command r;
  r.mutable_register_()->set_id(uint32_t(id));
  r.mutable_register_()->set_address("ps-" + std::to_string(id));
  r.mutable_register_()->set_host(host);
  ASSERT_TRUE(st->Apply(r).ok());
}

// Copies (in sync and being filled) and primaries per server.
std::map<uint32_t, int> Copies(const v1::ControllerState& s) {
  std::map<uint32_t, int> n;
  for (const auto& r : s.shards()) {
    for (uint32_t id : r.replicas()) ++n[id];
    for (uint32_t id : r.copying()) ++n[id];
  }
  return n;
}
std::map<uint32_t, int> Primaries(const v1::ControllerState& s) {
  std::map<uint32_t, int> n;
  for (const auto& r : s.shards()) ++n[r.replicas(0)];
  return n;
}

struct Drive {
  int steps = 0;
  int moves = 0;     // copies that started to move
  int handoffs = 0;  // primaries that changed
  int most_filling = 0;
};

// Applies PlanRebalance until it has nothing left, completing every copy being filled after each
// step (or, `one_at_a_time`, only the first, so moves stay in flight across plans). Checks at
// every step: no shard below its in-sync copies, no server twice in a shard, no
// host twice in a shard (when hosts are known), at most `max_moves` filling.
Drive DriveToTheEnd(ShardState* st, int max_moves, bool hosts = false, bool one_at_a_time = false) {
  Drive d;
  for (; d.steps < 1000; ++d.steps) {
    const v1::ControllerState before = st->state();
    std::optional<v1::Reassign> plan = PlanRebalance(before, {}, max_moves);
    if (plan) {
      for (const auto& next : plan->shards()) {
        const auto& was = before.shards(int(next.shard()));
        d.moves += next.has_move_from() &&
                   (!was.has_move_from() || (was.copying_size() == 0 && next.copying_size() > 0));
        if (next.replicas(0) != was.replicas(0)) {
          ++d.handoffs;
          EXPECT_GT(next.primary_since(), was.primary_since()) << "shard " << next.shard();
          EXPECT_EQ(next.handoff_from(), was.replicas(0)) << "shard " << next.shard();
        }
      }
      v1::Command c;
      *c.mutable_reassign() = *plan;
      EXPECT_TRUE(st->Apply(c).ok());
    }
    int filling = 0;
    for (const auto& r : st->state().shards()) {
      EXPECT_GE(r.replicas_size(), int(st->state().copies())) << "shard " << r.shard();
      std::set<uint32_t> ids(r.replicas().begin(), r.replicas().end());
      ids.insert(r.copying().begin(), r.copying().end());
      EXPECT_EQ(ids.size(), size_t(r.replicas_size() + r.copying_size())) << "shard " << r.shard();
      if (hosts) {  // the copy a move drops may share its host with the one replacing it
        std::set<std::string> seen;
        for (uint32_t id : ids)
          if (!r.has_move_from() || id != r.move_from())
            seen.insert(st->state().servers(int(id)).host());
        EXPECT_EQ(seen.size(), ids.size() - r.has_move_from())
            << "shard " << r.shard() << " has two copies on a host";
      }
      filling += r.copying_size();
    }
    EXPECT_LE(filling, max_moves);
    d.most_filling = std::max(d.most_filling, filling);
    if (!plan && filling == 0) break;
    int completed = 0;
    for (const auto& r : st->state().shards())
      for (uint32_t id : std::vector<uint32_t>(r.copying().begin(), r.copying().end())) {
        if (one_at_a_time && completed++ > 0) break;
        v1::Command done;
        done.mutable_copy_done()->set_shard(r.shard());
        done.mutable_copy_done()->set_server(id);
        done.mutable_copy_done()->set_expected_version(st->state().version());
        EXPECT_TRUE(st->Apply(done).ok());
      }
  }
  return d;
}

TEST(Rebalance, AServerThatJoinsTakesItsShareAndNothingElseMoves) {
  ShardState st = Started(3, 48, 3);
  ASSERT_TRUE(Resize(&st, 4).ok());
  EXPECT_EQ(st.state().servers_size(), 4);
  EXPECT_EQ(ServersWanted(st.state()), 4u);
  // Not registered yet: nothing moves to it.
  EXPECT_FALSE(PlanRebalance(st.state()).has_value());
  Register(&st, 3);
  const Drive d = DriveToTheEnd(&st, 8);
  // 144 copies over 4 servers: 36 each. The ideal is to move the new server's 36 (1/4), and no
  // more.
  EXPECT_EQ(d.moves, 36);
  EXPECT_EQ(d.handoffs, 12) << "primaries handed off";
  EXPECT_EQ(d.most_filling, 8);
  for (const auto& [id, n] : Copies(st.state())) EXPECT_EQ(n, 36) << "server " << id;
  for (const auto& [id, n] : Primaries(st.state())) EXPECT_EQ(n, 12) << "server " << id;
  EXPECT_EQ(Primaries(st.state()).size(), 4u);
  EXPECT_TRUE(Balanced(st.state()));
  for (const auto& r : st.state().shards()) EXPECT_EQ(r.replicas_size(), 3);
}

TEST(Rebalance, MovesStillFillingWhenTheNextStepIsPlannedAreNotStartedTwice) {
  ShardState st = Started(3, 48, 3);
  ASSERT_TRUE(Resize(&st, 4).ok());
  Register(&st, 3);
  const Drive d = DriveToTheEnd(&st, 8, /*hosts=*/false, /*one_at_a_time=*/true);
  EXPECT_EQ(d.moves, 36);
  EXPECT_EQ(d.handoffs, 12);
  for (const auto& [id, n] : Copies(st.state())) EXPECT_EQ(n, 36) << "server " << id;
}

TEST(Rebalance, WithTwoCopiesAFifthServerTakesAFifth) {
  ShardState st = Started(4, 40, 2);
  ASSERT_TRUE(Resize(&st, 5).ok());
  Register(&st, 4);
  const Drive d = DriveToTheEnd(&st, 4);
  EXPECT_EQ(d.moves, 16);  // 80 copies / 5
  EXPECT_EQ(d.handoffs, 8) << "primaries handed off";
  for (const auto& [id, n] : Copies(st.state())) EXPECT_EQ(n, 16) << "server " << id;
  for (const auto& [id, n] : Primaries(st.state())) EXPECT_EQ(n, 8) << "server " << id;
}

TEST(Rebalance, AServerThatLeavesHandsOverEveryCopyAndThenHoldsNothing) {
  ShardState st = Started(4, 40, 3);
  const int held = Copies(st.state())[3];
  ASSERT_EQ(held, 30);
  ASSERT_TRUE(Resize(&st, 3).ok());
  EXPECT_FALSE(Balanced(st.state()));
  const Drive d = DriveToTheEnd(&st, 8);
  EXPECT_EQ(d.moves, held);  // only the leaving server's copies move
  EXPECT_EQ(d.handoffs, 10) << "primaries handed off";
  const auto copies = Copies(st.state());
  EXPECT_EQ(copies.count(3), 0u);
  for (uint32_t id = 0; id < 3; ++id) EXPECT_EQ(copies.at(id), 40);
  const auto primaries = Primaries(st.state());
  EXPECT_EQ(primaries.count(3), 0u);
  for (uint32_t id = 0; id < 3; ++id) {
    EXPECT_GE(primaries.at(id), 13);
    EXPECT_LE(primaries.at(id), 14);
  }
  EXPECT_TRUE(Balanced(st.state()));
  // The leaving server stays in the list (alive until it exits), wanted no more.
  EXPECT_EQ(st.state().servers_size(), 4);
  EXPECT_EQ(ToShardMap(st.state(), "").servers_wanted(), 3u);
}

TEST(Rebalance, TwoServersThatLeaveAtOnceMoveEachCopyOnceAndHandOverEachPrimaryOnce) {
  ShardState st = Started(5, 50, 3);
  const auto before = Copies(st.state());
  const auto primaries_before = Primaries(st.state());
  ASSERT_TRUE(Resize(&st, 3).ok());
  const Drive d = DriveToTheEnd(&st, 8);
  EXPECT_EQ(d.moves, before.at(3) + before.at(4));
  // Every primary of a leaving server once, to a server that stays (never to the other one
  // leaving), and at most a couple more to even the primaries out.
  const int leaving_primaries = primaries_before.at(3) + primaries_before.at(4);
  EXPECT_GE(d.handoffs, leaving_primaries);
  EXPECT_LE(d.handoffs, leaving_primaries + 2);
  for (uint32_t id = 0; id < 3; ++id) {
    EXPECT_EQ(Copies(st.state()).at(id), 50);
    EXPECT_GE(Primaries(st.state()).at(id), 16);
    EXPECT_LE(Primaries(st.state()).at(id), 17);
  }
  EXPECT_EQ(Copies(st.state()).count(3) + Copies(st.state()).count(4), 0u);
}

TEST(Rebalance, MovesKeepCopiesOnDifferentHosts) {
  ShardState st = Started(3, 24, 2, {"node-a", "node-b", "node-c"});
  ASSERT_TRUE(Resize(&st, 4).ok());
  Register(&st, 3, "node-a");  // shares a node with server 0
  DriveToTheEnd(&st, 8, /*hosts=*/true);
  const auto copies = Copies(st.state());
  EXPECT_GE(copies.at(3), 11);  // 48 copies over 4 servers: 12 each, within one
  EXPECT_LE(copies.at(3), 13);
}

TEST(Rebalance, WaitsWhileAServerHoldingACopyIsDeadAndFailoverSkipsLeavingServers) {
  ShardState st = Started(4, 12, 2);
  ASSERT_TRUE(Resize(&st, 3).ok());
  // Server 1 dies: the failover's new copies go to 0 and 2 only, never to leaving server 3.
  auto plan = PlanFailover(st.state(), {1}, {});
  ASSERT_TRUE(plan.has_value());
  for (const auto& r : plan->shards())
    for (uint32_t id : r.copying()) EXPECT_NE(id, 3u) << "shard " << r.shard();
  // Before the failover is committed, the map has a dead copy holder: no rebalance.
  v1::ControllerState dead = st.state();
  dead.mutable_servers(1)->set_alive(false);
  EXPECT_FALSE(PlanRebalance(dead).has_value());
}

TEST(Rebalance, ResizeGrowsTheServerListAndRefusesFewerServersThanCopies) {
  ShardState st = Started(3, 6, 3);
  const uint64_t v = st.state().version();
  EXPECT_TRUE(Resize(&st, 3).ok());
  EXPECT_EQ(st.state().version(), v);  // the same count changes nothing
  EXPECT_NE(Resize(&st, 2).message().find("2 servers cannot hold 3 copies"), std::string::npos);
  ASSERT_TRUE(Resize(&st, 5).ok());
  EXPECT_EQ(st.state().version(), v + 1);
  ASSERT_EQ(st.state().servers_size(), 5);
  EXPECT_EQ(st.state().servers(4).id(), 4u);
  EXPECT_FALSE(st.state().servers(4).alive());
  // Shrinking keeps the records (their servers still run until they retire).
  ASSERT_TRUE(Resize(&st, 4).ok());
  EXPECT_EQ(st.state().servers_size(), 5);
  EXPECT_EQ(ServersWanted(st.state()), 4u);
  // A state from before elastic servers (no servers_wanted) wants all its servers.
  v1::ControllerState old = st.state();
  old.clear_servers_wanted();
  EXPECT_EQ(ServersWanted(old), 5u);
}

TEST(Rebalance, ABalancedJobPlansNothing) {
  ShardState st = Started(4, 40, 3);
  EXPECT_TRUE(Balanced(st.state()));
  EXPECT_FALSE(PlanRebalance(st.state()).has_value());
}

}  // namespace
}  // namespace adam::controller
