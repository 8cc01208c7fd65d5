// ClockGate: the consistency models' pull gate.
#include "param_server/clock_gate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace adam::ps {
namespace {

using ::testing::HasSubstr;

TEST(ClockGate, ModesParkAndReleaseExactlyAtTheirBound) {
  std::vector<std::pair<int, bool>> ran;
  auto rec = [&](int id) { return [&ran, id](bool ok) { ran.push_back({id, ok}); }; };
  ClockGate sync(3, spec::Consistency::kSync, 0);
  sync.WhenAllowed(0, rec(0));
  EXPECT_EQ(ran.size(), 1u);  // clock 0: nothing to wait for
  sync.Advance(0, 1, false);
  sync.WhenAllowed(1, rec(1));
  sync.Advance(1, 1, false);
  EXPECT_EQ(ran.size(), 1u);
  EXPECT_EQ(sync.parked(), 1u);
  sync.Advance(2, 1, false);
  ASSERT_EQ(ran.size(), 2u);
  EXPECT_EQ(ran[1], std::make_pair(1, true));
  sync.Advance(1, 0, false);  // clocks never go back
  EXPECT_EQ(sync.MinClock(), 1u);
  sync.WhenAllowed(5, rec(5));
  sync.Close();
  EXPECT_EQ(ran.back(), std::make_pair(5, false));

  ClockGate bounded(2, spec::Consistency::kBounded, 3);
  EXPECT_EQ(bounded.Needed(2), 0u);
  EXPECT_EQ(bounded.Needed(10), 7u);
  ClockGate async(2, spec::Consistency::kAsync, 0);
  EXPECT_EQ(async.Needed(1000), 0u);
  async.Advance(0, 9, false);
  EXPECT_EQ(async.Spread(), 9u);
  async.Advance(1, 4, true);  // left: only trainer 0 counts
  EXPECT_EQ(async.MinClock(), 9u);
  EXPECT_EQ(async.Spread(), 0u);
}

// A pull parked with an expiry that nothing releases in time is answered by the gate's timer
// with the trainers it waited for; one released in time runs as always; Close answers the rest.
TEST(ClockGate, AnExpiredPullNamesTheTrainersItWaitedFor) {
  FakeClock clock;
  ClockGate gate(3, spec::Consistency::kSync, 0, &clock);
  gate.Advance(0, 3, false);
  gate.Advance(1, 1, false);
  gate.Advance(2, 2, true);  // left: holds nobody back
  EXPECT_EQ(gate.WaitingFor(3), "trainer 1 (at epoch 0 push 1; epoch 0 push 3 needed)");
  std::promise<std::string> expired;
  std::atomic<int> ran{0};
  gate.WhenAllowed(
      3, [&](bool) { ++ran; }, clock.Now() + std::chrono::milliseconds(100),
      [&](const std::string& why) { expired.set_value(why); });
  std::atomic<int> allowed1{-1}, allowed2{-1};  // -1: not run; else the bool it ran with
  gate.WhenAllowed(
      1, [&](bool ok) { allowed1 = ok; }, clock.Now() + std::chrono::seconds(30),
      [&](const std::string&) { ++ran; });
  EXPECT_EQ(allowed1.load(), 1);  // clock 1 is allowed at once
  gate.WhenAllowed(
      2, [&](bool ok) { allowed2 = ok; }, clock.Now() + std::chrono::seconds(30),
      [&](const std::string&) { ++ran; });
  auto f = expired.get_future();
  // The gate's timer waits for the first expiry; nothing expires before the clock reaches it.
  ASSERT_TRUE(clock.AwaitWaiters(1));
  clock.Advance(std::chrono::milliseconds(99));
  ASSERT_TRUE(clock.AwaitWaiters(1));
  EXPECT_EQ(f.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  clock.Advance(std::chrono::milliseconds(1));
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(f.get(), "trainer 1 (at epoch 0 push 1; epoch 0 push 3 needed)");
  EXPECT_EQ(gate.parked(), 1u);  // the clock-2 pull waits on
  gate.Advance(1, 2, false);
  EXPECT_EQ(gate.parked(), 0u);
  EXPECT_EQ(allowed2.load(), 1);  // it ran allowed, not expired or closed
  EXPECT_EQ(ran.load(), 0);
}

// Project Adam's MNIST model: two conv + pool layers, two dense layers of 400, softmax.

// Trainers scaled while the job runs: one added joins at the clock the others reached (no pull
// waits for pushes it never made), one removed holds no pull back; async admits a trainer the
// manifest has not told of yet, the other modes only the job's.
TEST(ClockGate, TrainersAddedJoinWhereTheJobIsAndRemovedOnesLeave) {
  std::vector<std::pair<int, bool>> ran;
  auto rec = [&](int id) { return [&ran, id](bool ok) { ran.push_back({id, ok}); }; };
  ClockGate sync(2, spec::Consistency::kSync, 0);
  sync.Advance(0, 5, false);
  sync.Advance(1, 5, false);
  EXPECT_FALSE(sync.Admits(2));
  sync.SetTrainers(3);
  EXPECT_EQ(sync.trainers(), 3);
  EXPECT_TRUE(sync.Admits(2));
  EXPECT_EQ(sync.MinClock(), 5u);  // trainer 2 joined at 5, not at 0
  sync.Advance(0, 6, false);
  sync.Advance(1, 6, false);
  sync.WhenAllowed(6, rec(6));
  EXPECT_EQ(sync.parked(), 1u);  // waits for trainer 2's sixth push
  sync.SetTrainers(2);           // trainer 2 removed before it pushed again
  ASSERT_EQ(ran.size(), 1u);
  EXPECT_EQ(ran[0], std::make_pair(6, true));
  EXPECT_FALSE(sync.Admits(2));
  sync.SetTrainers(3);  // added again: rejoins at the job's clock
  EXPECT_EQ(sync.MinClock(), 6u);

  ClockGate async(2, spec::Consistency::kAsync, 0);
  EXPECT_TRUE(async.Admits(5));
  EXPECT_FALSE(async.Admits(ClockGate::kMaxTrainers));
  EXPECT_FALSE(async.Admits(-1));
  async.Advance(0, 7, false);
  async.Advance(1, 9, false);
  async.Advance(5, 8, false);  // grows; trainers 2..4 joined at 7
  EXPECT_EQ(async.MinClock(), 7u);
  EXPECT_EQ(async.Spread(), 2u);
}

}  // namespace
}  // namespace adam::ps
