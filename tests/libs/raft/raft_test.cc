// Directed Raft scenarios on a fault-free simulated network (sim.h), one property each.
#include "raft/raft.h"

#include <gtest/gtest.h>

#include "libs/raft/sim.h"

namespace adam::raft {
namespace {

using sim::Faults;
using sim::Sim;

NodeId SettleLeader(Sim& s, int ticks = 200) {
  for (int i = 0; i < ticks; ++i) {
    s.Step(false);
    if (auto l = s.Leader()) {
      s.Settle(5);
      return *s.Leader();
    }
  }
  return 0;
}

TEST(Raft, ConfigIsValidated) {
  Config c;
  c.id = 4;
  c.peers = {1, 2, 3};
  EXPECT_NE(Node::Make(c).status().message().find("own id 4"), std::string::npos);
  c.peers = {1, 2, 3, 4};
  c.heartbeat_ticks = 10;
  EXPECT_FALSE(Node::Make(c).ok());
  c.heartbeat_ticks = 1;
  PersistentState gap;
  gap.entries = {Entry{1, 1, EntryType::kNormal, "a"}, Entry{1, 3, EntryType::kNormal, "c"}};
  EXPECT_EQ(Node::Make(c, gap).status().code(), StatusCode::kDataLoss);
}

TEST(Raft, SingleNodeCommitsAlone) {
  Sim s(1, 1, Faults{});
  const NodeId l = SettleLeader(s);
  ASSERT_EQ(l, 1u);
  s.ProposeTo(l, "x");
  EXPECT_EQ(s.AppliedValues(l), std::vector<std::string>{"x"});
}

TEST(Raft, ElectsOneLeaderAndEveryNodeAppliesTheSameSequence) {
  Sim s(7, 3, Faults{});
  const NodeId l = SettleLeader(s);
  ASSERT_NE(l, 0u);
  for (int i = 0; i < 20; ++i) s.ProposeTo(l, std::string("v").append(std::to_string(i)));
  s.Settle(20);
  ASSERT_TRUE(s.ok()) << s.failure();
  EXPECT_EQ(s.AppliedValues(l).size(), 20u);
  for (NodeId id : s.ids()) EXPECT_EQ(s.AppliedValues(id), s.AppliedValues(l)) << "node " << id;
  // Followers refuse proposals and reads, naming the leader.
  const NodeId f = l == 1 ? 2 : 1;
  auto refused = s.node(f)->Propose("y");
  EXPECT_EQ(refused.status().message(), "not the leader; leader is " + std::to_string(l));
  EXPECT_FALSE(s.node(f)->ReadIndex("r").ok());
}

TEST(Raft, PreVoteStopsAnIsolatedNodeFromDisruptingTheGroup) {
  Sim s(3, 3, Faults{});
  const NodeId l = SettleLeader(s);
  ASSERT_NE(l, 0u);
  const NodeId f = l == 1 ? 2 : 1;
  const uint64_t term = s.node(l)->term();
  s.Isolate(f, true);
  s.Settle(300);  // many election timeouts: it keeps pre-voting but never raises its term
  EXPECT_EQ(s.node(f)->term(), term);
  s.Isolate(f, false);
  s.Settle(50);
  EXPECT_EQ(s.Leader(), l);
  EXPECT_EQ(s.node(l)->term(), term);
}

TEST(Raft, IsolatedLeaderStepsDownAndTheRestElectANewOne) {
  Sim s(5, 3, Faults{});
  const NodeId l = SettleLeader(s);
  ASSERT_NE(l, 0u);
  s.Isolate(l, true);
  s.Settle(100);
  EXPECT_NE(s.node(l)->role(), Role::kLeader);  // check-quorum
  auto nl = s.Leader();
  ASSERT_TRUE(nl.has_value());
  EXPECT_NE(*nl, l);
  s.ProposeTo(*nl, "after");
  s.Isolate(l, false);
  s.Settle(50);
  ASSERT_TRUE(s.ok()) << s.failure();
  EXPECT_EQ(s.AppliedValues(l).back(), "after");
}

TEST(Raft, FollowerBehindTheSnapshotCatchesUpByInstallSnapshot) {
  Sim s(11, 3, Faults{});
  const NodeId l = SettleLeader(s);
  ASSERT_NE(l, 0u);
  const NodeId f = l == 3 ? 2 : 3;
  s.Crash(f);
  for (int i = 0; i < 40; ++i) s.ProposeTo(l, std::string("v").append(std::to_string(i)));
  s.Settle(10);
  ASSERT_TRUE(s.CompactNow(l));
  EXPECT_GT(s.node(l)->first_index(), 40u);
  s.Restart(f);
  s.Settle(50);
  ASSERT_TRUE(s.ok()) << s.failure();
  EXPECT_EQ(s.applied(f), s.applied(l));
  EXPECT_EQ(s.node(f)->snapshot().index, s.node(l)->snapshot().index);
  s.ProposeTo(l, "next");
  s.Settle(10);
  EXPECT_EQ(s.AppliedValues(f).back(), "next");
}

TEST(Raft, WholeGroupRestartsFromPersistedStateWithoutLosingCommits) {
  Sim s(13, 5, Faults{});
  const NodeId l = SettleLeader(s);
  ASSERT_NE(l, 0u);
  for (int i = 0; i < 10; ++i) s.ProposeTo(l, std::string("v").append(std::to_string(i)));
  s.Settle(10);
  const std::vector<std::string> before = s.AppliedValues(l);
  const uint64_t term = s.node(l)->term();
  for (NodeId id : s.ids()) s.Crash(id);
  for (NodeId id : s.ids()) s.Restart(id);
  EXPECT_EQ(s.node(l)->term(), term);
  const NodeId l2 = SettleLeader(s);
  ASSERT_NE(l2, 0u);
  s.Settle(10);
  ASSERT_TRUE(s.ok()) << s.failure();
  for (NodeId id : s.ids()) EXPECT_EQ(s.AppliedValues(id), before) << "node " << id;
}

TEST(Raft, ReadIndexAnswersAfterAQuorumConfirmsLeadership) {
  Sim s(17, 3, Faults{});
  const NodeId l = SettleLeader(s);
  ASSERT_NE(l, 0u);
  s.ProposeTo(l, "w");
  s.Settle(5);
  ASSERT_TRUE(s.node(l)->ReadIndex("read-1").ok());
  Ready rd = s.node(l)->TakeReady();
  EXPECT_TRUE(rd.read_states.empty());  // not before the heartbeat round
  int heartbeats = 0;
  for (const Message& m : rd.messages)
    heartbeats += m.type == MessageType::kHeartbeat && m.context == "read-1";
  EXPECT_EQ(heartbeats, 2);
  // One follower's answer makes a quorum of 2 of 3.
  Message resp;
  resp.type = MessageType::kHeartbeatResp;
  resp.from = l == 1 ? 2 : 1;
  resp.to = l;
  resp.term = s.node(l)->term();
  resp.context = "read-1";
  s.node(l)->Step(resp);
  rd = s.node(l)->TakeReady();
  ASSERT_EQ(rd.read_states.size(), 1u);
  EXPECT_EQ(rd.read_states[0].index, s.node(l)->commit());
}

TEST(Raft, StaleTermMessagesAreAnsweredSoTheOldLeaderStepsDown) {
  Config c;
  c.id = 1;
  c.peers = {1, 2, 3};
  PersistentState st;
  st.hard_state.term = 5;
  Node n = *Node::Make(c, st);
  Message hb;
  hb.type = MessageType::kHeartbeat;
  hb.from = 2;
  hb.to = 1;
  hb.term = 3;
  n.Step(hb);
  Ready rd = n.TakeReady();
  ASSERT_EQ(rd.messages.size(), 1u);
  EXPECT_EQ(rd.messages[0].type, MessageType::kAppendResp);
  EXPECT_EQ(rd.messages[0].term, 5u);
  Message alien = hb;
  alien.from = 9;
  n.Step(alien);
  EXPECT_EQ(n.ignored_messages(), 1u);
}

}  // namespace
}  // namespace adam::raft
