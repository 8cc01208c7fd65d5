// Checkpoints: round trip, incremental generations, fallback past corrupt and truncated files,
// pruning, and the parser's errors.
#include "param_server/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "testing/tmp_dir.h"
#include "testing/wait.h"

namespace adam::ps {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string Name(uint64_t g) { return CheckpointFileName(g); }

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& de : fs::directory_iterator(dir)) out.push_back(de.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto map = shard::ShardMap::Make(3000, 4000, 1, 1);  // shards 0, 1, 2 of 1000 floats
    ASSERT_TRUE(map.ok());
    map_ = *map;
    init_.resize(3000);
    for (size_t i = 0; i < init_.size(); ++i) init_[i] = float(i) * 0.5f;
    opt_.dir = tmp_.path() + "/ps-0";
    opt_.num_params = 3000;
    for (const auto& s : map_->shards()) held_[s.id] = s.count;
  }

  // Adds `v` to every float of `shard`.
  static void Bump(ParamStore& store, uint32_t shard, float v) {
    std::vector<float> d(1000, v);
    ASSERT_TRUE(store.Add(shard, d.data(), 1000).ok());
  }
  std::vector<float> ReadAll(ParamStore& store) {
    std::vector<float> out(3000);
    for (const auto& s : map_->shards())
      EXPECT_TRUE(store.Read(s.id, out.data() + s.offset, s.count).ok());
    return out;
  }
  // What a restarted server holds: the initial vector overridden by the restored shards.
  StatusOr<std::vector<float>> Restart() {
    ADAM_ASSIGN_OR_RETURN(Restored r, RestoreCheckpoint(opt_, held_));
    std::vector<float> v = init_;
    for (const auto& [id, s] : r.shards)
      std::copy(s.values.begin(), s.values.end(), v.begin() + id * 1000);
    return v;
  }
  void Corrupt(uint64_t gen, size_t at) {
    std::fstream f(opt_.dir + "/" + Name(gen), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(at));
    char c = 0;
    f.get(c);
    f.seekp(std::streamoff(at));
    f.put(char(c ^ 0x5a));
  }

  testing::TmpDir tmp_;
  std::optional<shard::ShardMap> map_;
  std::vector<float> init_;
  CheckpointOptions opt_;
  std::map<uint32_t, int64_t> held_;
  BufferPool pool_;
};

TEST_F(CheckpointTest, RoundTripAndIncrementalGenerations) {
  ASSERT_TRUE(RestoreCheckpoint(opt_, held_).ok());  // empty dir: nothing, no error
  ParamStore store(*map_, 0, init_.data());
  Checkpointer cp(&store, &pool_, opt_, Restored{}, {});
  Bump(store, 1, 2.f);
  auto g1 = cp.Flush();
  ASSERT_TRUE(g1.ok()) << g1.status().ToString();
  EXPECT_EQ(*g1, 1u);
  auto nothing = cp.Flush();  // nothing dirty: no new generation
  ASSERT_TRUE(nothing.ok());
  EXPECT_EQ(*nothing, 0u);
  Bump(store, 2, -1.f);
  auto g2 = cp.Flush();
  ASSERT_TRUE(g2.ok());
  EXPECT_EQ(*g2, 2u);
  // Generation 2 holds only shard 2's data and refers to generation 1 for the others.
  EXPECT_LT(fs::file_size(opt_.dir + "/" + Name(2)), fs::file_size(opt_.dir + "/" + Name(1)));
  auto r = RestoreCheckpoint(opt_, held_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->generation, 2u);
  EXPECT_EQ(r->shards.at(0).source, 1u);
  EXPECT_EQ(r->shards.at(2).source, 2u);
  EXPECT_EQ(r->shards.at(1).version, 1u);
  auto v = Restart();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, ReadAll(store));
}

