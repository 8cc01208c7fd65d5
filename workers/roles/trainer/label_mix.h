// LabelMix: the training labels a trainer has been sent, counted (the prefetch thread's Add), and
// what guessing costs on them (the main thread's GuessingLoss, at the end of each epoch): the
// least mean cross-entropy a model whose output ignores its input can reach, the entropy of the
// labels' distribution. A model that collapsed to chance trains at that loss for good
// (trainer.h: CollapseMessage); on a training set with some classes rarer than others, or absent,
// that is below ln(classes). Thread-safe.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/mutex.h"

namespace adam::trainer {

class LabelMix {
 public:
  explicit LabelMix(int classes) : counts_(size_t(std::max(1, classes)), 0) {}

  // One batch's labels, a byte each; a label past the classes is not counted (the trainer
  // refuses such a batch).
  void Add(const std::string& labels) {
    MutexLock lock(mu_);
    for (unsigned char l : labels)
      if (l < counts_.size()) ++counts_[l];
  }

  // The entropy (nats) of the labels seen, each image's target smoothed by `smoothing` s (its
  // class 1 - s + s / classes, every other s / classes) as the loss is: -sum_c q_c ln q_c over
  // the mean target q. ln(classes) before any label.
  double GuessingLoss(double smoothing) const {
    MutexLock lock(mu_);
    int64_t total = 0;
    for (int64_t c : counts_) total += c;
    const double classes = double(counts_.size());
    if (total == 0) return std::log(classes);
    double h = 0;
    for (int64_t c : counts_) {
      const double q = (1 - smoothing) * double(c) / double(total) + smoothing / classes;
      if (q > 0) h -= q * std::log(q);
    }
    return h;
  }

 private:
  mutable Mutex mu_;
  std::vector<int64_t> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace adam::trainer
