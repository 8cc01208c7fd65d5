// Model partitioning (Project Adam §3.2): one replica's model split vertically across K model
// workers, each holding a slice of every layer with parameters, trading the boundary activations
// forward and their errors backward for every batch.
//
// A layer with parameters is cut by its outputs: a conv layer by feature maps, a dense (or
// softmax) layer by units. Its slice reads the whole of the layer before it, so each boundary is
// gathered from every worker going forward, and going back each worker's gradient with respect
// to that whole input is cut by owner and summed (a reduce-scatter). Parameter-free layers
// (pooling, dropout, activations) work per map and stay with their slice. Every slice's weights
// and biases are contiguous ranges of the whole model's parameter vector (OIHW and OI cut by O),
// so a worker pushes and pulls only its own ranges.
//
// Partition is immutable after Make (thread-safe). A SplitWorker is one worker's context, used by
// one thread at a time, like the Network it is built from; workers meet only through an Exchange.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/layout.h"
#include "model/network.h"

namespace adam::model {

// One stage of a split model: a layer with parameters and the parameter-free layers after it, up
// to the next layer with parameters (stage 0 also holds any before the first).
struct PartitionStage {
  int first_layer = 0;
  int end_layer = 0;  // one past the stage's last layer
  int cut_layer = 0;  // its layer with parameters, cut by outputs
  spec::Shape in;     // the whole model's shapes at the stage's two ends
  spec::Shape out;
  std::vector<int> bounds;  // workers + 1 cuts of out.channels: worker k holds [k, k + 1)
  bool softmax = false;     // the model's last stage: its outputs are the logits
};

// `count` parameters at `whole` in the whole model's vector and at `own` in a worker's.
struct SliceRange {
  int64_t whole = 0;
  int64_t own = 0;
  int64_t count = 0;
};

class Partition {
 public:
  // Fails naming the layer whose outputs are fewer than `workers`.
  static StatusOr<Partition> Make(const ModelLayout& whole, int workers);

  int workers() const { return workers_; }
  const ModelLayout& whole() const { return whole_; }
  const std::vector<PartitionStage>& stages() const { return stages_; }
  // Worker k's part of stage s: the stage's layers with the cut layer's maps or units reduced to
  // its share; a softmax layer becomes a dense layer with no activation (the softmax is taken
  // over every worker's logits).
  const ModelLayout& segment(int worker, int stage) const;
  // Where stage s's parameters start in worker k's own vector, and how many worker k holds.
  int64_t stage_offset(int worker, int stage) const;
  int64_t num_params(int worker) const;
  const std::vector<SliceRange>& ranges(int worker) const;
  // Floats per image of stage s's output held by worker k.
  int64_t slice_size(int stage, int worker) const;
  // Copies worker k's parameters from the whole vector into its own, and back.
  void Extract(int worker, const float* whole, float* own) const;
  void Insert(int worker, const float* own, float* whole) const;
  // Worker k's share of the whole model's ModelLayout::InitParams(seed), written into its own
  // vector without making the whole one (the generator skips the other workers' draws).
  void InitParams(int worker, uint64_t seed, float* own) const;

 private:
  struct Worker {
    std::vector<ModelLayout> segments;  // per stage
    std::vector<int64_t> offsets;       // per stage, in the worker's own vector
    std::vector<SliceRange> ranges;
    int64_t num_params = 0;
  };
  Partition(ModelLayout whole, int workers) : whole_(std::move(whole)), workers_(workers) {}
  ModelLayout whole_;
  int workers_ = 1;
  std::vector<PartitionStage> stages_;
  std::vector<Worker> per_worker_;
};

// How a model worker trades boundaries with its peers. Send queues `data` for worker `to` and
// returns without waiting for it to be taken; Receive waits for the next message from `from`,
// which must carry `tag` (a peer sending another is out of step: the call fails) and exactly
// data.size() floats. Messages from one peer arrive in the order it sent them. AllToAll sends
// sends[j] to every worker j and then receives recvs[j] from each (entry `self` of each is
// ignored); every worker makes the same AllToAll calls in the same order. Not thread-safe: one
// Exchange per thread (a Hogwild thread's lane).
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual Status Send(int to, uint32_t tag, std::span<const float> data) = 0;
  virtual Status Receive(int from, uint32_t tag, std::span<float> data) = 0;
  Status AllToAll(uint32_t tag, const std::vector<std::span<const float>>& sends,
                  const std::vector<std::span<float>>& recvs, int self);
};

// What one worker has received and not yet taken: per sender a queue of tagged float messages.
// Put from any thread (a transport's receiving threads); Take from the worker's.
class Mailbox {
 public:
  explicit Mailbox(int senders);
  void Put(int from, uint32_t tag, std::vector<float> data);
  // Waits up to `timeout` for the next message from `from` and copies it into `out`. Fails when
  // none came in time, its tag is not `tag`, or its length is not out.size(); or once Close was
  // called and nothing is left.
  Status Take(int from, uint32_t tag, std::span<float> out, std::chrono::milliseconds timeout);
  // Wakes every Take: nothing more will come (a peer's stream ended with `why`).
  void Close(const Status& why);
  // A buffer of `n` floats for the next Put: one a Take is done with when there is one, so a
  // steady exchange allocates nothing per message.
  std::vector<float> Spare(size_t n);

 private:
  static constexpr size_t kMaxSpare = 16;
  struct Message {
    uint32_t tag;
    std::vector<float> data;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::deque<Message>> queues_;
  std::vector<std::vector<float>> spare_;  // taken messages' buffers, at most kMaxSpare
  Status closed_;
};

// K workers in one process (tests, benchmarks): each Exchange delivers straight into its peers'
// mailboxes.
class LocalExchangeGroup {
 public:
  explicit LocalExchangeGroup(int workers);
  ~LocalExchangeGroup();
  Exchange* exchange(int worker);

 private:
  class Member;
  std::vector<std::unique_ptr<Mailbox>> mailboxes_;
  std::vector<std::unique_ptr<Member>> members_;
};

// One model worker's context: its segments' Networks for batches of `batch` images, chained
// through the Exchange. `params` (num_params(worker) floats, this worker's slice) must outlive it
// and is written only in kSgd mode; `grads` (as many) is required in kGradients mode.
class SplitWorker {
 public:
  static StatusOr<std::unique_ptr<SplitWorker>> Create(const Partition& partition, int worker,
                                                       int batch, float* params, float* grads,
                                                       NetworkMode mode, Exchange* exchange,
                                                       StepRule rule = {});
  ~SplitWorker();

  int batch() const;
  // batch x input_size floats, NCHW: every worker is given the whole batch.
  float* input();
  void SetInputFromBytes(const uint8_t* pixels);
  // Runs the stages, gathering each boundary from every worker, and the softmax over the
  // gathered logits. Returns the batch's summed cross-entropy (0 without labels; every worker
  // computes the same) and writes each image's argmax class to `predicted` when not null.
  StatusOr<float> Forward(const uint8_t* labels, int* predicted);
  // After Forward with labels: back through the stages, each boundary's error summed over the
  // workers. kGradients: writes the slice's gradient of the batch's mean loss into `grads`;
  // kSgd: takes the step on `params`.
  Status Backward(float lr = 0.f);
  // batch x classes probabilities of the last Forward.
  const float* probabilities() const;

 private:
  struct Impl;
  explicit SplitWorker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace adam::model
