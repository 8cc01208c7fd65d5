#include "raft/storage.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "testing/tmp_dir.h"
#include "testing/wait.h"

namespace adam::raft {
namespace {

Entry E(uint64_t term, uint64_t index, std::string data) {
  return Entry{term, index, EntryType::kNormal, std::move(data)};
}

Ready Batch(std::vector<Entry> entries, std::optional<HardState> hs = std::nullopt) {
  Ready r;
  r.entries = std::move(entries);
  r.hard_state = hs;
  return r;
}

std::unique_ptr<Storage> OpenOk(const std::string& dir) {
  auto s = Storage::Open(dir);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

TEST(RaftStorage, PersistedStateSurvivesReopen) {
  testing::TmpDir dir;
  {
    auto s = Storage::Open(dir.path());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE((*s)->Persist(Batch({E(1, 1, "a"), E(1, 2, "b")}, HardState{1, 2, 1})).ok());
    ASSERT_TRUE((*s)->Persist(Batch({E(2, 3, "c")}, HardState{2, 1, 3})).ok());
  }
  auto s = Storage::Open(dir.path());
  ASSERT_TRUE(s.ok());
  const PersistentState& st = (*s)->state();
  EXPECT_EQ(st.hard_state, (HardState{2, 1, 3}));
  ASSERT_EQ(st.entries.size(), 3u);
  EXPECT_EQ(st.entries[2], E(2, 3, "c"));
}

// A member never joins one group with another's votes and entries: a job re-created under the
// same name on its predecessor's volume.
TEST(RaftStorage, AStateDirOfAnotherGroupIsRefused) {
  testing::TmpDir dir;
  {
    auto s = Storage::Open(dir.path(), nullptr, "uid-of-the-first-job");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE((*s)->Persist(Batch({E(3, 1, "a")}, HardState{3, 2, 1})).ok());
  }
  EXPECT_TRUE(Storage::Open(dir.path(), nullptr, "uid-of-the-first-job").ok());
  auto other = Storage::Open(dir.path(), nullptr, "uid-of-the-second-job");
  ASSERT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find("written for group 'uid-of-the-first-job', not "
                                          "'uid-of-the-second-job'"),
            std::string::npos)
      << other.status().message();
  // A folder from before groups had ids is claimed by the first to open it.
  testing::TmpDir old;
  ASSERT_TRUE(Storage::Open(old.path()).ok());
  ASSERT_TRUE(Storage::Open(old.path(), nullptr, "g").ok());
  EXPECT_FALSE(Storage::Open(old.path(), nullptr, "h").ok());
}

TEST(RaftStorage, AnEntryReplacesTheConflictingSuffix) {
  testing::TmpDir dir;
  {
    auto s = OpenOk(dir.path());
    ASSERT_TRUE(s->Persist(Batch({E(1, 1, "a"), E(1, 2, "b"), E(1, 3, "c")})).ok());
    ASSERT_TRUE(s->Persist(Batch({E(2, 2, "B")})).ok());
  }
  auto s = OpenOk(dir.path());
  ASSERT_EQ(s->state().entries.size(), 2u);
  EXPECT_EQ(s->state().entries[1], E(2, 2, "B"));
}

TEST(RaftStorage, TornFinalRecordIsCutOffAndReported) {
  testing::TmpDir dir;
  {
    auto s = OpenOk(dir.path());
    ASSERT_TRUE(s->Persist(Batch({E(1, 1, "a"), E(1, 2, "b")}, HardState{1, 0, 2})).ok());
  }
  const std::string log = dir.path() + "/raft.log";
  const std::string partial = EncodeEntry(E(1, 3, "never acknowledged"));
  testing::WriteText(log, testing::ReadText(log) + partial.substr(0, partial.size() - 3));
  size_t torn = 0;
  auto s = Storage::Open(dir.path(), &torn);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(torn, partial.size() - 3);
  EXPECT_EQ((*s)->state().entries.size(), 2u);
  // Appends continue after the cut, and the file parses cleanly again.
  ASSERT_TRUE((*s)->Persist(Batch({E(1, 3, "c")})).ok());
  s->reset();
  auto again = Storage::Open(dir.path(), &torn);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(torn, 0u);
  EXPECT_EQ((*again)->state().entries.back(), E(1, 3, "c"));
}

TEST(RaftStorage, CorruptRecordBeforeTheEndIsDataLossNamingTheByte) {
  testing::TmpDir dir;
  {
    auto s = OpenOk(dir.path());
    ASSERT_TRUE(s->Persist(Batch({E(1, 1, "a"), E(1, 2, "b")})).ok());
  }
  const std::string log = dir.path() + "/raft.log";
  std::string bytes = testing::ReadText(log);
  const size_t second = EncodeEntry(E(1, 1, "a")).size();
  bytes[second - 1] ^= 0x40;  // the data byte of the first record
  testing::WriteText(log, bytes);
  auto s = Storage::Open(dir.path());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(s.status().message().find("raft.log: record at byte 0: crc mismatch"),
            std::string::npos)
      << s.status().message();
}

TEST(RaftStorage, SnapshotDropsCoveredEntriesFromTheLog) {
  testing::TmpDir dir;
  uint64_t before = 0;
  {
    auto s = OpenOk(dir.path());
    std::vector<Entry> es;
    for (uint64_t i = 1; i <= 10; ++i) es.push_back(E(1, i, std::string(100, 'x')));
    ASSERT_TRUE(s->Persist(Batch(es, HardState{1, 1, 10})).ok());
    before = s->log_bytes();
    ASSERT_TRUE(s->SaveSnapshot(Snapshot{6, 1, "state@6"}).ok());
    EXPECT_LT(s->log_bytes(), before / 2);
  }
  auto s = OpenOk(dir.path());
  EXPECT_EQ(s->state().snapshot.index, 6u);
  EXPECT_EQ(s->state().snapshot.data, "state@6");
  ASSERT_EQ(s->state().entries.size(), 4u);
  EXPECT_EQ(s->state().entries.front().index, 7u);
  EXPECT_EQ(s->state().hard_state.commit, 10u);
  // A node starts from it.
  Config c;
  c.id = 1;
  c.peers = {1};
  auto n = Node::Make(c, s->state());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->first_index(), 7u);
  EXPECT_EQ(n->TakeReady().committed.size(), 4u);  // 7..10 re-applied after the snapshot
}

TEST(RaftStorage, CorruptSnapshotIsRefused) {
  testing::TmpDir dir;
  testing::WriteText(dir.path() + "/snapshot", EncodeSnapshot(Snapshot{3, 1, "abc"}));
  ASSERT_TRUE(Storage::Open(dir.path()).ok());
  std::string b = EncodeSnapshot(Snapshot{3, 1, "abc"});
  b[33] ^= 1;
  testing::WriteText(dir.path() + "/snapshot", b);
  auto s = Storage::Open(dir.path());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("crc mismatch"), std::string::npos) << s.status().message();
}

TEST(RaftStorage, ParserRejectsGapsAndTermRegressions) {
  const std::string gap =
      EncodeEntry(E(1, 1, "a")) + EncodeEntry(E(1, 3, "c")) + EncodeHardState({});
  auto g = ParseLog(gap, 0, "log");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("leaves a gap"), std::string::npos);
  const std::string regress =
      EncodeEntry(E(2, 1, "a")) + EncodeEntry(E(1, 2, "b")) + EncodeHardState({});
  EXPECT_FALSE(ParseLog(regress, 0, "log").ok());
  // Entries the snapshot covers are skipped.
  auto covered = ParseLog(EncodeEntry(E(1, 1, "a")) + EncodeEntry(E(1, 2, "b")), 1, "log");
  ASSERT_TRUE(covered.ok());
  ASSERT_EQ(covered->state.entries.size(), 1u);
  EXPECT_EQ(covered->state.entries[0].index, 2u);
}

}  // namespace
}  // namespace adam::raft
