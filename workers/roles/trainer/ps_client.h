// ParamServerClient: the trainer's whole view of the parameter servers, ps-lite style: push an
// update of the full parameter vector, pull the full vector. How the vector is cut into shards,
// which server holds which, and which dense layers travel as activations and errors (the job's
// update::UpdatePlan) is hidden behind it. Implementations are thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "model/layout.h"
#include "model/partition.h"
#include "net/grpc.h"
#include "shard/shard_map.h"
#include "update/codec.h"
#include "update/update_plan.h"

namespace prometheus {
class Counter;
class Gauge;
}  // namespace prometheus

namespace adam::trainer {

// The activation and error vectors of `images` images for one dense layer of the plan.
struct DenseBatch {
  int layer = 0;  // spec layer index
  int images = 0;
  const float* activations = nullptr;  // images x in
  const float* errors = nullptr;       // images x units, already scaled by -learning rate
};

struct PushArgs {
  // num_params floats: the change of every parameter the plan sends as weight deltas (the
  // entries of dense-protocol layers are ignored).
  const float* delta = nullptr;
  std::vector<DenseBatch> dense;  // one per dense-protocol layer with images, may be empty
  uint64_t clock = 0;             // this trainer's pushes so far, this one included
  bool leave = false;             // the trainer is done
};

class ParamServerClient {
 public:
  virtual ~ParamServerClient() = default;
  virtual Status Push(const PushArgs& args) = 0;
  // Copies the global parameters (num_params floats) into `out`, once the job's consistency
  // model allows a trainer that has pushed `clock` times to read.
  virtual Status Pull(float* out, uint64_t clock) = 0;
  // Bytes sent by Push (weight deltas, and activations + errors) and received by Pull so far.
  virtual uint64_t pushed_bytes() const = 0;
  virtual uint64_t dense_bytes() const = 0;
  virtual uint64_t pulled_bytes() const = 0;
  // The controller's shard map version this client routes by (0 without a controller).
  virtual uint64_t shard_map_version() const { return 0; }
  // The job's epochs finished as the last Pull's servers knew it: the least of their answers
  // (ps.proto PullResponse.epochs). A trainer starts at that epoch: a resumed job goes on where
  // its checkpoints were, a restarted trainer where the job is.
  virtual uint32_t epochs() const { return 0; }
};

struct GrpcParamServerClientOptions {
  std::string trainer_name;
  int trainer_index = 0;
  std::chrono::milliseconds rpc_timeout{30000};
  std::chrono::milliseconds connect_timeout{30000};
  // Without copies: how long a push or pull waits for an unreachable server (UNAVAILABLE: it
  // crashed and is restarting from its checkpoint) before the trainer fails naming it. Each
  // second of waiting is logged; `waits` counts the seconds, `waiting` is 1 meanwhile.
  std::chrono::milliseconds server_wait{120000};
  prometheus::Counter* waits = nullptr;  // adam_trainer_server_wait_seconds_total
  prometheus::Gauge* waiting = nullptr;  // adam_trainer_servers_unreachable
  // A pull that reads a shard at a lower version (updates applied) than this client read before
  // read a state without updates the servers had applied: lost with a server restarted from its
  // checkpoint (without copies: at most persistence.interval of them) or at a failover (with
  // copies: only updates never acknowledged, at most the one push each trainer has in flight).
  // Each such fall is logged and emitted (event "shard_fell_back"); `missing` counts the updates.
  prometheus::Counter* missing = nullptr;  // adam_trainer_pulled_updates_missing_total
  // How servers and controller members are dialled (the job's mutual TLS, or plain text).
  std::shared_ptr<const net::Transport> transport = net::Transport::Plaintext();
  // How deltas, dense updates and pulled weights travel (spec.training.communication); with
  // sparse_pushes a delta range sends only its nonzero entries, with their indices, when smaller.
  update::WireFormat format;
  bool sparse_pushes = false;
  // Where waits for a server, retries until rpc_timeout and the pauses between them read the
  // time (not owned); an RPC's own deadline is gRPC's, in real time.
  Clock* clock = Clock::Real();
  // The part of the vector this client pushes and pulls: disjoint ranges of the whole vector,
  // each at `own` in the caller's buffers (a split replica's model worker, which holds only its
  // slice: a push's delta and a pull's out are then that slice). A pull asks only for the shards
  // the ranges touch. Empty: the whole vector.
  std::vector<model::SliceRange> slice;
};

// Talks to every server in `addresses` (index = server number of the shard map) over gRPC, one
// request per server per call, all servers in parallel. A server that cannot be reached is waited
// for (options.server_wait) and sent its part again when it is back, so a server that restarts
// costs the job at most what it had not yet checkpointed; a push it applied before it died may be
// applied twice, which SGD tolerates. Fails naming the server that did not come back, or the
// first that refused a request.
StatusOr<std::unique_ptr<ParamServerClient>> ConnectParamServers(
    const shard::ShardMap& map, const update::UpdatePlan& plan,
    const std::vector<std::string>& addresses, const GrpcParamServerClientOptions& options);

// With a controller (spec.roles.parameterServer.copies > 1): routes every shard to its current
// primary in the controller's shard map (fetched from any member, the newest version wins), and
// keeps a WatchShardMap stream open to one member at a time, so a new map is routed by as soon as
// it is committed, before any request fails. A
// push or pull part refused by a server that is no longer the primary, or lost with a dead one,
// is re-sent for just those shards once a newer map names new primaries (waiting up to
// `options.rpc_timeout`). An update the dead primary applied but never forwarded is lost, and
// one it applied and answered too late for is applied twice: both are harmless to SGD.
// `plan` must send no dense layer as activations (ParseAdamJob ensures that with copies > 1).
StatusOr<std::unique_ptr<ParamServerClient>> ConnectRoutedParamServers(
    const shard::ShardMap& map, const model::ModelLayout& layout, int push_every,
    const std::vector<std::string>& controller, const GrpcParamServerClientOptions& options);

// Connects a client that pushes and pulls only `slice` of the vector (the options' slice field),
// to the job's servers as the trainer's own client reaches them: a split replica's lead and each
// of its model workers move their own slices through one.
using SliceConnector = std::function<StatusOr<std::unique_ptr<ParamServerClient>>(
    std::vector<model::SliceRange> slice)>;

}  // namespace adam::trainer
