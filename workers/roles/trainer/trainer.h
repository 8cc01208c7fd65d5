// Trainer: one model replica (`adam trainer`).
//
// T worker threads each own a Network context and train on different images at once, updating
// the replica's shared weight vector without locks (Hogwild). A sync thread pushes the replica's
// accumulated change to the parameter servers every `pushEvery` images and folds the pulled global
// weights back in; a prefetch thread keeps a few batches from the data server queued. At each
// epoch end the trainer reports to the data server (the straggler rule lives there) and trainer 0
// evaluates the global weights on the test set. Trainers never wait for each other, but trainer 0
// waits at the job's last epoch until the data server has closed it (the epoch quorum of trainers
// finished their shares), bounded by last_epoch_wait, so that the final model has trained the
// epochs the job asks for however the trainers' speeds differ. Progress goes out as events
// (core/event.h).
// Run() is called once, from one thread.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "net/grpc.h"
#include "spec/adamjob.h"
#include "trainer/data_client.h"
#include "trainer/ps_client.h"
#include "trainer/push_gate.h"  // kMaxUnsyncedPushes

namespace adam::trainer {

struct TrainerOptions {
  int index = 0;    // this trainer's number in the job
  int threads = 1;  // worker threads (T)
  std::string name = "trainer-0";
  int prefetch_batches = 4;  // batches queued ahead of the workers
  int eval_batch = 100;      // images per evaluation step
  bool bind = true;          // bind worker threads to cores and NUMA nodes
  std::chrono::milliseconds rpc_timeout{30000};
  std::chrono::milliseconds progress_interval{2000};  // between progress events
  // How long trainer 0, done with the job's last epoch, waits for the epoch quorum of trainers to
  // finish it too before the final evaluation (see Trainer); 0: twice that epoch's own time, at
  // least 30 s.
  std::chrono::milliseconds last_epoch_wait{0};
  // Trains nothing: pulls the model, evaluates it on the test set, emits an `evaluated` event
  // and returns (epochs 0). The launcher's evaluator of the final model when trainer 0, which
  // evaluates after every epoch, did not live to the end.
  bool evaluate_only = false;
  // An evaluating trainer (trainer 0, or the evaluator) writes the model of its last evaluation
  // there as ONNX (model/onnx.h) when training ends; "" = none.
  std::string model_out;
  // A replica split across model workers (spec.roles.trainer.modelWorkers > 1): every worker's
  // exchange address, this trainer's own (where it listens) first; empty = not split. The
  // transport serves and dials them.
  std::vector<std::string> model_workers;
  std::shared_ptr<const net::Transport> transport = net::Transport::Plaintext();
  // A split replica's lead pushes and pulls its own slice through a client of this (each model
  // worker has its own); the trainer's whole client keeps the clock, the initial pull and the
  // evaluations. Without it the lead moves the whole vector for its workers (SplitReplica's
  // Read and Add), as `adam trainer` never does.
  SliceConnector connect_slice;
  // Times progress events, epochs, pushes and pulls and the epoch quorum's wait (not owned).
  Clock* clock = Clock::Real();
};

struct TrainerMetrics {
  prometheus::Counter* images = nullptr;          // adam_trainer_images_total
  prometheus::Gauge* loss = nullptr;              // adam_trainer_loss
  prometheus::Gauge* accuracy = nullptr;          // adam_trainer_test_accuracy
  prometheus::Gauge* epoch = nullptr;             // adam_trainer_epoch
  prometheus::Counter* pushes = nullptr;          // adam_trainer_pushes_total
  prometheus::Counter* push_bytes = nullptr;      // adam_trainer_push_bytes_total
  prometheus::Counter* pull_bytes = nullptr;      // adam_trainer_pull_bytes_total
  prometheus::Histogram* push_seconds = nullptr;  // adam_trainer_push_seconds
  prometheus::Histogram* pull_seconds = nullptr;  // adam_trainer_pull_seconds
  prometheus::Gauge* staleness = nullptr;         // adam_trainer_staleness_images
  prometheus::Gauge* map_version = nullptr;       // adam_trainer_shard_map_version
  prometheus::Counter* ring_waits = nullptr;      // adam_trainer_ring_waits_total
  prometheus::Counter* drift_waits = nullptr;     // adam_trainer_drift_waits_total
  prometheus::Counter* held_back = nullptr;       // adam_trainer_filter_held_entries_total
  prometheus::Counter* quorum_wait = nullptr;     // adam_trainer_quorum_wait_seconds_total
};

// The result of a run, also emitted as the "done" event.
struct TrainerResult {
  int epochs = 0;
  int64_t images = 0;
  double seconds = 0;
  double test_accuracy = -1;  // trainer 0 only; -1 when not evaluated
  std::string diverged;       // why training stopped early as diverged; "" when it did not
  uint64_t push_bytes = 0;    // sent to the parameter servers (deltas, activations and errors)
  uint64_t pull_bytes = 0;    // received from them
};

// Whether an epoch's mean training loss rose enough on the one before to warn of a learning
// rate too high: by more than 5%, and by at least 0.001 (a loss near zero moves by more than 5%
// from noise alone, invisibly at the four decimals the warning prints).
bool LossRose(double previous, double loss);

// Whether an epoch's mean training loss shows that SGD diverged: the loss is not a number or
// infinite, or above twice ln(classes) (what guessing every class alike costs; a model that has
// learnt nothing sits at ln(classes), one whose steps overshoot climbs far above it). Returns the
// message for the user (the epoch, the loss, the learning rate and what to do), or "".
std::string DivergenceMessage(int epoch, double loss, int classes, double learning_rate,
                              int batch_size);

// Whether training collapsed to chance: two epochs in a row (`previous_loss` and `loss`, the mean
// training losses of epochs `epoch` - 1 and `epoch`) no better than guessing, each at least 99.5%
// of `guessing`, the loss of a model whose output ignores its input (label_mix.h: the entropy of
// the training labels, ln(classes) when every class is as common). Such a model (its ReLUs
// silenced by a step too large) stays there for good; one that learns anything falls below it
// within its first epoch. Returns the message for the user (what it means and what to do), or "".
std::string CollapseMessage(int epoch, double previous_loss, double loss, double guessing,
                            int classes, double learning_rate, int batch_size);

class Trainer {
 public:
  // `data` reaches the data server; `ps` the parameter servers.
  Trainer(spec::AdamJob job, TrainerOptions options, TrainerMetrics metrics,
          std::unique_ptr<DataClient> data, std::unique_ptr<ParamServerClient> ps);
  ~Trainer();

  // Trains until the job's epochs are done, the target accuracy is reached, or the job is
  // stopped. Fails on an unreachable peer or a data set that does not fit the model.
  StatusOr<TrainerResult> Run();
  // Ends Run early: the workers stop at their next slice of images, the trainer leaves the
  // servers (consistency stops waiting for it) without ending the job for the others, and Run
  // returns CANCELLED. Called before Run, Run trains nothing. Thread-safe; twice is harmless.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace adam::trainer
