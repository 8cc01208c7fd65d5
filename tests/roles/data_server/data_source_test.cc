// DataSource: shares partition each epoch, shuffles differ by epoch, the quorum closes epochs.
#include "data_server/data_source.h"

#include <gtest/gtest.h>

#include <set>

#include "roles/data_server/sources.h"

namespace adam::data_server {
namespace {

// The image indexes a trainer's whole share of an epoch holds.
std::vector<int> Share(DataSource& src, int trainer, uint32_t epoch) {
  std::vector<int> ids;
  for (uint32_t b = 0;; ++b) {
    BatchView v;
    EXPECT_TRUE(src.GetBatch(trainer, epoch, b, &v).ok());
    for (int k = 0; k < v.count; ++k) {
      const int id = uint8_t(v.pixels[size_t(k * 4)]) | uint8_t(v.pixels[size_t(k * 4 + 1)]) << 8;
      EXPECT_EQ(uint8_t(v.labels[size_t(k)]), id % 3);
      ids.push_back(id);
    }
    if (v.end_of_share || v.count == 0) break;
  }
  return ids;
}

TEST(DataSource, SharesPartitionTheEpoch) {
  auto src = MakeSource(1001, 3, 1.0, 64);
  std::set<int> all;
  size_t total = 0;
  for (int t = 0; t < 3; ++t) {
    auto ids = Share(*src, t, 0);
    EXPECT_EQ(int(ids.size()), src->ShareSize(t, 0));
    total += ids.size();
    all.insert(ids.begin(), ids.end());
  }
  EXPECT_EQ(total, 1001u);
  EXPECT_EQ(all.size(), 1001u);
}

TEST(DataSource, EachEpochIsADifferentDeterministicShuffle) {
  auto a = MakeSource(500, 1, 1.0, 100), b = MakeSource(500, 1, 1.0, 100);
  EXPECT_EQ(Share(*a, 0, 0), Share(*b, 0, 0));
  EXPECT_NE(Share(*a, 0, 0), Share(*a, 0, 1));
}

// A data server that restarted knows no trainer's finished epoch; the trainers that ask for the
// next epoch's images have finished the one before, so the quorum still closes it for the
// straggler as the first server would have.
TEST(DataSource, ARestartedServerLearnsFinishedEpochsFromTheNextEpochsRequests) {
  auto src = MakeSource(400, 4, 0.75, 10);  // the new process: nothing finished yet
  BatchView v;
  for (int t = 0; t < 2; ++t) {
    ASSERT_TRUE(src->GetBatch(t, 3, 0, &v).ok());
    EXPECT_EQ(v.count, 10);
  }
  ASSERT_TRUE(src->GetBatch(3, 2, 4, &v).ok());
  EXPECT_FALSE(v.epoch_closed);  // two of the three needed
  auto r = src->FinishEpoch(2, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finished, 3);
  EXPECT_TRUE(r->closed_now);
  ASSERT_TRUE(src->GetBatch(3, 2, 5, &v).ok());
  EXPECT_TRUE(v.epoch_closed);
}

// Late in a long job the bookkeeping holds only the last 64 epochs; a trainer restarted there
// that asks for an epoch long gone (epoch 0, or the one before the next it asks for) is served
// the same share as ever, and the epoch it asks about is the one it gets an answer for. (The
// entry made for such an epoch was the oldest and went at once, read after it was freed: the
// AddressSanitizer finding of a restarted trainer's job.)
TEST(DataSource, AnEpochLongPastIsServedAgainLateInALongJob) {
  auto src = MakeSource(200, 2, 1.0, 10);
  const auto first = Share(*src, 1, 0);
  BatchView v;
  for (uint32_t e = 1; e <= 80; ++e) ASSERT_TRUE(src->GetBatch(0, e, 0, &v).ok());
  EXPECT_EQ(Share(*src, 1, 0), first);
  EXPECT_EQ(src->ShareSize(1, 0), 100);
  ASSERT_TRUE(src->GetBatch(1, 2, 0, &v).ok());  // trainer 1 has finished epoch 1, as 0 has
  EXPECT_EQ(v.count, 10);
  auto r = src->FinishEpoch(0, 1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finished, 2);
  EXPECT_TRUE(r->closed);
}

TEST(DataSource, QuorumClosesTheEpochForStragglers) {
  auto src = MakeSource(400, 4, 0.75, 10);
  EXPECT_EQ(src->quorum_count(0), 3);
  for (int t = 0; t < 2; ++t) {
    auto r = src->FinishEpoch(t, 0);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->closed);
  }
  BatchView v;
  ASSERT_TRUE(src->GetBatch(3, 0, 2, &v).ok());
  EXPECT_FALSE(v.epoch_closed);
  EXPECT_EQ(v.count, 10);
  auto r = src->FinishEpoch(2, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finished, 3);
  EXPECT_TRUE(r->closed);
  EXPECT_TRUE(r->closed_now);
  EXPECT_FALSE(src->FinishEpoch(3, 0)->closed_now);  // closed once
  // The straggler is told to move on; the next epoch is open for it.
  ASSERT_TRUE(src->GetBatch(3, 0, 3, &v).ok());
  EXPECT_TRUE(v.epoch_closed);
  EXPECT_EQ(v.count, 0);
  ASSERT_TRUE(src->GetBatch(3, 1, 0, &v).ok());
  EXPECT_FALSE(v.epoch_closed);
  EXPECT_EQ(v.count, 10);
}

TEST(DataSource, StopEndsTheJobAndBadTrainerIsRejected) {
  auto src = MakeSource(50, 2, 0.75, 10);
  BatchView v;
  EXPECT_FALSE(src->GetBatch(2, 0, 0, &v).ok());
  EXPECT_FALSE(src->FinishEpoch(-1, 0).ok());
  src->Stop();
  ASSERT_TRUE(src->GetBatch(0, 0, 0, &v).ok());
  EXPECT_TRUE(v.job_stopped);
  EXPECT_EQ(v.count, 0);
}

// Trainers scaled while the job runs: an epoch's shares stay as they were when it started, a
// trainer added joins with the next epoch (an empty share before), the quorum follows a smaller
// count at once, and every epoch's shares still partition the training set.
TEST(DataSource, TheTrainerCountChangesBetweenEpochs) {
  auto src = MakeSource(1000, 2, 0.75, 50);
  BatchView v;
  ASSERT_TRUE(src->GetBatch(0, 0, 0, &v).ok());  // epoch 0 starts with 2 trainers
  src->SetTrainers(4);
  EXPECT_EQ(src->trainers(), 4);
  // Epoch 0: still two shares; trainers 2 and 3 have empty ones, and their finish counts for
  // nothing.
  EXPECT_EQ(src->ShareSize(0, 0), 500);
  EXPECT_EQ(src->ShareSize(3, 0), 0);
  ASSERT_TRUE(src->GetBatch(3, 0, 0, &v).ok());
  EXPECT_TRUE(v.end_of_share);
  EXPECT_EQ(v.count, 0);
  EXPECT_EQ(src->FinishEpoch(2, 0)->finished, 0);
  EXPECT_EQ(src->FinishEpoch(3, 0)->finished, 0);
  EXPECT_EQ(src->quorum_count(0), 2);  // ceil(0.75 * 2)
  EXPECT_FALSE(src->FinishEpoch(0, 0)->closed);
  EXPECT_TRUE(src->FinishEpoch(1, 0)->closed);
  // Epoch 1 starts with 4: four shares that partition it.
  std::set<int> all;
  size_t total = 0;
  for (int t = 0; t < 4; ++t) {
    auto ids = Share(*src, t, 1);
    EXPECT_EQ(int(ids.size()), 250);
    total += ids.size();
    all.insert(ids.begin(), ids.end());
  }
  EXPECT_EQ(total, 1000u);
  EXPECT_EQ(all.size(), 1000u);
  EXPECT_EQ(src->quorum_count(1), 3);
  EXPECT_FALSE(src->GetBatch(4, 1, 0, &v).ok());  // beyond every count
  // Scaled down to 1 mid-epoch: trainers 1..3 will not finish epoch 1, so its quorum falls to
  // ceil(0.75 * 1) = 1; the epoch trainer 0 had already finished closes at once.
  EXPECT_FALSE(src->FinishEpoch(0, 1)->closed);
  src->SetTrainers(1);
  ASSERT_TRUE(src->GetBatch(0, 1, 0, &v).ok());
  EXPECT_TRUE(v.epoch_closed);
  // A trainer removed but still running may finish its share of the epoch it had.
  ASSERT_TRUE(src->GetBatch(2, 1, 0, &v).ok());
  // Epoch 2 is one share.
  EXPECT_EQ(src->ShareSize(0, 2), 1000);
  EXPECT_FALSE(src->GetBatch(1, 2, 0, &v).ok());
}

TEST(DataSource, TestBatchesCoverTheTestSet) {
  auto src = MakeSource(95, 1, 1.0, 10);
  int seen = 0;
  for (uint32_t off = 0;;) {
    BatchView v;
    src->GetTestBatch(off, 40, &v);
    seen += v.count;
    off += uint32_t(v.count);
    if (v.end_of_share) break;
  }
  EXPECT_EQ(seen, 95);
}

}  // namespace
}  // namespace adam::data_server
