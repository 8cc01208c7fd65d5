#include "trainer/test_set.h"

namespace adam::trainer {

Status TestSet::Fetch(DataClient& data, int64_t image_bytes) {
  for (uint32_t offset = 0;;) {
    adam::v1::GetTestBatchRequest req;
    req.set_offset(offset);
    req.set_max_count(4096);
    adam::v1::Batch b;
    ADAM_RETURN_IF_ERROR(data.GetTestBatch(req, &b));
    ADAM_RETURN_IF_ERROR(CheckBatchSizes(b, image_bytes, "a test batch"));
    pixels_ += b.pixels();
    labels_ += b.labels();
    offset += b.count();
    if (b.end_of_share() || b.count() == 0) break;
  }
  return OkStatus();
}

void TestSet::Record(const std::vector<int>& predicted, int classes, double accuracy,
                     std::vector<float> weights) {
  const uint8_t* l = labels();
  class_images_.assign(size_t(classes), 0);
  class_correct_.assign(size_t(classes), 0);
  for (size_t i = 0; i < predicted.size() && i < labels_.size(); ++i)
    if (l[i] < size_t(classes)) {
      ++class_images_[l[i]];
      class_correct_[l[i]] += predicted[i] == l[i];
    }
  if (!weights.empty()) {
    weights_ = std::move(weights);
    weights_accuracy_ = accuracy;
  }
}

std::vector<events::ClassCount> TestSet::PerClass() const {
  std::vector<events::ClassCount> out;
  for (size_t c = 0; c < class_images_.size(); ++c)
    out.push_back({.name = c < class_names_.size() ? class_names_[c] : std::to_string(c),
                   .images = class_images_[c],
                   .correct = class_correct_[c]});
  return out;
}

}  // namespace adam::trainer
