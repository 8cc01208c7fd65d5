// The trainers' figures for a job's status, from their /metrics samples: trainer 0's epoch and
// accuracy, the job's images/s, the unpinned trainers; only running trainer pods count.
#include "reconcile/figures.h"

#include <gtest/gtest.h>

#include <map>

namespace adam::op {
namespace {

using Sample = kube::MetricsCache::Sample;

Json Trainer(int index, const std::string& phase = "Running") {
  return {{"metadata",
           {{"name", "job-trainer-" + std::to_string(index)},
            {"labels", {{kRoleLabel, "trainer"}, {kIndexLabel, std::to_string(index)}}}}},
          {"status", {{"phase", phase}}}};
}

// Samples by pod name, newest first; `t0` plus the seconds each was taken at.
struct Samples {
  Clock::TimePoint t0 = Clock::TimePoint() + std::chrono::hours(1);
  std::map<std::string, std::vector<Sample>> by_pod;
  void Add(const Json& pod, double seconds, std::map<std::string, double> values) {
    auto& v = by_pod[pod["metadata"]["name"].get<std::string>()];
    v.insert(v.begin(),
             Sample{std::move(values), t0 + std::chrono::duration_cast<Clock::Duration>(
                                                std::chrono::duration<double>(seconds))});
  }
  TrainerSamples Of() const {
    return [this](const Json& pod) {
      auto it = by_pod.find(pod["metadata"]["name"].get<std::string>());
      return it == by_pod.end() ? std::vector<Sample>{} : it->second;
    };
  }
};

TEST(TrainerFigures, TrainerZerosEpochAndAccuracyAreTheJobs) {
  const std::vector<Json> pods = {Trainer(0), Trainer(1)};
  Samples s;
  s.Add(pods[0], 0, {{"adam_trainer_epoch", 3}, {"adam_trainer_test_accuracy", 0.912345}});
  s.Add(pods[1], 0, {{"adam_trainer_epoch", 4}, {"adam_trainer_test_accuracy", 0.95}});
  TrainerFigures f = ReadTrainerFigures(pods, s.Of());
  EXPECT_EQ(f.epoch, 3);
  EXPECT_EQ(f.test_accuracy, 0.9123);
  EXPECT_FALSE(f.images_per_second.has_value());  // one sample each: no rate yet
  // Before trainer 0's first evaluation its accuracy is 0: none, not 0%.
  s.by_pod.clear();
  s.Add(pods[0], 0, {{"adam_trainer_epoch", 0}, {"adam_trainer_test_accuracy", 0}});
  f = ReadTrainerFigures(pods, s.Of());
  EXPECT_EQ(f.epoch, 0);
  EXPECT_FALSE(f.test_accuracy.has_value());
  // No trainer answered: nothing.
  f = ReadTrainerFigures(pods, Samples{}.Of());
  EXPECT_FALSE(f.epoch || f.test_accuracy || f.images_per_second);
}

TEST(TrainerFigures, ImagesPerSecondIsEveryTrainersRateBetweenItsLastTwoSamples) {
  const std::vector<Json> pods = {Trainer(0), Trainer(1), Trainer(2), Trainer(3)};
  Samples s;
  s.Add(pods[0], 0, {{"adam_trainer_images_total", 1000}});  // an older one, not read
  s.Add(pods[0], 10, {{"adam_trainer_images_total", 5000}});
  s.Add(pods[0], 10.5, {{"adam_trainer_images_total", 6000}});  // 2,000/s
  s.Add(pods[1], 0, {{"adam_trainer_images_total", 100}});
  s.Add(pods[1], 1, {{"adam_trainer_images_total", 400.4}});  // 300.4/s
  s.Add(pods[2], 0, {{"adam_trainer_images_total", 9000}});
  s.Add(pods[2], 1, {{"adam_trainer_images_total", 50}});  // restarted: counts 0, not negative
  s.Add(pods[3], 5, {{"adam_trainer_images_total", 10}});
  s.Add(pods[3], 5, {{"adam_trainer_images_total", 90}});  // no time between: no rate
  const TrainerFigures f = ReadTrainerFigures(pods, s.Of());
  ASSERT_TRUE(f.images_per_second.has_value());
  EXPECT_EQ(*f.images_per_second, 2300);
}

TEST(TrainerFigures, OnlyRunningTrainerPodsCount) {
  Json going = Trainer(1);
  going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  Json server = Trainer(2);
  server["metadata"]["labels"][kRoleLabel] = "ps";
  const std::vector<Json> pods = {Trainer(0, "Pending"), going, server, Trainer(3, "Succeeded")};
  Samples s;
  for (const Json& p : pods) {
    s.Add(p, 0,
          {{"adam_trainer_epoch", 7}, {"adam_trainer_images_total", 0}, {"adam_cpu_pinned", 1}});
    s.Add(p, 1,
          {{"adam_trainer_epoch", 7}, {"adam_trainer_images_total", 99}, {"adam_cpu_pinned", 1}});
  }
  const TrainerFigures f = ReadTrainerFigures(pods, s.Of());
  EXPECT_FALSE(f.epoch || f.images_per_second);
  EXPECT_EQ(f.pinned, 0);
}

TEST(TrainerFigures, TheUnpinnedTrainersAreNamed) {
  const std::vector<Json> pods = {Trainer(0), Trainer(1), Trainer(2)};
  Samples s;
  s.Add(pods[0], 0, {{"adam_cpu_pinned", 1}});
  s.Add(pods[1], 0, {{"adam_cpu_pinned", 0}});
  s.Add(pods[2], 0, {{"adam_trainer_epoch", 1}});  // an older trainer that does not say
  const TrainerFigures f = ReadTrainerFigures(pods, s.Of());
  EXPECT_EQ(f.pinned, 1);
  EXPECT_EQ(f.unpinned, std::vector<std::string>{"job-trainer-1"});
}

}  // namespace
}  // namespace adam::op
