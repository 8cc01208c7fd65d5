// The status phase: status.roles written from the counts, and whether a status is written.
#include "reconcile/status.h"

#include <algorithm>

namespace adam::op {

void PutRoleCounts(const std::map<PodRole, RoleCount>& counts, Json* status) {
  Json& roles = (*status)["roles"];
  for (const auto& [role, c] : counts) {
    const char* key = RoleName(role);
    if (c.desired == 0 && !roles.contains(key)) continue;
    Json& r = roles[key];
    r["desired"] = c.desired;
    r["active"] = c.active;
    r["ready"] = c.ready;
    r["succeeded"] = c.succeeded;
    r["failed"] = c.failed;
    if (!r.contains("restarts")) r["restarts"] = 0;
  }
}

std::string TrainerSelector(const std::string& job) {
  return std::string(kJobLabel) + "=" + job + "," + kRoleLabel + "=" + RoleName(PodRole::kTrainer);
}

StatusWriteDecision DecideStatusWrite(const Json& status, const Json& old_status,
                                      std::optional<std::chrono::milliseconds> since_last_write,
                                      std::chrono::milliseconds status_period) {
  if (status == old_status) return StatusWriteDecision::kNone;
  if (!status.contains("imagesPerSecond") || !old_status.contains("imagesPerSecond") ||
      !since_last_write || *since_last_write >= 6 * status_period)
    return StatusWriteDecision::kWrite;
  Json a = status, b = old_status;
  a.erase("imagesPerSecond");
  b.erase("imagesPerSecond");
  return a == b ? StatusWriteDecision::kHeld : StatusWriteDecision::kWrite;
}

RoleBackoff NextBackoff(int recent_failures,
                        std::optional<std::chrono::system_clock::time_point> last_failure,
                        std::chrono::system_clock::time_point now,
                        std::chrono::milliseconds initial, std::chrono::milliseconds max) {
  RoleBackoff b;
  const bool recent = last_failure && now - *last_failure < 2 * max;
  b.recent_failures = recent ? recent_failures + 1 : 1;
  if (b.recent_failures > 1 && initial.count() > 0) {
    b.delay = initial;
    for (int i = 2; i < b.recent_failures && b.delay < max; ++i) b.delay *= 2;
    b.delay = std::min(b.delay, max);
  }
  return b;
}

}  // namespace adam::op
