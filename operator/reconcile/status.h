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

// A role's back-off after one more of its pods failed (kept in status.roles.<role>:
// recentFailures, lastFailureTime, createAfter, so that a new operator leader keeps it).
struct RoleBackoff {
  int recent_failures = 1;             // in a row, this one included
  std::chrono::milliseconds delay{0};  // before the role's pods are made again; 0: at once
};

// The back-off of a role that failed at `now`, `recent_failures` times before, the last at
// `last_failure` (none: never). A failure more than 2 x `max` after the last starts the count
// again. The first failure waits for nothing; the second waits `initial`, each one after that
// twice as long as the one before, at most `max` (`initial` 0: never any wait).
RoleBackoff NextBackoff(int recent_failures,
                        std::optional<std::chrono::system_clock::time_point> last_failure,
                        std::chrono::system_clock::time_point now,
                        std::chrono::milliseconds initial, std::chrono::milliseconds max);

}  // namespace adam::op
