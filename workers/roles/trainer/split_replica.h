// SplitReplica: a trainer replica whose model is split across K model workers
// (spec.roles.trainer.modelWorkers; model/partition.h). The trainer process is worker 0, the
// lead: it takes the data server's batches, sends each to the other workers (`adam model-worker`
// processes, RunModelWorker) and trains its own slice with them, image by image, every boundary
// traded over the model exchange's streams. Each worker holds only its slice's weights and runs
// T Hogwild lanes; lane t of every worker trains on the same images.
//
// Every worker pushes and pulls its own slice (its ranges of the whole vector, SliceSync over a
// client of options.connect_slice), when the lead says so over a control lane of their own:
// PushSlices has every worker push its slice's change, all at once; the trainer then moves its
// clock with a push of its own; PullSlices has every worker pull its slice once that clock
// allows. No worker, the lead included, holds the whole vector for training. Evaluation runs
// the whole model on the lead, on the weights the trainer pulls whole for it.
//
// Without connect_slice the lead speaks for the replica instead: Read gathers every worker's
// slice into the whole vector and Add hands each worker its part of a change.
//
// Create, RunWorkers, Read, Add, PushSlices, PullSlices, Evaluate and the destructor are called
// from one thread at a time (the trainer's main or sync thread); Train(t, ...) only from lane t
// inside RunWorkers.
#pragma once

#include <prometheus/counter.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/layout.h"
#include "net/grpc.h"
#include "spec/adamjob.h"
#include "trainer/ps_client.h"
#include "trainer/replica.h"

namespace adam::trainer {

struct SplitOptions {
  int threads = 1;  // lanes (T)
  int batch = 1;
  int eval_batch = 100;
  float momentum = 0;
  float weight_decay = 0;
  float label_smoothing = 0;  // spec.training.labelSmoothing (model::StepRule)
  // Every worker's exchange address, the lead's (where it listens) first.
  std::vector<std::string> workers;
  std::shared_ptr<const net::Transport> transport = net::Transport::Plaintext();
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};  // a silent worker
  prometheus::Counter* images = nullptr;  // a model worker's images trained; may be null
  // Each worker's own client for its slice, and how its pushes travel (the filter).
  SliceConnector connect_slice;
  spec::CommunicationSpec communication;
};

// Starts the lead's exchange server, waits for every worker and gives it its slice of `initial`
// (num_params floats). Fails naming a worker that cannot be reached.
StatusOr<std::unique_ptr<ModelReplica>> CreateSplitReplica(const model::ModelLayout& layout,
                                                           const SplitOptions& options,
                                                           const float* initial);

// `adam model-worker`: worker `worker` (>= 1) of a split replica. Listens on
// options.workers[worker], takes its slice from the lead, trains every batch the lead sends and
// answers its reads, changes, pushes and pulls until the lead says stop (returns OK) or is lost
// (an error).
Status RunModelWorker(const model::ModelLayout& layout, const SplitOptions& options, int worker);

}  // namespace adam::trainer
