// The gRPC ParameterService over a ParamStore (callback API). A push is checked whole, queued to
// the shard workers and answered when every part is applied; a pull waits on the job's
// consistency model (ClockGate) without holding a thread, then reads through the shard workers.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/histogram.h>

#include "adam/v1/ps.grpc.pb.h"
#include "param_server/buffer_pool.h"
#include "param_server/clock_gate.h"
#include "param_server/forwarder.h"
#include "param_server/param_store.h"
#include "param_server/routing.h"
#include "update/codec.h"
#include "update/update_plan.h"

namespace adam::ps {

struct ParamServiceMetrics {
  prometheus::Counter* pushes = nullptr;       // adam_ps_pushes_total
  prometheus::Counter* push_bytes = nullptr;   // adam_ps_push_bytes_total
  prometheus::Counter* dense_bytes = nullptr;  // adam_ps_dense_update_bytes_total
  prometheus::Counter* pull_bytes = nullptr;   // adam_ps_pull_bytes_total
  prometheus::Histogram* pull_wait = nullptr;  // adam_ps_pull_wait_seconds (consistency waits)
};

class ParamService final : public adam::v1::ParameterService::CallbackService {
 public:
  // Every pointer must outlive the service; metrics pointers may be null. `server` is this
  // parameter server's index in the plan.
  ParamService(ParamStore* store, ClockGate* gate, const update::UpdatePlan* plan, int server,
               BufferPool* pool, ParamServiceMetrics metrics)
      : store_(store), gate_(gate), plan_(plan), server_(server), pool_(pool), m_(metrics) {}

  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx, const adam::v1::PushRequest* req,
                                 adam::v1::PushResponse* resp) override;
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx, const adam::v1::PullRequest* req,
                                 adam::v1::PullResponse* resp) override;
  // With a controller: serve only shards `routing` says this server is the primary of (others
  // are refused FAILED_PRECONDITION), and report the first update accepted for each shard this
  // server was promoted to primary of (a "promoted_first_update" event). Call before serving.
  void RequirePrimary(Routing* routing) { routing_ = routing; }
  // Answers a push once `forwarder` has a quorum of copies of every shard it touched (routing.h);
  // without this call, once applied. Call before serving.
  void RequireQuorum(Forwarder* forwarder) { quorum_ = forwarder; }
  // Part of a held shard with its version and term, primary or copy: for checking copies.
  grpc::ServerUnaryReactor* ReadCopy(grpc::CallbackServerContext* ctx,
                                     const adam::v1::ReadCopyRequest* req,
                                     adam::v1::ReadCopyResponse* resp) override;

 private:
  // Reads `ids`, then `ranges` (checked), through the shard workers into `resp` and answers the
  // pull, its values in `format`.
  void Read(const std::vector<uint32_t>& ids, const std::vector<adam::v1::ShardRange>& ranges,
            update::WireFormat format, grpc::ServerUnaryReactor* reactor,
            adam::v1::PullResponse* resp);

  Routing* routing_ = nullptr;
  Forwarder* quorum_ = nullptr;
  ParamStore* store_;
  ClockGate* gate_;
  const update::UpdatePlan* plan_;
  int server_;
  BufferPool* pool_;
  ParamServiceMetrics m_;
};

}  // namespace adam::ps
