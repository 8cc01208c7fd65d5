// ParamServerClient: the trainer's whole view of the parameter servers, ps-lite style: push a
// delta of the full parameter vector, pull the full vector. How the vector is cut into shards and
// which server holds which is hidden behind it. Implementations are thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "shard/shard_map.h"

namespace adam::trainer {

class ParamServerClient {
 public:
  virtual ~ParamServerClient() = default;
  // Adds `delta` (num_params floats) to the global parameters.
  virtual Status Push(const float* delta) = 0;
  // Copies the global parameters (num_params floats) into `out`.
  virtual Status Pull(float* out) = 0;
  // Bytes sent by Push and received by Pull so far (payload only).
  virtual uint64_t pushed_bytes() const = 0;
  virtual uint64_t pulled_bytes() const = 0;
};

struct GrpcParamServerClientOptions {
  std::string trainer_name;
  std::chrono::milliseconds rpc_timeout{30000};
  std::chrono::milliseconds connect_timeout{30000};
};

// Talks to every server in `addresses` (index = server number of the shard map) over gRPC, one
// request per server per call, all servers in parallel. Fails naming the first unreachable
// server.
StatusOr<std::unique_ptr<ParamServerClient>> ConnectParamServers(
    const shard::ShardMap& map, const std::vector<std::string>& addresses,
    const GrpcParamServerClientOptions& options);

}  // namespace adam::trainer
