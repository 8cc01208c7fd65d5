// The observe phase: each role's pods counted.
#include "reconcile/observe.h"

namespace adam::op {

std::map<PodRole, RoleCount> CountPods(const spec::AdamJob& job, const std::vector<Json>& pods,
                                       const std::vector<Json>& sets) {
  std::map<PodRole, RoleCount> out;
  out[PodRole::kController].desired =
      spec::ControllerOwnsShards(job) ? job.roles.controller.replicas : 0;
  out[PodRole::kParamServer].desired = job.roles.parameter_server.replicas;
  out[PodRole::kDataServer].desired = job.roles.data_server.replicas;
  out[PodRole::kTrainer].desired = job.roles.trainer.replicas;
  // Controller members are the StatefulSet's pods: its status counts them.
  for (const Json& sts : sets) {
    const Json st = sts.value("status", Json::object());
    out[PodRole::kController].active += st.value("replicas", 0);
    out[PodRole::kController].ready += st.value("readyReplicas", 0);
  }
  for (const Json& pod : pods) {
    const PodRole role = PodRoleOf(pod);
    auto it = out.find(role);
    // A model worker is its trainer's (not counted apart); a controller member is counted above.
    if (it == out.end() || role == PodRole::kController || HasDeletion(pod)) continue;
    RoleCount& c = it->second;
    const std::string p = RolePhase(pod);
    if (p == "Pending" || p == "Running") ++c.active;
    if (p == "Running" && (PodReady(pod) || role == PodRole::kTrainer)) ++c.ready;
    if (p == "Succeeded") ++c.succeeded;
    if (p == "Failed") ++c.failed;
  }
  return out;
}

bool AllRunning(const std::map<PodRole, RoleCount>& counts) {
  for (const auto& [role, c] : counts)
    if (c.ready + c.succeeded < c.desired) return false;
  return true;
}

}  // namespace adam::op
