// The trainers' figures a job's status carries, from the samples of their /metrics
// (kube::MetricsCache's, newest first): trainer 0's epoch and test accuracy (trainer 0 evaluates
// after each epoch), the job's images/s (the sum of every trainer's rate between its last two
// samples) and which trainers run unpinned (their cpuset is not their own). A pure function over
// the pods and their samples, part of a pass's observe phase. Thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kube/scrape.h"
#include "reconcile/observe.h"

namespace adam::op {

struct TrainerFigures {
  std::optional<int64_t> epoch;             // trainer 0's adam_trainer_epoch
  std::optional<double> test_accuracy;      // trainer 0's, to 4 places; none before it evaluated
  std::optional<double> images_per_second;  // whole images; none until a trainer has two samples
  int pinned = 0;                           // trainers whose adam_cpu_pinned is 1
  std::vector<std::string> unpinned;        // the pods whose adam_cpu_pinned is 0
};

// The samples of one trainer pod's /metrics, newest first; none while it has not answered.
using TrainerSamples = std::function<std::vector<kube::MetricsCache::Sample>(const Json& pod)>;

// The figures of the running trainer pods of `pods` (pods being deleted left out).
TrainerFigures ReadTrainerFigures(const std::vector<Json>& pods, const TrainerSamples& samples);

}  // namespace adam::op