// The background flush runs once per interval of its clock: not 1 ms before it (a fake clock, no
// real time waited), and only where a shard changed; each flush's after_flush hook runs after it.
TEST_F(CheckpointTest, TheBackgroundFlushRunsOncePerIntervalOfItsClock) {
  FakeClock clock;
  opt_.clock = &clock;
  opt_.interval = std::chrono::milliseconds(1000);
  std::atomic<int> flushed{0};
  opt_.after_flush = [&] { ++flushed; };
  ParamStore store(*map_, 0, init_.data());
  Checkpointer cp(&store, &pool_, opt_, Restored{}, {});
  Bump(store, 0, 1.f);
  cp.Start();
  // After each move the loop has woken, looked, and waits again (a wake-up more than before).
  const auto step = [&](int ms) {
    ASSERT_TRUE(clock.AwaitWaiters(1));
    const int64_t woken = clock.wakeups();
    clock.Advance(std::chrono::milliseconds(ms));
    ASSERT_TRUE(testing::Eventually([&] { return clock.wakeups() > woken; }));
    ASSERT_TRUE(clock.AwaitWaiters(1));
  };
  step(999);
  EXPECT_EQ(cp.generation(), 0u);
  step(1);
  EXPECT_EQ(cp.generation(), 1u);
  EXPECT_EQ(flushed.load(), 1);
  step(1000);  // nothing changed: no new generation, no hook
  EXPECT_EQ(cp.generation(), 1u);
  EXPECT_EQ(flushed.load(), 1);
  Bump(store, 2, 1.f);
  step(999);
  EXPECT_EQ(cp.generation(), 1u);
  step(1);
  EXPECT_EQ(cp.generation(), 2u);
  EXPECT_EQ(flushed.load(), 2);
  cp.Stop();
}

TEST_F(CheckpointTest, CorruptOrTruncatedNewestFallsBackToThePreviousOne) {
  ParamStore store(*map_, 0, init_.data());
  Checkpointer cp(&store, &pool_, opt_, Restored{}, {});
  Bump(store, 0, 1.f);
  ASSERT_TRUE(cp.Flush().ok());
  const std::vector<float> at_g1 = ReadAll(store);
  Bump(store, 0, 1.f);
  Bump(store, 1, 1.f);
  ASSERT_TRUE(cp.Flush().ok());
  const std::vector<float> at_g2 = ReadAll(store);

  Corrupt(2, 100);  // a flipped byte inside the data
  auto r = RestoreCheckpoint(opt_, held_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->generation, 1u);
  EXPECT_EQ(*Restart(), at_g1);
  Corrupt(2, 100);  // undo
  EXPECT_EQ(*Restart(), at_g2);

  const std::string newest = opt_.dir + "/" + Name(2);
  fs::resize_file(newest, fs::file_size(newest) - 10);  // truncated
  auto t = RestoreCheckpoint(opt_, held_);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->generation, 1u);

  Corrupt(1, 60);  // now nothing is usable: an error naming both files, not a silent restart
  auto none = RestoreCheckpoint(opt_, held_);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr(Name(2) + ": byte"));
  EXPECT_THAT(none.status().message(), HasSubstr(Name(1) + ": byte"));
  EXPECT_THAT(none.status().message(), HasSubstr("checksum mismatch"));
}

TEST_F(CheckpointTest, ANewestThatNeedsABrokenOlderFileIsRejected) {
  ParamStore store(*map_, 0, init_.data());
  Checkpointer cp(&store, &pool_, opt_, Restored{}, {});
  Bump(store, 0, 1.f);
  ASSERT_TRUE(cp.Flush().ok());
  Bump(store, 1, 1.f);
  ASSERT_TRUE(cp.Flush().ok());  // generation 2 refers to 1 for shards 0 and 2
  Corrupt(1, 100);
  auto r = RestoreCheckpoint(opt_, held_);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("is in " + Name(1) + ", which is unusable"));
}

TEST_F(CheckpointTest, PrunesFilesNoCheckpointNeedsAndResumesNumbering) {
  {
    ParamStore store(*map_, 0, init_.data());
    Checkpointer cp(&store, &pool_, opt_, Restored{}, {});
    for (int i = 0; i < 5; ++i) {
      Bump(store, uint32_t(i % 3), 1.f);
      ASSERT_TRUE(cp.Flush().ok());
    }
    // Generation 1 holds every shard; then each flush rewrites one. Generation 5 needs 3 (shard
    // 2), 4 (shard 0) and itself (shard 1); generation 4, the fallback, needs 2 (shard 1), 3, 4.
    EXPECT_EQ(Files(opt_.dir), (std::vector<std::string>{Name(2), Name(3), Name(4), Name(5)}));
  }
  // A restarted server continues at generation 6, and a leftover temporary file is removed.
  std::ofstream(opt_.dir + "/" + Name(6) + ".tmp") << "half a flush";
  auto r = RestoreCheckpoint(opt_, held_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->generation, 5u);
  ParamStore store(*map_, 0, init_.data());
  Checkpointer cp(&store, &pool_, opt_, *r, {});
  Bump(store, 0, 1.f);
  auto g = cp.Flush();
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g, 6u);
  EXPECT_FALSE(fs::exists(opt_.dir + "/" + Name(6) + ".tmp"));
}

