// The gRPC ParameterService over a ParamStore (callback API: handlers run on gRPC's threads and
// touch only the thread-safe store and metrics).
#pragma once

#include <prometheus/counter.h>

#include "adam/v1/ps.grpc.pb.h"
#include "param_server/param_store.h"

namespace adam::ps {

struct ParamServiceMetrics {
  prometheus::Counter* pushes = nullptr;       // adam_ps_pushes_total
  prometheus::Counter* push_bytes = nullptr;   // adam_ps_push_bytes_total
  prometheus::Counter* pull_bytes = nullptr;   // adam_ps_pull_bytes_total
};

class ParamService final : public adam::v1::ParameterService::CallbackService {
 public:
  // `store` must outlive the service. Metrics pointers may be null.
  ParamService(ParamStore* store, ParamServiceMetrics metrics) : store_(store), m_(metrics) {}

  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx,
                                 const adam::v1::PushRequest* req,
                                 adam::v1::PushResponse* resp) override;
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx,
                                 const adam::v1::PullRequest* req,
                                 adam::v1::PullResponse* resp) override;

 private:
  ParamStore* store_;
  ParamServiceMetrics m_;
};

}  // namespace adam::ps
