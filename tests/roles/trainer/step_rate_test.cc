// StepRate: a trainer's learning rate per slice of images, once per epoch or, with a schedule per
// step, at the share of its epoch trained.
#include "trainer/step_rate.h"

#include <gtest/gtest.h>

namespace adam::trainer {
namespace {

spec::TrainingSpec Cosine(bool per_step) {
  spec::TrainingSpec t;
  t.epochs = 4;
  t.learning_rate = 0.1;
  t.warmup_epochs = 1;
  t.schedule.type = spec::LearningRateSchedule::Type::kCosine;
  t.schedule.per_step = per_step;
  return t;
}

TEST(StepRate, PerEpochEverySliceTrainsAtTheEpochsRate) {
  const spec::TrainingSpec t = Cosine(false);
  StepRate rate(t);
  rate.SetShare(1000);
  rate.Start(2, 5000);
  EXPECT_FLOAT_EQ(rate.epoch_rate(), float(spec::LearningRateAt(t, 2)));
  for (int64_t images : {5000, 5500, 5999, 7000}) EXPECT_EQ(rate.At(images), rate.epoch_rate());
}

TEST(StepRate, PerStepASliceReadsTheScheduleAtItsShareOfTheEpoch) {
  const spec::TrainingSpec t = Cosine(true);
  StepRate rate(t);
  rate.SetShare(1000);
  // Epoch 0, in the warmup: rising with every slice.
  rate.Start(0, 0);
  EXPECT_FLOAT_EQ(rate.At(0), float(spec::LearningRateAt(t, 0)));
  EXPECT_FLOAT_EQ(rate.At(250), float(spec::LearningRateAt(t, 0, 0.25)));
  EXPECT_LT(rate.At(250), rate.At(500));
  // Epoch 2 began after 2,100 images (an epoch's images are not exactly the share): its place is
  // counted from there, and held at the epoch's end past its share.
  rate.Start(2, 2100);
  EXPECT_FLOAT_EQ(rate.epoch_rate(), float(spec::LearningRateAt(t, 2)));
  EXPECT_FLOAT_EQ(rate.At(2600), float(spec::LearningRateAt(t, 2, 0.5)));
  EXPECT_GT(rate.At(2600), rate.At(2700));
  EXPECT_FLOAT_EQ(rate.At(3500), float(spec::LearningRateAt(t, 2, 1)));
  EXPECT_FLOAT_EQ(rate.At(3500), float(spec::LearningRateAt(t, 3)));
}

TEST(StepRate, AShareOfNoImagesCountsAsOne) {
  const spec::TrainingSpec t = Cosine(true);
  StepRate rate(t);
  rate.SetShare(0);
  rate.Start(1, 10);
  EXPECT_FLOAT_EQ(rate.At(11), float(spec::LearningRateAt(t, 1, 1)));
}

}  // namespace
}  // namespace adam::trainer
