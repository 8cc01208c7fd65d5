// SplitReplica: a trainer replica whose model is split across K model workers
// (spec.roles.trainer.modelWorkers; model/partition.h). The trainer process is worker 0, the
// lead: it takes the data server's batches, sends each to the other workers (`adam model-worker`
// processes, RunModelWorker) and trains its own slice with them, image by image, every boundary
// traded over the model exchange's streams. Each worker holds only its slice's weights and runs
// T Hogwild lanes; lane t of every worker trains on the same images.
//
// The lead also speaks for the replica to the parameter servers: ReadWeights gathers every
// worker's slice into the whole vector and AddToWeights hands each worker its part of a change,
// over a control lane of their own. Evaluation runs the whole model on the lead, which holds the
// whole vector for its pushes and pulls anyway.
//
// Create, RunWorkers, ReadWeights, AddToWeights, Evaluate and the destructor are called from one
// thread at a time (the trainer's main or sync thread); Train(t, ...) only from lane t inside
// RunWorkers.
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
#include "trainer/replica.h"

namespace adam::trainer {

struct SplitOptions {
  int threads = 1;  // lanes (T)
  int batch = 1;
  int eval_batch = 100;
  float momentum = 0;
  float weight_decay = 0;
  // Every worker's exchange address, the lead's (where it listens) first.
  std::vector<std::string> workers;
  std::shared_ptr<const net::Transport> transport = net::Transport::Plaintext();
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};  // a silent worker
  prometheus::Counter* images = nullptr;  // a model worker's images trained; may be null
};

// Starts the lead's exchange server, waits for every worker and gives it its slice of `initial`
// (num_params floats). Fails naming a worker that cannot be reached.
StatusOr<std::unique_ptr<ModelReplica>> CreateSplitReplica(const model::ModelLayout& layout,
                                                           const SplitOptions& options,
                                                           const float* initial);

// `adam model-worker`: worker `worker` (>= 1) of a split replica. Listens on
// options.workers[worker], takes its slice from the lead, trains every batch the lead sends and
// answers its reads and changes until the lead says stop (returns OK) or is lost (an error).
Status RunModelWorker(const model::ModelLayout& layout, const SplitOptions& options, int worker);

}  // namespace adam::trainer
