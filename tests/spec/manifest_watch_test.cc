// ManifestWatcher: a running role follows its job's manifest file, on a fake clock.
#include "spec/manifest_watch.h"

#include <gtest/gtest.h>

#include <atomic>

#include "testing/tmp_dir.h"
#include "testing/wait.h"

namespace adam::spec {
namespace {

std::string Manifest(int trainers) {
  return R"(apiVersion: adam.dev/v1alpha1
kind: AdamJob
metadata: {name: watched}
spec:
  dataset:
    train: {images: a.idx, labels: b.idx}
    test: {images: c.idx, labels: d.idx}
  model:
    input: {channels: 1, height: 28, width: 28}
    layers: [{type: softmax, classes: 10}]
  roles: {trainer: {replicas: )" +
         std::to_string(trainers) + "}}\n";
}

TEST(ManifestWatcher, CallsBackOnAParsedChangeOnly) {
  testing::TmpDir dir;
  const std::string path = dir.File("job.yaml");
  testing::WriteText(path, Manifest(2));
  std::vector<int> seen;
  ManifestWatcher w(path, [&](const AdamJob& job) { seen.push_back(job.roles.trainer.replicas); });
  EXPECT_FALSE(w.Poll());  // the text it started from
  testing::WriteText(path, Manifest(4));
  EXPECT_TRUE(w.Poll());
  EXPECT_FALSE(w.Poll());  // unchanged since
  testing::WriteText(path, "spec: [not, a, job");
  EXPECT_FALSE(w.Poll());  // logged, ignored
  std::filesystem::remove(path);
  EXPECT_FALSE(w.Poll());  // gone for a moment (a ConfigMap's swap)
  testing::WriteText(path, Manifest(3));
  EXPECT_TRUE(w.Poll());
  EXPECT_EQ(seen, (std::vector<int>{4, 3}));
}

TEST(ManifestWatcher, PollsEveryPeriodOfItsClock) {
  testing::TmpDir dir;
  const std::string path = dir.File("job.yaml");
  testing::WriteText(path, Manifest(2));
  FakeClock clock;
  std::atomic<int> trainers{2};
  ManifestWatcher w(
      path, [&](const AdamJob& job) { trainers = job.roles.trainer.replicas; }, &clock,
      std::chrono::seconds(2));
  w.Start();
  ASSERT_TRUE(clock.AwaitWaiters(1));
  testing::WriteText(path, Manifest(5));
  clock.Advance(std::chrono::seconds(1));  // not yet a period
  ASSERT_TRUE(clock.AwaitWaiters(1));
  EXPECT_EQ(trainers.load(), 2);
  clock.Advance(std::chrono::seconds(1));
  EXPECT_TRUE(testing::Eventually([&] { return trainers.load() == 5; }));
}

}  // namespace
}  // namespace adam::spec
