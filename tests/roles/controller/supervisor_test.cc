// The controller leader's failure detector and planner on time given by hand: no threads, no
// sleeping, exact to the nanosecond.
#include "controller/supervisor.h"

#include <gtest/gtest.h>

namespace adam::controller {
namespace {

using namespace std::chrono_literals;

// Three servers, three shards, three copies each, every server registered as incarnation id+1.
v1::ControllerState ThreeServers() {
  auto map = *shard::ShardMap::Make(3 * 16, 64, 3, 7);
  ShardState st;
  v1::Command c;
  *c.mutable_bootstrap() = MakeBootstrap(map, 3);
  EXPECT_TRUE(st.Apply(c).ok());
  for (uint32_t i = 0; i < 3; ++i) {
    v1::Command r;
    r.mutable_register_()->set_id(i);
    r.mutable_register_()->set_address("ps-" + std::to_string(i));
    r.mutable_register_()->set_incarnation(i + 1);
    r.mutable_register_()->set_alive(true);
    EXPECT_TRUE(st.Apply(r).ok());
  }
  return st.state();
}

v1::HeartbeatRequest Beat(uint32_t id, uint64_t incarnation) {
  v1::HeartbeatRequest req;
  req.mutable_server()->set_id(id);
  req.mutable_server()->set_address("ps-" + std::to_string(id));
  req.mutable_server()->set_incarnation(incarnation);
  return req;
}

const Clock::TimePoint kT0 = Clock::TimePoint() + 1h;

TEST(Supervisor, JudgesNothingDuringANewLeadersGraceAndTimeout) {
  const v1::ControllerState s = ThreeServers();
  Supervisor sup({500ms, 2000ms, 10000ms});
  sup.Lead(kT0, 400ms);
  // Nobody has beaten, but failure detection counts from the end of the grace.
  EXPECT_FALSE(sup.Judge(s, kT0 + 899ms).judged);
  Supervisor::Round r = sup.Judge(s, kT0 + 900ms);
  EXPECT_TRUE(r.judged);
  EXPECT_TRUE(r.dead.empty());
  r = sup.Judge(s, kT0 + 900ms + 1ns);
  EXPECT_EQ(r.dead, (std::set<uint32_t>{0, 1, 2}));
}

TEST(Supervisor, ASilentServerIsDeadOneNanosecondAfterItsTimeout) {
  const v1::ControllerState s = ThreeServers();
  Supervisor sup({500ms, 2000ms, 10000ms});
  sup.Lead(kT0, 0ms);
  const auto t = kT0 + 1s;
  for (uint32_t i = 0; i < 3; ++i) EXPECT_TRUE(sup.Heartbeat(s, Beat(i, i + 1), t).accepted);
  EXPECT_TRUE(sup.Heartbeat(s, Beat(0, 1), t + 400ms).accepted);
  EXPECT_TRUE(sup.Heartbeat(s, Beat(2, 3), t + 400ms).accepted);
  EXPECT_TRUE(sup.Judge(s, t + 500ms).dead.empty());
  Supervisor::Round r = sup.Judge(s, t + 500ms + 1ns);
  EXPECT_EQ(r.dead, (std::set<uint32_t>{1}));
  ASSERT_TRUE(r.plan.has_value());
  EXPECT_EQ(std::vector<uint32_t>(r.plan->dead().begin(), r.plan->dead().end()),
            std::vector<uint32_t>{1});
  EXPECT_DOUBLE_EQ(*sup.SilentFor(1, t + 500ms), 0.5);
  EXPECT_FALSE(Supervisor().SilentFor(1, t).has_value());  // never heard of
}

TEST(Supervisor, ANewIncarnationIsRefusedUntilItsCopiesAreFailedOver) {
  const v1::ControllerState s = ThreeServers();
  Supervisor sup({500ms, 2000ms, 10000ms});
  sup.Lead(kT0, 0ms);
  const auto t = kT0 + 1s;
  for (uint32_t i = 0; i < 3; ++i) sup.Heartbeat(s, Beat(i, i + 1), t);
  Supervisor::Beat b = sup.Heartbeat(s, Beat(2, 99), t + 10ms);  // ps-2 restarted
  EXPECT_FALSE(b.accepted);
  EXPECT_TRUE(b.restart_seen);
  EXPECT_FALSE(sup.Heartbeat(s, Beat(2, 99), t + 20ms).restart_seen);  // seen once
  // Failed over at the next judgement, long before its timeout.
  Supervisor::Round r = sup.Judge(s, t + 30ms);
  EXPECT_EQ(r.dead, (std::set<uint32_t>{2}));
  // Once the map has it dead, the new process registers.
  ShardState st;
  ASSERT_TRUE(st.Restore(s.SerializeAsString()).ok());
  v1::Command c;
  *c.mutable_reassign() = *r.plan;
  ASSERT_TRUE(st.Apply(c).ok());
  b = sup.Heartbeat(st.state(), Beat(2, 99), t + 40ms);
  EXPECT_TRUE(b.accepted);
  EXPECT_TRUE(b.register_server);
  EXPECT_FALSE(b.probation);  // a first return gets copies at once
}

TEST(Supervisor, AServerBackTwiceWithinTheFlapWindowIsOnProbation) {
  v1::ControllerState s = ThreeServers();
  Supervisor sup({500ms, 2000ms, 10000ms});
  sup.Lead(kT0, 0ms);
  s.mutable_servers(1)->set_alive(false);  // failed over
  const auto t = kT0 + 1s;
  EXPECT_FALSE(sup.Heartbeat(s, Beat(1, 2), t).probation);             // first return
  EXPECT_TRUE(sup.Heartbeat(s, Beat(1, 2), t + 9s).probation);         // again within 10 s
  EXPECT_FALSE(sup.Heartbeat(s, Beat(1, 2), t + 9s + 10s).probation);  // 10 s later: not flapping
}

TEST(Supervisor, ACopyReportedFilledIsReportedDone) {
  v1::ControllerState s = ThreeServers();
  s.mutable_shards(0)->add_copying(1);
  Supervisor sup({500ms, 2000ms, 10000ms});
  sup.Lead(kT0, 0ms);
  v1::HeartbeatRequest req = Beat(1, 2);
  auto* v = req.add_shards();
  v->set_shard(0);
  v->set_version(5);
  v->set_in_sync(false);
  EXPECT_TRUE(sup.Heartbeat(s, req, kT0).copies_done.empty());
  v->set_in_sync(true);
  Supervisor::Beat b = sup.Heartbeat(s, req, kT0 + 50ms);
  ASSERT_EQ(b.copies_done.size(), 1u);
  EXPECT_EQ(b.copies_done[0].shard(), 0u);
  EXPECT_EQ(b.copies_done[0].server(), 1u);
}

}  // namespace
}  // namespace adam::controller
