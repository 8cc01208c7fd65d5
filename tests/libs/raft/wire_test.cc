// Raft messages on the wire: what a controller accepts from the network, and what it refuses.
#include "raft/wire.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

namespace adam::raft {
namespace {

constexpr uint64_t kTop = std::numeric_limits<uint64_t>::max();

v1::RaftMessage SnapshotMessage(uint64_t index, uint64_t term) {
  Message m;
  m.type = MessageType::kSnapshot;
  m.from = 3;
  m.to = 1;
  m.term = 5;
  m.snapshot = Snapshot{index, term, "state"};
  v1::RaftMessage p;
  MessageToProto(m, &p);
  return p;
}

TEST(RaftWire, AMessageSurvivesTheRoundTrip) {
  Message m;
  m.type = MessageType::kAppend;
  m.from = 2;
  m.to = 1;
  m.term = 7;
  m.log_term = 6;
  m.index = 10;
  m.entries = {{7, 11, EntryType::kNormal, "a"}, {7, 12, EntryType::kNoop, ""}};
  m.commit = 9;
  m.reject = true;
  m.reject_hint = 8;
  m.context = "r1";
  v1::RaftMessage p;
  MessageToProto(m, &p);
  StatusOr<Message> back = MessageFromProto(p);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->type, MessageType::kAppend);
  EXPECT_EQ(back->from, 2u);
  EXPECT_EQ(back->to, 1u);
  EXPECT_EQ(back->term, 7u);
  EXPECT_EQ(back->log_term, 6u);
  EXPECT_EQ(back->index, 10u);
  ASSERT_EQ(back->entries.size(), 2u);
  EXPECT_EQ(back->entries[0].term, 7u);
  EXPECT_EQ(back->entries[0].data, "a");
  EXPECT_EQ(back->entries[1].index, 12u);
  EXPECT_EQ(back->entries[1].type, EntryType::kNoop);
  EXPECT_EQ(back->commit, 9u);
  EXPECT_TRUE(back->reject);
  EXPECT_EQ(back->reject_hint, 8u);
  EXPECT_FALSE(back->snapshot.has_value());
  EXPECT_EQ(back->context, "r1");

  StatusOr<Message> s = MessageFromProto(SnapshotMessage(40, 4));
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_TRUE(s->snapshot.has_value());
  EXPECT_EQ(s->snapshot->index, 40u);
  EXPECT_EQ(s->snapshot->term, 4u);
  EXPECT_EQ(s->snapshot->data, "state");
}

// The fuzzer's find: a snapshot at index 2^64-1 made the follower's first index wrap to 0 and
// TakeReady read its empty log. Every index and term field is bounded, and the error names it.
TEST(RaftWire, AnIndexOrTermBeyondTwoToTheSixtyTwoIsRefusedByName) {
  const uint64_t limit = uint64_t{1} << 62;
  for (const uint64_t bad : {limit, kTop}) {
    StatusOr<Message> s = MessageFromProto(SnapshotMessage(bad, 4));
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("snapshot_index " + std::to_string(bad)), std::string::npos)
        << s.status().message();
  }
  EXPECT_TRUE(MessageFromProto(SnapshotMessage(limit - 1, 4)).ok());

  using Set = void (v1::RaftMessage::*)(uint64_t);
  const std::pair<const char*, Set> fields[] = {
      {"term", &v1::RaftMessage::set_term},
      {"log_term", &v1::RaftMessage::set_log_term},
      {"index", &v1::RaftMessage::set_index},
      {"commit", &v1::RaftMessage::set_commit},
      {"reject_hint", &v1::RaftMessage::set_reject_hint},
      {"snapshot_term", &v1::RaftMessage::set_snapshot_term}};
  for (const auto& f : fields) {
    v1::RaftMessage p;
    p.set_type(static_cast<uint32_t>(MessageType::kHeartbeat));
    (p.*f.second)(kTop);
    StatusOr<Message> s = MessageFromProto(p);
    ASSERT_FALSE(s.ok()) << f.first;
    EXPECT_EQ(s.status().message().rfind(std::string("raft message: ") + f.first + " ", 0), 0u)
        << s.status().message();
  }
}

TEST(RaftWire, ASnapshotTermAboveTheMessagesTermIsRefused) {
  StatusOr<Message> s = MessageFromProto(SnapshotMessage(40, 6));  // the message's term is 5
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("snapshot_term 6"), std::string::npos)
      << s.status().message();
}

// The largest snapshot index the wire lets through installs without wrapping anything: the node
// keeps commit within its log and hands out nothing to apply beyond the snapshot.
TEST(RaftWire, TheLargestAcceptedSnapshotInstallsCleanly) {
  Config c;
  c.id = 1;
  c.peers = {1, 2, 3};
  PersistentState st;
  for (uint64_t i = 1; i <= 4; ++i)
    st.entries.push_back({i <= 2 ? 1u : 2u, i, EntryType::kNormal, "x"});
  st.hard_state = {2, 0, 2};
  StatusOr<Node> made = Node::Make(c, st);
  ASSERT_TRUE(made.ok());
  Node n = std::move(*made);
  StatusOr<Message> m = MessageFromProto(SnapshotMessage((uint64_t{1} << 62) - 1, 4));
  ASSERT_TRUE(m.ok()) << m.status().message();
  n.Step(*m);
  Ready rd = n.TakeReady();
  ASSERT_TRUE(rd.snapshot.has_value());
  EXPECT_EQ(rd.snapshot->index, (uint64_t{1} << 62) - 1);
  EXPECT_TRUE(rd.committed.empty());
  EXPECT_EQ(n.commit(), n.last_index());
  EXPECT_EQ(n.applied(), n.commit());
  EXPECT_EQ(n.first_index(), n.last_index() + 1);  // an empty log after the snapshot
}

}  // namespace
}  // namespace adam::raft
