// StepRate: the learning rate a trainer's worker trains its next slice of images at. Once per
// epoch (Start, the main thread's, before the epoch's workers run) it is the epoch's rate; with a
// schedule per step (spec.training.learningRateSchedule.per: step) each slice reads the schedule
// again at the share of the epoch trained so far (At, the workers', concurrently with each other).
#pragma once

#include <algorithm>
#include <cstdint>

#include "spec/adamjob.h"

namespace adam::trainer {

class StepRate {
 public:
  // `training` is not owned and outlives this.
  explicit StepRate(const spec::TrainingSpec& training) : training_(training) {}

  // This trainer's images per epoch: its share of the training set (at least 1).
  void SetShare(int64_t images) { share_ = std::max<int64_t>(1, images); }
  // Epoch `epoch` begins with `images` trained before it, in all.
  void Start(int epoch, int64_t images) {
    epoch_ = epoch;
    from_ = images;
    rate_ = float(spec::LearningRateAt(training_, epoch));
  }
  // The rate the epoch began at (its events and messages name it).
  float epoch_rate() const { return rate_; }
  // The rate for the next slice, with `images` trained in all so far.
  float At(int64_t images) const {
    if (!training_.schedule.per_step) return rate_;
    return float(spec::LearningRateAt(training_, epoch_, double(images - from_) / double(share_)));
  }

 private:
  const spec::TrainingSpec& training_;
  int epoch_ = 0;
  int64_t from_ = 0;
  int64_t share_ = 1;
  float rate_ = 0;
};

}  // namespace adam::trainer
