// UpdatePlan: how one trainer push travels to the parameter servers (Adam's two protocols).
//
// Convolution layers (and every layer under `denseUpdates: weights`) send their accumulated
// weight change since the last push: for each server, the parts of its shards those parameters
// cover. Dense layers under Adam's protocol send instead the activation vector a (the layer's
// input) and the error vector e (the loss gradient at its output, already scaled by -learning
// rate) of every image since the last push; the parameter server adds sum_k e_k a_k^T to the
// weights and sum_k e_k to the bias itself. Each server gets every a_k but only the entries of
// e_k for the rows (output units) that touch its shards.
//
// Trainers and parameter servers build the same plan from the same job, so neither has to tell
// the other which layers use which protocol. Immutable after Make: thread-safe.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/status.h"
#include "model/layout.h"
#include "shard/shard_map.h"
#include "spec/adamjob.h"

namespace adam::update {

// A dense layer whose updates travel as activations and errors.
struct DenseLayer {
  int layer = 0;        // index in spec.model.layers
  int64_t in = 0;       // inputs (columns of the OI weight matrix)
  int64_t units = 0;    // outputs (rows)
  int64_t weights = 0;  // flat offset of the units x in weights
  int64_t bias = 0;     // flat offset of the units biases
};

// A part of one shard that a weight-delta push covers.
struct ShardRange {
  uint32_t shard = 0;
  int64_t offset = 0;  // first float, relative to the shard's start
  int64_t count = 0;
};

// Bytes one push sends for the dense layers (dense and softmax), summed over the servers.
struct DenseWireBytes {
  int64_t weights = 0;      // every dense layer as weight deltas (weights + biases)
  int64_t activations = 0;  // every dense layer as activations + errors
  int64_t planned = 0;      // each layer the way the plan sends it
};

class UpdatePlan {
 public:
  // `images_per_push` is the job's pushEvery (images between pushes).
  static UpdatePlan Make(const model::ModelLayout& layout, const shard::ShardMap& map,
                         int images_per_push, spec::DenseUpdates mode);

  const std::vector<DenseLayer>& dense() const { return dense_; }
  // Index into dense() of spec layer `layer`, or -1 when that layer sends weight deltas.
  int DenseIndex(int layer) const;
  // The weight-delta ranges a push sends to `server`, in shard order.
  const std::vector<ShardRange>& DeltaRanges(int server) const { return delta_[size_t(server)]; }
  // The rows of dense()[d] whose weights or bias touch a shard of `server`, ascending; the server
  // gets the errors of exactly these rows.
  const std::vector<int32_t>& Rows(int server, int d) const {
    return rows_[size_t(server)][size_t(d)];
  }
  // Wire bytes of the dense layers' updates for one push of `images` images.
  DenseWireBytes DenseBytes(int64_t images) const;
  // The flat ranges [begin, end) of the model's `num_params` that travel as weight deltas (every
  // parameter outside dense()'s weights and biases), ascending: where a trainer filters.
  std::vector<std::pair<int64_t, int64_t>> DeltaSpans(int64_t num_params) const;

 private:
  std::vector<DenseLayer> all_dense_;                        // every dense layer, for DenseBytes
  std::vector<std::vector<std::vector<int32_t>>> all_rows_;  // [server][all_dense_ index]
  std::vector<DenseLayer> dense_;
  std::vector<int> dense_index_;  // per spec layer
  std::vector<std::vector<ShardRange>> delta_;
  std::vector<std::vector<std::vector<int32_t>>> rows_;
};

// What every process of a job derives from its manifest alike: the model's layout, the initial
// shard map (before any failover) and the update plan. Trainers, parameter servers and
// controller members all take it from here, so "every process computes the same map" rests on
// this one function.
struct JobLayout {
  model::ModelLayout layout;
  shard::ShardMap map;
  UpdatePlan plan;
};
// Where a controller moves shards between servers (spec::ControllerOwnsShards), every dense
// layer travels as weight deltas (routable per shard) whatever spec.training.denseUpdates says.
StatusOr<JobLayout> DeriveJobLayout(const spec::AdamJob& job);

}  // namespace adam::update
