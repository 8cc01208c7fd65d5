// What one reconcile pass knows of its job, shared by the files that implement the Reconciler's
// phases (reconciler.cc; admission.cc, certificates.cc, objects.cc, pods.cc); what they read of
// pods is reconcile/observe.h. Internal to the reconciler: nothing else includes it.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reconcile/kueue.h"
#include "reconcile/observe.h"
#include "reconcile/reconciler.h"
#include "reconcile/render.h"
#include "reconcile/start_failures.h"
#include "spec/adamjob.h"
#include "spec/plan.h"

namespace adam::op {

struct Reconciler::State {
  std::string ns, name, uid;
  int64_t generation = 0;
  Json job;
  Json status;
  Json old_status;
  std::optional<spec::AdamJob> spec;
  std::vector<Json> pods;
  std::chrono::system_clock::time_point now;
  bool finished = false;
  std::optional<std::chrono::system_clock::time_point> renew_at;  // the certificate's renewal
  std::optional<std::chrono::milliseconds> requeue_after;         // Finalize's next look
  std::optional<std::vector<Json>> rendered;                      // Rendered's
  std::optional<WorkloadState> admission;  // Kueue's, for a queued job that may run
  std::optional<Json> workload;            // that job's Workload
  // The job as it runs this pass where that is not its spec: an elastic job whose larger Workload
  // slice Kueue has yet to admit runs at the counts it was admitted with (admission.cc: HoldAt);
  // what its pods and ConfigMap are rendered from (Rendered). None: the job itself.
  std::optional<Json> held_job;
  std::optional<StartFailure> refused;             // the first create of this pass the API refused
  std::map<std::string, std::string> backing_off;  // role -> when its lost pods are made again
};

// A reconcile's next look is due within `in` at the latest: `at` keeps the earliest asked for.
inline void LookAgainWithin(std::optional<std::chrono::milliseconds>& at,
                            std::chrono::milliseconds in) {
  if (!at || *at > in) at = in;
}

}  // namespace adam::op
