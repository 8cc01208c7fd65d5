// Replica: one model replica's compute with no network: the shared weights and T worker
// contexts that train on different images at once and update the weights without locks
// (Hogwild). The trainer wraps it with data and parameter-server traffic; bench/ drives it
// directly.
//
// Worker thread t is bound to its core (topology::PlaceThreads) and runs oneDNN with one OpenMP
// thread; its contexts (Networks) are created on that thread so their buffers are first touched,
// and allocated, on its NUMA node. Create, RunWorkers and Evaluate are called from one thread;
// Train(t, ...) only from worker t inside RunWorkers.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/layout.h"

namespace adam::trainer {

struct ReplicaOptions {
  int threads = 1;       // worker threads (T)
  int batch = 1;         // images per SGD step per thread
  int eval_batch = 100;  // images per evaluation step
  bool bind = true;      // bind workers to cores and their memory to the core's NUMA node
  bool evaluate = true;  // build evaluation contexts
  // Steps a worker holds its updates back before writing them into the shared weights at once
  // (spec.training.applyEvery; 1 = every step, Adam's per-image Hogwild).
  int apply_every = 1;
  // Dense layers whose activation and error vectors are recorded after every step, for Adam's
  // dense-layer protocol (update::UpdatePlan); empty = none.
  std::vector<int> record_layers;
};

// What a worker recorded since the last take: per record layer, `images` rows of activations
// (layer inputs) and of errors (output gradients scaled by -learning rate).
struct DenseLog {
  int images = 0;
  std::vector<std::vector<float>> activations, errors;  // per record layer
};

class Replica {
 public:
  // `initial` holds layout.num_params() starting weights.
  static StatusOr<std::unique_ptr<Replica>> Create(const model::ModelLayout& layout,
                                                   const ReplicaOptions& options,
                                                   const float* initial);
  ~Replica();

  int threads() const;
  int64_t num_params() const;
  // The shared weights: read and written by every worker without locks.
  float* weights();
  // Where the workers run, e.g. "4 threads on 1 NUMA node(s), bound to PUs 0,1,2,3".
  std::string placement() const;

  // Runs fn(t) for t in [0, threads) on the worker threads; returns when every call has.
  void RunWorkers(const std::function<void(int)>& fn);
  // From worker t: trains on `count` images (batch by batch, the remainder one at a time) with
  // learning rate `lr`; returns the summed loss.
  double Train(int t, const uint8_t* pixels, const uint8_t* labels, int count, float lr);
  // Swaps worker t's dense log with `*out` (whose old contents are dropped; its buffers are
  // reused). Thread-safe: called by the sync thread while workers train.
  void TakeDenseLog(int t, DenseLog* out);
  // Fraction of `count` images that `params` classifies correctly, using every worker.
  double Evaluate(const float* params, const uint8_t* pixels, const uint8_t* labels, int count);

 private:
  struct Impl;
  explicit Replica(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace adam::trainer
