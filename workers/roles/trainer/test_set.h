// The test set a trainer evaluates the global model on, and its last evaluation: the accuracy,
// the per-class counts and the weights it scored (kept for the model file). Owned by the trainer's
// main thread, which fetches, evaluates and reports from one thread: no lock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/role_events.h"
#include "core/status.h"
#include "trainer/data_client.h"

namespace adam::trainer {

class TestSet {
 public:
  // Every test image the data server holds, in batches of up to 4096; each image is
  // `image_bytes` bytes. DataLoss when a batch's sizes do not match its count.
  Status Fetch(DataClient& data, int64_t image_bytes);
  // The data server's class names, in label order (may be empty: classes are then numbered).
  void SetClassNames(std::vector<std::string> names) { class_names_ = std::move(names); }

  int count() const { return int(labels_.size()); }
  const uint8_t* pixels() const { return reinterpret_cast<const uint8_t*>(pixels_.data()); }
  const uint8_t* labels() const { return reinterpret_cast<const uint8_t*>(labels_.data()); }
  const std::vector<std::string>& class_names() const { return class_names_; }

  // An evaluation: `predicted` holds one class per test image (-1: none), `accuracy` its share
  // right; `weights` (empty: none kept) the model it scored. Labels of `classes` or more are not
  // counted per class.
  void Record(const std::vector<int>& predicted, int classes, double accuracy,
              std::vector<float> weights);
  // Per class of the last evaluation: its name (or number), test images, and those right.
  std::vector<events::ClassCount> PerClass() const;
  // The weights of the last evaluation that kept them, and that evaluation's accuracy (-1: none).
  const std::vector<float>& weights() const { return weights_; }
  double weights_accuracy() const { return weights_accuracy_; }

 private:
  std::string pixels_, labels_;
  std::vector<std::string> class_names_;
  std::vector<int64_t> class_images_, class_correct_;
  std::vector<float> weights_;
  double weights_accuracy_ = -1;
};

}  // namespace adam::trainer
