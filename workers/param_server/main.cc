// The parameter server process.
#include "param_server/main.h"

#include <spdlog/spdlog.h>

#include "core/signals.h"
#include "metrics/metrics.h"
#include "model/layout.h"
#include "net/grpc.h"
#include "param_server/param_service.h"

namespace adam::ps {

int Main(const spec::AdamJob& job, const MainOptions& options) {
  BlockTerminationSignals();
  auto layout = model::ModelLayout::Make(job.model);
  if (!layout.ok()) {
    spdlog::error("{}", layout.status().message());
    return 1;
  }
  const auto& role = job.roles.parameter_server;
  if (options.index < 0 || options.index >= role.replicas) {
    spdlog::error("--index {} is not below spec.roles.parameterServer.replicas ({})",
                  options.index, role.replicas);
    return 2;
  }
  auto map = shard::ShardMap::Make(layout->num_params(), role.shard_bytes, role.replicas,
                                   job.training.seed);
  if (!map.ok()) {
    spdlog::error("{}", map.status().message());
    return 1;
  }
  // Every server derives the same initial vector from the job's seed and keeps its shards.
  std::vector<float> initial(size_t(layout->num_params()));
  layout->InitParams(job.training.seed, initial.data());
  ParamStore store(*map, options.index, initial.data());
  initial = {};
  spdlog::info("holding {} of {} shards ({} of {} parameters)", store.shard_ids().size(),
               map->shards().size(), store.total_floats(), layout->num_params());

  const std::string host = options.listen.substr(0, options.listen.rfind(':'));
  auto metrics = metrics::MetricsServer::Start(host, options.metrics_port);
  if (!metrics.ok()) {
    spdlog::error("{}", metrics.status().message());
    return 1;
  }
  auto& reg = **metrics;
  reg.Gauge("adam_ps_shards", "Shards held by this parameter server").Set(double(store.shard_ids().size()));
  reg.Gauge("adam_ps_parameters", "Parameters held by this parameter server").Set(double(store.total_floats()));
  ParamServiceMetrics pm{&reg.Counter("adam_ps_pushes_total", "Push requests applied"),
                         &reg.Counter("adam_ps_push_bytes_total", "Update bytes applied"),
                         &reg.Counter("adam_ps_pull_bytes_total", "Parameter bytes served")};
  ParamService service(&store, pm);
  return net::Serve(options.listen, {&service}, reg.port());
}

}  // namespace adam::ps
