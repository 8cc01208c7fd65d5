// The status phase of a reconcile, typed: what a pass writes into status.roles from the pods it
// counted (observe.h), and whether the status it made is written at all. The reconciler only
// writes what these say (reconciler.cc: CountRoles, WriteStatus). Pure functions.
// Thread-compatible.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "reconcile/observe.h"

namespace adam::op {

// status.roles from each role's counts (desired, active, ready, succeeded, failed), keeping each
// role's restarts (pods.cc counts them; 0 for a role listed the first time). A role that desires
// no pod and was never listed (a job without a controller group) is left out.
void PutRoleCounts(const std::map<PodRole, RoleCount>& counts, Json* status);

// status.trainerSelector, the scale subresource's label selector of the job's trainers (kubectl
// scale, a HorizontalPodAutoscaler).
std::string TrainerSelector(const std::string& job);

enum class StatusWriteDecision {
  kNone,  // the status is what the job has
  kHeld,  // only status.imagesPerSecond moved, within 6 status periods of the last write
  kWrite,
};

// Whether a pass writes `status` over the job's `old_status`. A new throughput alone waits for
// the next of every 6 status periods (a minute by default) since this operator last wrote the
// job's status (`since_last_write`; none when it has not): figures that move with every scrape
// would otherwise write the job every period.
StatusWriteDecision DecideStatusWrite(const Json& status, const Json& old_status,
                                      std::optional<std::chrono::milliseconds> since_last_write,
                                      std::chrono::milliseconds status_period);

}  // namespace adam::op
