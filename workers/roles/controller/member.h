// A controller member as a role: the Controller (Raft and the shard map's supervisor) served on
// its member address, with its metrics sampled every 200 ms.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "controller/controller.h"
#include "core/periodic.h"
#include "core/role.h"
#include "metrics/metrics.h"
#include "net/grpc.h"

namespace adam::controller {

class SampledMetrics;

class Member final : public Role {
 public:
  Member(std::unique_ptr<Controller> controller, std::string listen, int metrics_port,
         std::shared_ptr<const net::Transport> transport);
  ~Member() override;
  Member(const Member&) = delete;
  Member& operator=(const Member&) = delete;

  Status Start() override;
  void Stop() override;
  events::Ready ReadyEvent() const override;
  Controller& controller() { return *controller_; }

 private:
  const std::unique_ptr<Controller> controller_;
  const std::string listen_;
  const int metrics_port_;
  const std::shared_ptr<const net::Transport> transport_;
  std::unique_ptr<metrics::MetricsServer> metrics_;
  std::unique_ptr<SampledMetrics> sampled_;
  std::optional<Periodic> sampler_;
  std::optional<net::Listeners> listeners_;
};

}  // namespace adam::controller
