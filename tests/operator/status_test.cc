// The status phase: status.roles written from the pods counted, and whether a pass's status is
// written at all (a throughput that moves alone waits for every sixth status period).
#include "reconcile/status.h"

#include <gtest/gtest.h>

#include "rendered_job.h"

namespace adam::op {
namespace {

using std::chrono::milliseconds;
using testing_job::RenderJob;

TEST(Status, RoleCountsAreWrittenAndRestartsKept) {
  testing_job::RenderedJob r = RenderJob("fashion-mnist");  // no controller group
  std::map<PodRole, RoleCount> counts = CountPods(r.job, r.pods, r.sets);
  counts[PodRole::kTrainer] = {2, 1, 1, 1, 0};
  Json status = {{"roles", {{"trainer", {{"restarts", 3}}}}}};
  PutRoleCounts(counts, &status);
  const Json& trainer = status["roles"]["trainer"];
  EXPECT_EQ(trainer.size(), 6u) << trainer.dump();
  const std::pair<const char*, int> want[] = {{"desired", 2},   {"active", 1}, {"ready", 1},
                                              {"succeeded", 1}, {"failed", 0}, {"restarts", 3}};
  for (const auto& [key, value] : want) EXPECT_EQ(trainer.value(key, -1), value) << key;
  EXPECT_EQ(status["roles"]["ps"]["restarts"], 0);  // listed the first time
  EXPECT_EQ(status["roles"]["ps"]["desired"], r.job.roles.parameter_server.replicas);
  EXPECT_FALSE(status["roles"].contains("controller")) << status.dump();  // desires none
  // A role once listed stays, counted, though it desires none now.
  status["roles"]["controller"] = {{"desired", 3}, {"restarts", 1}};
  PutRoleCounts(counts, &status);
  EXPECT_EQ(status["roles"]["controller"]["desired"], 0);
  EXPECT_EQ(status["roles"]["controller"]["restarts"], 1);
  EXPECT_EQ(TrainerSelector("fm"), "adam.dev/job=fm,adam.dev/role=trainer");
}

TEST(Status, AThroughputThatMovesAloneWaitsForEverySixthPeriod) {
  const milliseconds period(10000);
  const Json old = {{"phase", "Running"}, {"epoch", 2}, {"imagesPerSecond", 4000.0}};
  EXPECT_EQ(DecideStatusWrite(old, old, milliseconds(1), period), StatusWriteDecision::kNone);
  Json moved = old;
  moved["imagesPerSecond"] = 4100.0;
  EXPECT_EQ(DecideStatusWrite(moved, old, milliseconds(59999), period), StatusWriteDecision::kHeld);
  EXPECT_EQ(DecideStatusWrite(moved, old, milliseconds(60000), period),
            StatusWriteDecision::kWrite);
  // Never written by this operator (a restart of it): written.
  EXPECT_EQ(DecideStatusWrite(moved, old, std::nullopt, period), StatusWriteDecision::kWrite);
  // Anything else moving is written at once, with the throughput.
  Json epoch = moved;
  epoch["epoch"] = 3;
  EXPECT_EQ(DecideStatusWrite(epoch, old, milliseconds(1), period), StatusWriteDecision::kWrite);
  // The first throughput is written at once too.
  Json first = old;
  first.erase("imagesPerSecond");
  EXPECT_EQ(DecideStatusWrite(old, first, milliseconds(1), period), StatusWriteDecision::kWrite);
}

// Each failure in a row doubles the wait before the role's pods are made again, up to the
// most; a failure long after the last starts the count again.
TEST(Status, ABackoffDoublesUpToItsMostAndStartsAgainAfterAQuietSpell) {
  const milliseconds initial(10000), most(40000);
  const auto t0 = std::chrono::system_clock::time_point{} + std::chrono::hours(1000);
  RoleBackoff b = NextBackoff(0, std::nullopt, t0, initial, most);
  EXPECT_EQ(b.recent_failures, 1);
  EXPECT_EQ(b.delay, milliseconds(0));  // the first failure: made again at once
  const milliseconds want[] = {milliseconds(10000), milliseconds(20000), milliseconds(40000),
                               milliseconds(40000)};
  auto last = t0;
  for (int n = 2; n <= 5; ++n) {
    const auto now = last + std::chrono::seconds(5);
    b = NextBackoff(n - 1, last, now, initial, most);
    EXPECT_EQ(b.recent_failures, n);
    EXPECT_EQ(b.delay, want[n - 2]) << "failure " << n;
    last = now;
  }
  // Within twice the most since the last failure the count goes on; at it, it starts again.
  EXPECT_EQ(NextBackoff(5, last, last + milliseconds(79999), initial, most).recent_failures, 6);
  b = NextBackoff(5, last, last + milliseconds(80000), initial, most);
  EXPECT_EQ(b.recent_failures, 1);
  EXPECT_EQ(b.delay, milliseconds(0));
  // No initial back-off: failures are counted, and nothing waits.
  b = NextBackoff(3, last, last + milliseconds(1), milliseconds(0), most);
  EXPECT_EQ(b.recent_failures, 4);
  EXPECT_EQ(b.delay, milliseconds(0));
}

}  // namespace
}  // namespace adam::op
