// The trainer as a role: its metrics endpoint (Start), then Run connects to the parameter servers
// (directly, or routed through the controller's map) and the data server and trains the job's
// epochs, or runs the acknowledged-update check (--check-pushes) instead.
#pragma once

#include <memory>

#include "core/role.h"
#include "metrics/metrics.h"
#include "trainer/main.h"
#include "trainer/trainer.h"
#include "update/update_plan.h"

namespace adam::trainer {

class TrainerRole final : public Role {
 public:
  // `job` and `derived` are not owned and outlive the role.
  TrainerRole(const spec::AdamJob& job, MainOptions options, const update::JobLayout& derived);

  // Serves /metrics.
  Status Start() override;
  // Nothing runs outside Run, which returns when training ends.
  void Stop() override {}
  // {"event": "ready", "metrics_port": P}: a trainer listens for nothing else.
  events::Ready ReadyEvent() const override;
  // Trains (or checks pushes) to the end; returns the process exit code.
  int Run();

 private:
  const spec::AdamJob& job_;
  const MainOptions options_;
  const update::JobLayout& derived_;
  std::unique_ptr<metrics::MetricsServer> metrics_;
};

}  // namespace adam::trainer
