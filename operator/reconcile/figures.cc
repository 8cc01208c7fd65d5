// The trainers' figures for the job's status.
#include "reconcile/figures.h"

#include <algorithm>
#include <cmath>

namespace adam::op {

TrainerFigures ReadTrainerFigures(const std::vector<Json>& pods, const TrainerSamples& samples) {
  TrainerFigures f;
  double rate = 0;
  bool any_rate = false;
  for (const Json& pod : pods) {
    if (PodRoleOf(pod) != PodRole::kTrainer || PodPhase(pod) != "Running" || HasDeletion(pod))
      continue;
    const std::vector<kube::MetricsCache::Sample> got = samples(pod);
    if (got.empty()) continue;  // not answered yet: the next look will tell
    const auto& m = got[0].values;
    if (Label(pod, kIndexLabel) == "0") {
      if (auto e = m.find("adam_trainer_epoch"); e != m.end()) f.epoch = int64_t(e->second);
      if (auto a = m.find("adam_trainer_test_accuracy"); a != m.end() && a->second > 0)
        f.test_accuracy = std::round(a->second * 10000) / 10000;
    }
    if (auto p = m.find("adam_cpu_pinned"); p != m.end()) {
      if (p->second > 0)
        ++f.pinned;
      else
        f.unpinned.push_back(pod["metadata"].value("name", ""));
    }
    if (got.size() < 2) continue;
    auto now_images = m.find("adam_trainer_images_total");
    auto old_images = got[1].values.find("adam_trainer_images_total");
    const double dt = std::chrono::duration<double>(got[0].at - got[1].at).count();
    if (now_images == m.end() || old_images == got[1].values.end() || dt <= 0) continue;
    // A restarted trainer counts from 0 again: no negative rate.
    rate += std::max(0.0, now_images->second - old_images->second) / dt;
    any_rate = true;
  }
  if (any_rate) f.images_per_second = std::round(rate);
  return f;
}

}  // namespace adam::op
