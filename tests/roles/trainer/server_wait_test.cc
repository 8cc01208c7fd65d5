// ServerWait on a fake clock: a trainer's client asks again every pause until the bound has
// passed, counting the seconds it waited; no test here sleeps.
#include "trainer/server_wait.h"

#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <atomic>
#include <thread>

#include "core/clock.h"
#include "testing/wait.h"

namespace adam::trainer {
namespace {

using std::chrono::milliseconds;

TEST(ServerWait, TriesEveryPauseUntilTheBoundOfItsClock) {
  prometheus::Registry reg;
  prometheus::Counter& waits = prometheus::BuildCounter().Name("w").Register(reg).Add({});
  prometheus::Gauge& waiting = prometheus::BuildGauge().Name("g").Register(reg).Add({});
  FakeClock clock;
  const Clock::TimePoint start = clock.Now();
  ServerWait wait(milliseconds(1000), &waits, &waiting, &clock, milliseconds(100));
  std::atomic<int> tries{0};
  std::atomic<bool> gave_up{false};
  std::thread caller([&] {
    while (wait.Again("ps-0", "connection refused")) ++tries;
    gave_up = true;
  });
  for (int i = 1; i <= 10; ++i) {
    ASSERT_TRUE(clock.AwaitWaiters(1)) << "try " << i;
    EXPECT_EQ(waiting.Value(), 1.0);  // waiting, for the gauge
    clock.Advance(milliseconds(100));
    ASSERT_TRUE(testing::Eventually([&] { return tries.load() == i || gave_up.load(); }));
  }
  caller.join();
  EXPECT_TRUE(gave_up.load());
  EXPECT_EQ(tries.load(), 10);  // at 0, 100, ..., 900 ms; refused at 1,000 ms
  EXPECT_EQ(clock.Now() - start, milliseconds(1000));
  EXPECT_DOUBLE_EQ(waits.Value(), 1.0);
  EXPECT_EQ(waiting.Value(), 0.0);
  EXPECT_TRUE(wait.waited());
  EXPECT_EQ(wait.Expired(), "not back within 1 s");
}

}  // namespace
}  // namespace adam::trainer
