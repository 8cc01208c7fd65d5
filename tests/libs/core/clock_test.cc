// FakeClock: time moves only when advanced; a thread waiting on it wakes when its deadline is
// reached, not before, and a notification still wakes it early. No test here sleeps.
#include "core/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "core/periodic.h"
#include "testing/wait.h"

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

// Its calendar time starts at a fixed instant and moves with Advance, as do the seconds since.
TEST(FakeClock, WallTimeAndSecondsSinceMoveWithIt) {
  FakeClock clock;
  const Clock::TimePoint t0 = clock.Now();
  EXPECT_EQ(clock.WallNow(), Clock::WallTime(FakeClock::kWallStart));
  clock.Advance(milliseconds(1500));
  EXPECT_EQ(clock.WallNow() - Clock::WallTime(FakeClock::kWallStart), milliseconds(1500));
  EXPECT_DOUBLE_EQ(clock.SecondsSince(t0), 1.5);
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

// AwaitUntil returns true as soon as its condition holds, false when the clock reaches the
// deadline first; SleepFor returns once the clock has moved by its duration.
TEST(FakeClock, AwaitUntilAndSleepForFollowTheClock) {
  FakeClock clock;
  Mutex mu;
  std::condition_variable cv;
  bool ready = false;  // under mu
  bool timed_out_result = true;
  std::thread timing_out([&] {
    MutexLock lock(mu);
    timed_out_result = clock.AwaitFor(lock, cv, milliseconds(50),
                                      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return ready; });
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  clock.Advance(milliseconds(50));
  timing_out.join();
  EXPECT_FALSE(timed_out_result);

  bool met = false;
  std::thread meeting([&] {
    MutexLock lock(mu);
    met = clock.AwaitFor(lock, cv, milliseconds(50),
                         [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return ready; });
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  {
    MutexLock lock(mu);
    ready = true;
    cv.notify_all();
  }
  meeting.join();
  EXPECT_TRUE(met);

  std::atomic<bool> slept{false};
  std::thread sleeper([&] {
    clock.SleepFor(milliseconds(30));
    slept = true;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  clock.Advance(milliseconds(29));
  ASSERT_TRUE(clock.AwaitWaiters(1));  // woken, and waiting again: 1 ms short
  EXPECT_FALSE(slept.load());
  clock.Advance(milliseconds(1));
  sleeper.join();
  EXPECT_TRUE(slept.load());
}

// A waiter woken by its own notification destroys its mutex and condition variable at once,
// while another thread advances the clock without pause: Advance never touches them afterwards
// (run under ASan, a use after free here is reported).
TEST(FakeClock, AWaiterMayDestroyWhatItWaitedOnOnceItsWaitReturns) {
  FakeClock clock;
  std::atomic<bool> done{false};
  std::thread advancer([&] {
    while (!done.load()) clock.Advance(std::chrono::microseconds(1));
  });
  for (int i = 0; i < 2000; ++i) {
    struct Box {
      Mutex mu;
      std::condition_variable cv;
      bool set = false;  // under mu
    };
    auto box = std::make_unique<Box>();
    std::thread setter([&] {
      MutexLock lock(box->mu);
      box->set = true;
      box->cv.notify_all();
    });
    {
      MutexLock lock(box->mu);
      (void)clock.AwaitFor(lock, box->cv, std::chrono::hours(1),
                           [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(box->mu) { return box->set; });
    }
    setter.join();
    box.reset();
  }
  done = true;
  advancer.join();
  EXPECT_EQ(clock.waiters(), 0);
}

// Periodic on a fake clock: one call per interval the clock moves, none in between.
// Periodic on a fake clock, moved 10 ms at a time: called at exactly 50, 100 and 150 ms (the
// clock's time when it ran), at no step between. After each step the test waits until the
// periodic thread has woken and waits again, so a call due at that step has happened.
TEST(Periodic, CallsOncePerIntervalOfItsClock) {
  FakeClock clock;
  const Clock::TimePoint t0 = clock.Now();
  Mutex mu;
  std::vector<Clock::Duration> at;  // under mu
  Periodic p(
      milliseconds(50),
      [&] {
        MutexLock l(mu);
        at.push_back(clock.Now() - t0);
      },
      &clock);
  ASSERT_TRUE(clock.AwaitWaiters(1));
  for (int step = 1; step <= 15; ++step) {
    const int64_t woken = clock.wakeups();
    clock.Advance(milliseconds(10));
    ASSERT_TRUE(testing::Eventually([&] {
      return clock.wakeups() > woken && clock.waiters() == 1;
    })) << "step "
        << step;
  }
  p.Stop();
  MutexLock l(mu);
  EXPECT_EQ(at,
            (std::vector<Clock::Duration>{milliseconds(50), milliseconds(100), milliseconds(150)}));
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

TEST(RealClock, WallTimeIsTheSystemClocks) {
  const auto before = std::chrono::system_clock::now();
  const Clock::WallTime wall = Clock::Real()->WallNow();
  EXPECT_GE(wall, before);
  EXPECT_LE(wall, std::chrono::system_clock::now());
}

}  // namespace
}  // namespace adam
