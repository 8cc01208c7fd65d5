// UpdatePlan: which dense layers use Adam's activation/error protocol, and what each server gets.
#include "update/update_plan.h"

#include <algorithm>

namespace adam::update {
namespace {

// Adds to `rows` every row of `d` whose weights or bias overlap [lo, hi).
void MarkRows(const DenseLayer& d, int64_t lo, int64_t hi, std::vector<bool>* rows) {
  const int64_t w_end = d.weights + d.units * d.in;
  if (std::max(lo, d.weights) < std::min(hi, w_end)) {
    const int64_t first = (std::max(lo, d.weights) - d.weights) / d.in;
    const int64_t last = (std::min(hi, w_end) - 1 - d.weights) / d.in;
    for (int64_t r = first; r <= last; ++r) (*rows)[size_t(r)] = true;
  }
  for (int64_t i = std::max(lo, d.bias); i < std::min(hi, d.bias + d.units); ++i)
    (*rows)[size_t(i - d.bias)] = true;
}

// Weight deltas: every part of each server's shards not covered by a dense layer of `dense`,
// sorted by shard and offset.
std::vector<std::vector<ShardRange>> DeltasOutside(const shard::ShardMap& map,
                                                   const std::vector<DenseLayer>& dense) {
  std::vector<std::pair<int64_t, int64_t>> excluded;  // [begin, end) flat ranges
  for (const auto& d : dense) {
    excluded.push_back({d.weights, d.weights + d.units * d.in});
    excluded.push_back({d.bias, d.bias + d.units});
  }
  std::sort(excluded.begin(), excluded.end());
  std::vector<std::vector<ShardRange>> delta(size_t(map.num_servers()));
  for (const auto& sh : map.shards()) {
    int64_t pos = sh.offset;
    const int64_t end = sh.offset + sh.count;
    for (const auto& [b, e] : excluded) {
      if (e <= pos || b >= end) continue;
      if (b > pos) delta[size_t(sh.server)].push_back({sh.id, pos - sh.offset, b - pos});
      pos = std::max(pos, e);
    }
    if (pos < end) delta[size_t(sh.server)].push_back({sh.id, pos - sh.offset, end - pos});
  }
  for (auto& ranges : delta)
    std::sort(ranges.begin(), ranges.end(), [](const ShardRange& a, const ShardRange& b) {
      return a.shard != b.shard ? a.shard < b.shard : a.offset < b.offset;
    });
  return delta;
}

}  // namespace

UpdatePlan UpdatePlan::Make(const model::ModelLayout& layout, const shard::ShardMap& map,
                            int images_per_push, spec::DenseUpdates mode) {
  UpdatePlan plan;
  const int servers = map.num_servers();
  for (size_t i = 0; i < layout.shapes().size(); ++i) {
    const auto& l = layout.spec().layers[i];
    if (l.type != spec::LayerType::kDense && l.type != spec::LayerType::kSoftmax) continue;
    const auto& p = layout.params()[i];
    DenseLayer d;
    d.layer = int(i);
    d.in = layout.shapes()[i].in.size();
    d.units = p.bias.count;
    d.weights = p.weights.offset;
    d.bias = p.bias.offset;
    plan.all_dense_.push_back(d);
  }
  plan.all_rows_.assign(size_t(servers), std::vector<std::vector<int32_t>>(plan.all_dense_.size()));
  for (int s = 0; s < servers; ++s)
    for (size_t k = 0; k < plan.all_dense_.size(); ++k) {
      const DenseLayer& d = plan.all_dense_[k];
      std::vector<bool> mark(size_t(d.units), false);
      for (const auto& sh : map.shards())
        if (sh.server == s) MarkRows(d, sh.offset, sh.offset + sh.count, &mark);
      for (int64_t r = 0; r < d.units; ++r)
        if (mark[size_t(r)]) plan.all_rows_[size_t(s)][k].push_back(int32_t(r));
    }

  plan.dense_index_.assign(layout.shapes().size(), -1);
  plan.rows_.assign(size_t(servers), {});
  for (size_t k = 0; k < plan.all_dense_.size(); ++k) {
    const DenseLayer& d = plan.all_dense_[k];
    int64_t act = 0;
    for (int s = 0; s < servers; ++s) {
      const int64_t rows = int64_t(plan.all_rows_[size_t(s)][k].size());
      if (rows > 0) act += int64_t(images_per_push) * (d.in + rows);
    }
    const int64_t weights = d.units * d.in + d.units;
    const bool use = mode == spec::DenseUpdates::kActivations ||
                     (mode == spec::DenseUpdates::kAuto && act < weights);
    if (!use) continue;
    plan.dense_index_[size_t(d.layer)] = int(plan.dense_.size());
    plan.dense_.push_back(d);
    for (int s = 0; s < servers; ++s) plan.rows_[size_t(s)].push_back(plan.all_rows_[size_t(s)][k]);
  }

  plan.delta_ = DeltasOutside(map, plan.dense_);
  return plan;
}

int UpdatePlan::DenseIndex(int layer) const {
  return layer >= 0 && size_t(layer) < dense_index_.size() ? dense_index_[size_t(layer)] : -1;
}

std::vector<std::pair<int64_t, int64_t>> UpdatePlan::DeltaSpans(int64_t num_params) const {
  std::vector<std::pair<int64_t, int64_t>> dense;  // [begin, end) of each weight and bias block
  for (const DenseLayer& d : dense_) {
    dense.emplace_back(d.weights, d.weights + d.units * d.in);
    dense.emplace_back(d.bias, d.bias + d.units);
  }
  std::sort(dense.begin(), dense.end());
  std::vector<std::pair<int64_t, int64_t>> spans;
  int64_t at = 0;
  for (const auto& [begin, end] : dense) {
    if (begin > at) spans.emplace_back(at, begin);
    at = std::max(at, end);
  }
  if (at < num_params) spans.emplace_back(at, num_params);
  return spans;
}

DenseWireBytes UpdatePlan::DenseBytes(int64_t images) const {
  DenseWireBytes b;
  for (size_t k = 0; k < all_dense_.size(); ++k) {
    const DenseLayer& d = all_dense_[k];
    const int64_t weights = (d.units * d.in + d.units) * int64_t(sizeof(float));
    int64_t act = 0;
    for (const auto& server_rows : all_rows_) {
      const int64_t rows = int64_t(server_rows[k].size());
      if (rows > 0) act += images * (d.in + rows) * int64_t(sizeof(float));
    }
    b.weights += weights;
    b.activations += act;
    b.planned += DenseIndex(d.layer) >= 0 ? act : weights;
  }
  return b;
}

StatusOr<JobLayout> DeriveJobLayout(const spec::AdamJob& job) {
  const bool routed = spec::ControllerOwnsShards(job);
  ADAM_ASSIGN_OR_RETURN(model::ModelLayout layout, model::ModelLayout::Make(job.model));
  const auto& role = job.roles.parameter_server;
  ADAM_ASSIGN_OR_RETURN(shard::ShardMap map,
                        shard::ShardMap::Make(layout.num_params(), role.shard_bytes, role.replicas,
                                              job.training.seed));
  UpdatePlan plan =
      UpdatePlan::Make(layout, map, job.training.push_every,
                       routed ? spec::DenseUpdates::kWeights : job.training.dense_updates);
  return JobLayout{std::move(layout), std::move(map), std::move(plan)};
}

}  // namespace adam::update
