// PushGate: the workers held at the drift limit until a sync lets images go or the gate closes,
// the sync thread woken when a push is due or stopped. Part of the suite ThreadSanitizer runs
// (scripts/tsan.sh).
#include "trainer/push_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "testing/wait.h"

namespace adam::trainer {
namespace {

constexpr int64_t kEvery = 10, kLimit = kMaxUnsyncedPushes * kEvery;

// A worker thread at Admit; `done` once it returned, with what it returned.
struct HeldWorker {
  explicit HeldWorker(PushGate* g)
      : thread([this, g] {
          drift = g->Admit();
          done = true;
        }) {}
  std::atomic<bool> done{false}, drift{false};
  std::thread thread;  // last: starts once the flags exist
};

TEST(PushGate, UnderTheLimitAWorkerPassesWithoutWaiting) {
  PushGate gate(kEvery, false);
  gate.Trained(kLimit - 1);
  EXPECT_FALSE(gate.Admit());
  EXPECT_EQ(gate.drift_waits(), 0);
  EXPECT_EQ(gate.pending(), kLimit - 1);
}

TEST(PushGate, AtTheLimitAWorkerWaitsUntilASyncLetsImagesGo) {
  PushGate gate(kEvery, false);
  gate.Trained(kLimit);
  HeldWorker w(&gate);
  // Counted before it waits: from here it is inside Admit, and the count (at the limit) holds it.
  ASSERT_TRUE(testing::Eventually([&] { return gate.drift_waits() == 1; }));
  EXPECT_FALSE(w.done.load());
  gate.Synced(1);
  w.thread.join();
  EXPECT_TRUE(w.done.load());
  EXPECT_TRUE(w.drift.load());
  EXPECT_EQ(gate.pending(), kLimit - 1);
}

TEST(PushGate, CloseEndsAWorkersWaitForGood) {
  PushGate gate(kEvery, false);
  gate.Trained(kLimit);
  HeldWorker w(&gate);
  ASSERT_TRUE(testing::Eventually([&] { return gate.drift_waits() == 1; }));
  EXPECT_FALSE(w.done.load());
  gate.Close();
  w.thread.join();
  EXPECT_TRUE(w.done.load());
  gate.Trained(kLimit);
  EXPECT_TRUE(gate.Admit());  // still over the limit, but closed: it passes
}

TEST(PushGate, InLockstepTheLimitIsOnePushAndItsWaitsAreNotDrift) {
  PushGate gate(kEvery, true);
  gate.Trained(kEvery - 1);
  EXPECT_FALSE(gate.Admit());
  gate.Trained(1);
  HeldWorker w(&gate);
  gate.Synced(kEvery);  // before or after the worker came to the gate: it passes either way
  w.thread.join();
  EXPECT_FALSE(w.drift.load());
  EXPECT_EQ(gate.drift_waits(), 0);
}

TEST(PushGate, TheSyncThreadWakesWhenAPushIsDue) {
  FakeClock clock;
  PushGate gate(kEvery, false);
  gate.Trained(kEvery - 1);
  std::atomic<bool> due{false};
  std::thread sync([&] { due = gate.AwaitDue(&clock, std::chrono::hours(1)); });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  gate.Trained(1);  // the tenth image: due, with no time passing
  sync.join();
  EXPECT_TRUE(due.load());
}

TEST(PushGate, TheSyncThreadsWaitEndsAtItsTimeoutOrStop) {
  FakeClock clock;
  PushGate gate(kEvery, false);
  std::atomic<bool> due{true};
  std::thread first([&] { due = gate.AwaitDue(&clock, std::chrono::milliseconds(100)); });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  clock.Advance(std::chrono::milliseconds(100));
  first.join();
  EXPECT_FALSE(due.load());
  EXPECT_FALSE(gate.stopped());

  gate.Trained(kEvery);
  gate.Stop();
  EXPECT_TRUE(gate.stopped());
  EXPECT_FALSE(gate.AwaitDue(&clock, std::chrono::hours(1)));  // due, but stopped: at once
}

}  // namespace
}  // namespace adam::trainer
