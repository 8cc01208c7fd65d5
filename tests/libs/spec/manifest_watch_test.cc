// ManifestWatcher: a running role follows its job's manifest file, on a fake clock.
#include "spec/manifest_watch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>

#include "testing/manifest.h"
#include "testing/tmp_dir.h"
#include "testing/wait.h"

namespace adam::spec {
namespace {

// DIR/job.yaml with `trainers` trainers; its path.
std::string WriteJob(const testing::TmpDir& dir, int trainers) {
  return testing::Manifest(dir, "", "trainer: {replicas: " + std::to_string(trainers) + "}");
}

TEST(ManifestWatcher, CallsBackOnAParsedChangeOnly) {
  testing::TmpDir dir;
  const std::string path = WriteJob(dir, 2);
  std::vector<int> seen;
  ManifestWatcher w(path, [&](const AdamJob& job) { seen.push_back(job.roles.trainer.replicas); });
  EXPECT_FALSE(w.Poll());  // the text it started from
  WriteJob(dir, 4);
  EXPECT_TRUE(w.Poll());
  EXPECT_FALSE(w.Poll());  // unchanged since
  testing::WriteText(path, "spec: [not, a, job");
  EXPECT_FALSE(w.Poll());  // logged, ignored
  std::filesystem::remove(path);
  EXPECT_FALSE(w.Poll());  // gone for a moment (a ConfigMap's swap)
  WriteJob(dir, 3);
  EXPECT_TRUE(w.Poll());
  EXPECT_EQ(seen, (std::vector<int>{4, 3}));
}

TEST(ManifestWatcher, PollsEveryPeriodOfItsClock) {
  testing::TmpDir dir;
  const std::string path = WriteJob(dir, 2);
  FakeClock clock;
  std::atomic<int> trainers{2};
  ManifestWatcher w(
      path, [&](const AdamJob& job) { trainers = job.roles.trainer.replicas; }, &clock,
      std::chrono::seconds(2));
  w.Start();
  ASSERT_TRUE(clock.AwaitWaiters(1));
  WriteJob(dir, 5);
  clock.Advance(std::chrono::seconds(1));  // not yet a period
  ASSERT_TRUE(clock.AwaitWaiters(1));
  EXPECT_EQ(trainers.load(), 2);
  clock.Advance(std::chrono::seconds(1));
  EXPECT_TRUE(testing::Eventually([&] { return trainers.load() == 5; }));
}

// The servers' follower: set(n) only when the trainer count itself changed, not for another
// field's edit; nothing followed without a path.
TEST(ManifestWatcher, FollowTrainerCountSetsOnlyANewCount) {
  testing::TmpDir dir;
  WriteJob(dir, 2);
  std::vector<int> set;
  FakeClock clock;  // never advanced: only the test's polls read the file
  auto follower = FollowTrainerCount(
      dir.File("job.yaml"), 2, [&](int n) { set.push_back(n); }, &clock);
  ASSERT_NE(follower, nullptr);
  testing::Manifest(dir, "epochs: 3", "trainer: {replicas: 2}");  // another field
  EXPECT_TRUE(follower->Poll());
  WriteJob(dir, 4);
  EXPECT_TRUE(follower->Poll());
  WriteJob(dir, 1);
  EXPECT_TRUE(follower->Poll());
  EXPECT_EQ(set, (std::vector<int>{4, 1}));
  EXPECT_EQ(FollowTrainerCount("", 2, [](int) {}), nullptr);
}

// The controller's and the launcher's follower: the parameter-server count, not the trainers'.
TEST(ManifestWatcher, FollowParamServerCountSetsOnlyANewServerCount) {
  testing::TmpDir dir;
  auto job = [&](int servers, int trainers) {
    testing::Manifest(
        dir, "",
        "controller: {replicas: 3}, parameterServer: {replicas: " + std::to_string(servers) +
            ", copies: 3}, trainer: {replicas: " + std::to_string(trainers) + "}");
  };
  job(3, 2);
  std::vector<int> set;
  FakeClock clock;  // never advanced: only the test's polls read the file
  auto follower = FollowParamServerCount(
      dir.File("job.yaml"), 3, [&](int n) { set.push_back(n); }, &clock);
  ASSERT_NE(follower, nullptr);
  job(3, 5);  // the trainers changed
  EXPECT_TRUE(follower->Poll());
  job(4, 5);
  EXPECT_TRUE(follower->Poll());
  job(3, 5);
  EXPECT_TRUE(follower->Poll());
  EXPECT_EQ(set, (std::vector<int>{4, 3}));
  EXPECT_EQ(FollowParamServerCount("", 3, [](int) {}), nullptr);
}

}  // namespace
}  // namespace adam::spec