TEST_F(CheckpointTest, CheckpointOfAnotherShardMapIsRejected) {
  ParamStore store(*map_, 0, init_.data());
  Checkpointer cp(&store, &pool_, opt_, Restored{}, {});
  Bump(store, 0, 1.f);
  ASSERT_TRUE(cp.Flush().ok());
  std::map<uint32_t, int64_t> other = {{0, 1500}, {1, 1500}};
  auto r = RestoreCheckpoint(opt_, other);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("does not match this server's shard map"));
}

// The job's epochs finished travel in the checkpoint with the parameters they describe; a
// change of epochs alone is flushed; a file of format 1 (before epochs) reads as 0 epochs.
TEST_F(CheckpointTest, EpochsFinishedTravelWithTheParameters) {
  ParamStore store(*map_, 0, init_.data());
  Checkpointer cp(&store, &pool_, opt_, Restored{}, {});
  Bump(store, 1, 2.f);
  store.RaiseEpochs(3);
  store.RaiseEpochs(2);  // only rises
  EXPECT_EQ(store.epochs(), 3u);
  ASSERT_EQ(*cp.Flush(), 1u);
  auto r = RestoreCheckpoint(opt_, held_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->epochs, 3u);
  EXPECT_EQ(*cp.Flush(), 0u);  // nothing moved
  store.RaiseEpochs(4);        // no shard moved, the epochs did
  ASSERT_EQ(*cp.Flush(), 2u);
  r = RestoreCheckpoint(opt_, held_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->generation, 2u);
  EXPECT_EQ(r->epochs, 4u);
  EXPECT_EQ(r->shards.at(1).source, 1u);  // the values stay in generation 1
  auto v = Restart();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, ReadAll(store));

  // The same file as format 1 wrote it: no epochs field (bytes 32-35), CRC recomputed.
  std::string bytes = testing::ReadText(opt_.dir + "/" + Name(1));
  ASSERT_EQ(bytes[8], 2);  // format 2
  auto refresh_crc = [&bytes] {
    const size_t body = bytes.size() - 12;
    const uint32_t crc = uint32_t(crc32_z(0, reinterpret_cast<const Bytef*>(bytes.data()), body));
    std::memcpy(bytes.data() + body, &crc, 4);
  };
  bytes[8] = 1;
  bytes.erase(32, 4);
  refresh_crc();
  auto f1 = ParseCheckpoint(bytes, 1000);
  ASSERT_TRUE(f1.ok()) << f1.status().ToString();
  EXPECT_EQ(f1->epochs, 0u);
  EXPECT_EQ(f1->entries.size(), 3u);
  bytes[8] = 3;
  refresh_crc();
  EXPECT_THAT(ParseCheckpoint(bytes, 1000).status().message(),
              HasSubstr("byte 8: format 3, this build reads 1 to 2"));
}

TEST(CheckpointName, RoundTripsAndRejectsEverythingElse) {
  EXPECT_EQ(CheckpointFileName(0x2a), "ckpt-000000000000002a.adam");
  EXPECT_EQ(CheckpointGeneration(CheckpointFileName(0x2a)), 0x2au);
  for (const char* bad : {"ckpt-000000000000002A.adam", "ckpt-000000000000002a.adam.tmp",
                          "../ckpt-000000000000002a", "ckpt-00000000000002a.adam", "x"})
    EXPECT_EQ(CheckpointGeneration(bad), 0u) << bad;
}

TEST(ParseCheckpoint, NamesTheByteAtFault) {
  EXPECT_THAT(ParseCheckpoint("short", 10).status().message(),
              HasSubstr("byte 0: not an Adam checkpoint"));
  std::string fake =
      std::string("ADAMCKP1") + std::string(40, '\0') + std::string(4, '\0') + "ADAMEND0";
  EXPECT_THAT(ParseCheckpoint(fake, 10).status().message(), HasSubstr("end marker missing"));
  fake.replace(fake.size() - 8, 8, "ADAMEND1");
  EXPECT_THAT(ParseCheckpoint(fake, 10).status().message(), HasSubstr("checksum mismatch"));
}

}  // namespace
}  // namespace adam::ps
