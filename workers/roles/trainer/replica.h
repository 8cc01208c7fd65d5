// Replica: one model replica's compute with no network: the shared weights and T worker
// contexts that train on different images at once and update the weights without locks
// (Hogwild). The trainer wraps it with data and parameter-server traffic; bench/ drives it
// directly.
//
// threadWeights: private gives each worker its own copy of the weights instead: a worker applies
// its own step at once and publishes it to a ring (conv steps as they are, dense layers as their
// input and scaled error rows, Adam's dense-layer trick between threads); before its next step
// every worker applies its own step and every waiting peer step in one sgemm per dense layer.
// No cache line of the weights is written by two cores, at the cost of each worker applying
// every worker's update. A worker waits only when a peer is a whole ring behind.
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
  // A private weight copy per worker (spec.training.threadWeights: private; needs apply_every 1).
  bool private_weights = false;
  // Momentum and weight decay of every step (model::StepRule; a velocity per worker). Needs
  // apply_every 1 and shared weights.
  float momentum = 0;
  float weight_decay = 0;
  float label_smoothing = 0;  // spec.training.labelSmoothing (model::StepRule)
  int ring_steps = 32;  // private: steps a worker may publish before its slowest peer applies them
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

// What a replica's own pushes and pulls of its slices moved (SliceSync, summed over a split
// replica's workers).
struct SliceCounts {
  int64_t held = 0;  // entries the filter kept for later
  uint64_t pushed_bytes = 0, pulled_bytes = 0;
};

// A split replica's workers push and pull their own slices (split_replica.h): the trainer's sync
// asks the replica for the two halves instead of reading and changing the whole vector.
// PushSlices sends every slice's change at clock 0 (the trainer's clock moves with one push of its
// own once every slice is in); PullSlices pulls every slice once `clock` allows.
class SliceSyncer {
 public:
  virtual ~SliceSyncer() = default;
  virtual StatusOr<SliceCounts> PushSlices() = 0;
  virtual StatusOr<SliceCounts> PullSlices(uint64_t clock) = 0;
};

// What the trainer needs of a replica: this one, or one split across model workers
// (split_replica.h). Called as Replica's own methods say.
class ModelReplica {
 public:
  virtual ~ModelReplica() = default;
  virtual int threads() const = 0;
  virtual std::string placement() const = 0;
  virtual void RunWorkers(const std::function<void(int)>& fn) = 0;
  virtual double Train(int t, const uint8_t* pixels, const uint8_t* labels, int count,
                       float lr) = 0;
  // An error of the replica's own, after which Train does nothing (a model worker lost).
  virtual Status status() const { return OkStatus(); }
  virtual Status Read(float* out) = 0;         // ReadWeights
  virtual Status Add(const float* delta) = 0;  // AddToWeights
  // The replica's own syncs of its slices (a split replica whose workers each have a client of
  // their own), or null: the trainer reads and changes the whole vector (Read, Add).
  virtual SliceSyncer* slice_syncer() { return nullptr; }
  virtual int64_t ring_waits() const { return 0; }
  virtual void TakeDenseLog(int t, DenseLog* out) { out->images = 0; }
  // The fraction of `count` images that `params` classifies right; `predicted` (count entries,
  // or null) gets each image's class.
  virtual double Evaluate(const float* params, const uint8_t* pixels, const uint8_t* labels,
                          int count, int* predicted) = 0;
};

class Replica final : public ModelReplica {
 public:
  // `initial` holds layout.num_params() starting weights.
  static StatusOr<std::unique_ptr<Replica>> Create(const model::ModelLayout& layout,
                                                   const ReplicaOptions& options,
                                                   const float* initial);
  ~Replica() override;

  int threads() const override;
  int64_t num_params() const;
  // Copies the weights into `out` (num_params floats): the shared weights, or worker 0's copy with
  // what AddToWeights queued for it. Thread-safe; the workers keep training meanwhile (Hogwild).
  void ReadWeights(float* out);
  // Adds `delta` (num_params floats) to the weights: at once to the shared weights, or queued to
  // every private copy, which applies it before its worker's next step. Thread-safe.
  void AddToWeights(const float* delta);
  Status Read(float* out) override {
    ReadWeights(out);
    return OkStatus();
  }
  Status Add(const float* delta) override {
    AddToWeights(delta);
    return OkStatus();
  }
  // Private weights: steps published only after waiting for a peer to make room in the ring
  // (a worker that is a whole ring behind its peers); 0 with shared weights. Thread-safe.
  int64_t ring_waits() const override;
  // Where the workers run, e.g. "4 threads on 1 NUMA node(s), bound to PUs 0,1,2,3".
  std::string placement() const override;

  // Runs fn(t) for t in [0, threads) on the worker threads; returns when every call has (and, with
  // private weights, when every copy has applied every step and queued addition).
  void RunWorkers(const std::function<void(int)>& fn) override;
  // From worker t: trains on `count` images (batch by batch, the remainder one at a time) with
  // learning rate `lr`; returns the summed loss.
  double Train(int t, const uint8_t* pixels, const uint8_t* labels, int count, float lr) override;
  // Swaps worker t's dense log with `*out` (whose old contents are dropped; its buffers are
  // reused). Thread-safe: called by the sync thread while workers train. With private weights
  // worker 0's log holds every worker's steps, each logged once it is in copy 0 (so a ReadWeights
  // after the take holds every step taken); the other logs stay empty.
  void TakeDenseLog(int t, DenseLog* out) override;
  // Fraction of `count` images that `params` classifies correctly, using every worker.
  double Evaluate(const float* params, const uint8_t* pixels, const uint8_t* labels, int count,
                  int* predicted) override;

 private:
  struct Impl;
  explicit Replica(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace adam::trainer
