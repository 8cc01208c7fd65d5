// FakeClock: time moves only when advanced; a thread waiting on it wakes when its deadline is
// reached, not before, and a notification still wakes it early. No test here sleeps.
#include "core/clock.h"

#include <gtest/gtest.h>

#include <thread>

namespace adam {
namespace {

using std::chrono::milliseconds;

TEST(FakeClock, MovesOnlyWhenAdvanced) {
  FakeClock clock;
  const Clock::TimePoint t0 = clock.Now();
  EXPECT_EQ(clock.Now(), t0);
  clock.Advance(milliseconds(250));
  EXPECT_EQ(clock.Now() - t0, milliseconds(250));
}

TEST(FakeClock, AWaitPastItsDeadlineReturnsAtOnce) {
  FakeClock clock;
  Mutex mu;
  std::condition_variable cv;
  MutexLock lock(mu);
  EXPECT_FALSE(clock.WaitUntil(lock, cv, clock.Now()));
  EXPECT_FALSE(clock.WaitUntil(lock, cv, clock.Now() - milliseconds(1)));
  EXPECT_EQ(clock.waiters(), 0);
}

// The waiting thread loops as callers of a condition variable do, so it returns only once the
// clock reaches its deadline, however many times it is woken before.
TEST(FakeClock, AWaiterWakesAtItsDeadlineAndNotBefore) {
  FakeClock clock;
  Mutex mu;
  std::condition_variable cv;
  const Clock::TimePoint deadline = clock.Now() + milliseconds(100);
  bool timed_out = false;
  std::thread waiter([&] {
    MutexLock lock(mu);
    while (clock.WaitUntil(lock, cv, deadline)) {
    }
    timed_out = true;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  clock.Advance(milliseconds(60));  // 40 ms short: it waits again
  ASSERT_TRUE(clock.AwaitWaiters(1));
  {
    MutexLock lock(mu);
    EXPECT_FALSE(timed_out);
  }
  clock.Advance(milliseconds(40));
  waiter.join();
  EXPECT_TRUE(timed_out);
  EXPECT_EQ(clock.waiters(), 0);
}

TEST(FakeClock, ANotificationWakesAWaiterBeforeItsDeadline) {
  FakeClock clock;
  Mutex mu;
  std::condition_variable cv;
  bool ready = false;  // under mu
  bool woken_in_time = false;
  std::thread waiter([&] {
    MutexLock lock(mu);
    const Clock::TimePoint deadline = clock.Now() + std::chrono::hours(1);
    while (!ready && clock.WaitUntil(lock, cv, deadline)) {
    }
    woken_in_time = ready && clock.Now() < deadline;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  {
    MutexLock lock(mu);
    ready = true;
  }
  cv.notify_all();
  waiter.join();
  EXPECT_TRUE(woken_in_time);
}

// Many waiters with different deadlines, woken by one Advance each: none is lost, however the
// Advance interleaves with their checks of the time.
TEST(FakeClock, NoWakeUpIsLostAcrossManyWaiters) {
  FakeClock clock;
  Mutex mu;
  std::condition_variable cv;
  constexpr int kWaiters = 8;
  const Clock::TimePoint start = clock.Now();
  std::vector<std::thread> threads;
  int done = 0;  // under mu
  for (int i = 0; i < kWaiters; ++i)
    threads.emplace_back([&, i] {
      MutexLock lock(mu);
      while (clock.WaitUntil(lock, cv, start + milliseconds(10 * (i + 1)))) {
      }
      ++done;
    });
  for (int i = 0; i < kWaiters; ++i) {
    ASSERT_TRUE(clock.AwaitWaiters(kWaiters - i));
    clock.Advance(milliseconds(10));
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(done, kWaiters);
}

TEST(RealClock, AWaitPastItsDeadlineReturnsFalse) {
  Mutex mu;
  std::condition_variable cv;
  MutexLock lock(mu);
  EXPECT_FALSE(Clock::Real()->WaitUntil(lock, cv, Clock::Real()->Now() - milliseconds(1)));
  // Nobody notifies: the wait ends at the deadline (looping over any spurious wake-up).
  const Clock::TimePoint before = Clock::Real()->Now();
  while (Clock::Real()->WaitUntil(lock, cv, before + milliseconds(1))) {
  }
  EXPECT_GE(Clock::Real()->Now() - before, milliseconds(1));
}

}  // namespace
}  // namespace adam
