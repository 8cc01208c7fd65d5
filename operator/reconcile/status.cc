// The status phase: status.roles written from the counts, and whether a status is written.
#include "reconcile/status.h"

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

}  // namespace adam::op
