// The trainer as a role: its metrics endpoint (Start), then Run connects to the parameter servers
// (directly, or routed through the controller's map) and the data server and trains the job's
// epochs, or runs the acknowledged-update check (--check-pushes) instead.
#pragma once

#include <memory>

#include "core/mutex.h"
#include "core/role.h"
#include "metrics/metrics.h"
#include "net/role_process.h"
#include "spec/role_options.h"
#include "trainer/trainer.h"
#include "update/update_plan.h"

namespace adam::trainer {

class TrainerRole final : public Role {
 public:
  // `job` and `derived` are not owned and outlive the role.
  TrainerRole(const spec::AdamJob& job, spec::TrainerOptions options, RoleProcess process,
              const update::JobLayout& derived);

  // Serves /metrics.
  Status Start() override;
  // Ends a Run in progress (Trainer::Stop: the trainer leaves the servers, Run returns
  // kExitFailed); called before Run, Run trains nothing. Thread-safe; twice is harmless.
  void Stop() override;
  // {"event": "ready", "metrics_port": P}: a trainer listens for nothing else.
  events::Ready ReadyEvent() const override;
  // Trains (or checks pushes) to the end; returns the process exit code.
  int Run();

 private:
  // Trainer::Run, stopped by Stop while it runs.
  StatusOr<TrainerResult> RunStoppable(Trainer& trainer);
  // The exit code of a run's result (logged; the figures written as the termination message).
  static int Finish(const StatusOr<TrainerResult>& result);

  const spec::AdamJob& job_;
  const spec::TrainerOptions options_;
  const RoleProcess process_;
  const update::JobLayout& derived_;
  std::unique_ptr<metrics::MetricsServer> metrics_;
  Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  Trainer* running_ ABSL_GUARDED_BY(mu_) = nullptr;  // Run's, while it trains
};

}  // namespace adam::trainer
