// The observe phase of a reconcile, typed: what a job's pods and StatefulSets say, read once from
// their JSON. The role a pod plays (its adam.dev/role label), what Adam's own container in it is
// doing (a sidecar does not decide), and each role's pods counted as status.roles counts them.
// Pure functions over the objects the reconciler holds. Thread-compatible.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reconcile/render.h"
#include "spec/adamjob.h"
#include "spec/plan.h"

namespace adam::op {

inline bool HasDeletion(const Json& o) { return o["metadata"].contains("deletionTimestamp"); }

inline std::string Label(const Json& o, const char* key) {
  return o["metadata"].value("labels", Json::object()).value(key, "");
}

inline std::string Annotation(const Json& o, const char* key) {
  return o["metadata"].value("annotations", Json::object()).value(key, "");
}

inline bool PodReady(const Json& pod) {
  for (const Json& c : pod.value("status", Json::object()).value("conditions", Json::array()))
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  return false;
}

inline std::string PodPhase(const Json& pod) {
  return pod.value("status", Json::object()).value("phase", "Pending");
}

// The status of Adam's container in a pod (named after the role, as the role label is): other
// containers (a service mesh's sidecar, the user's) do not decide whether a role finished. The
// first container's when none has that name; null when the kubelet reported none.
inline Json AdamContainer(const Json& pod) {
  const Json statuses =
      pod.value("status", Json::object()).value("containerStatuses", Json::array());
  const std::string role = Label(pod, kRoleLabel);
  for (const Json& cs : statuses)
    if (cs.value("name", "") == role) return cs;
  return statuses.empty() ? Json() : statuses[0];
}

// The exit code of Adam's container once it terminated; -1 while it runs or when unknown
// (evicted, lost node).
inline int ExitCode(const Json& pod) {
  const Json cs = AdamContainer(pod);
  if (!cs.is_object()) return -1;
  const Json term = cs.value("state", Json::object()).value("terminated", Json::object());
  if (term.contains("exitCode") && term["exitCode"].is_number_integer())
    return term["exitCode"].get<int>();
  return -1;
}

// A pod's phase as Adam's container sees it: Succeeded or Failed once that container ended,
// though a sidecar keeps the pod Running (restartPolicy Never: it does not start again).
inline std::string RolePhase(const Json& pod) {
  std::string phase = PodPhase(pod);
  if (phase != "Running") return phase;
  const int code = ExitCode(pod);
  return code < 0 ? phase : code == 0 ? "Succeeded" : "Failed";
}

// The role of a job's pod, read off its adam.dev/role label: render.cc writes the role's `adam`
// subcommand (spec::RoleSubcommand), and "model-worker" for a split trainer's other processes.
// kNone: a pod without a label this operator wrote.
enum class PodRole { kController, kParamServer, kDataServer, kTrainer, kModelWorker, kNone };
// The roles status.roles lists, in its order (a model worker's restarts count as its trainer's).
inline constexpr PodRole kRoles[] = {PodRole::kController, PodRole::kParamServer,
                                     PodRole::kDataServer, PodRole::kTrainer};

// The label's value, which is also the role's key in status.roles ("" for kNone): the names
// render.cc writes.
inline const char* RoleName(PodRole role) {
  switch (role) {
    case PodRole::kController:
      return spec::RoleSubcommand(spec::Role::kController);
    case PodRole::kParamServer:
      return spec::RoleSubcommand(spec::Role::kParamServer);
    case PodRole::kDataServer:
      return spec::RoleSubcommand(spec::Role::kDataServer);
    case PodRole::kTrainer:
      return spec::RoleSubcommand(spec::Role::kTrainer);
    case PodRole::kModelWorker:
      return kModelWorkerRole;
    case PodRole::kNone:
      break;
  }
  return "";
}

inline PodRole PodRoleOf(const Json& pod) {
  const std::string label = Label(pod, kRoleLabel);
  for (PodRole r : {PodRole::kController, PodRole::kParamServer, PodRole::kDataServer,
                    PodRole::kTrainer, PodRole::kModelWorker})
    if (label == RoleName(r)) return r;
  return PodRole::kNone;
}

// ": " and the last line the container wrote before it ended (its termination message: the
// kubelet keeps the end of the log of a failed container, FallbackToLogsOnError); "" if none.
inline std::string LastWords(const Json& pod) {
  const Json cs = AdamContainer(pod);
  if (!cs.is_object()) return "";
  std::string msg =
      cs.value("state", Json::object()).value("terminated", Json::object()).value("message", "");
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  if (msg.empty()) return "";
  const size_t nl = msg.rfind('\n');
  return ": " + (nl == std::string::npos ? msg : msg.substr(nl + 1)).substr(0, 1024);
}

// One role's pods, as status.roles.<role> counts them.
struct RoleCount {
  int desired = 0;    // the spec's count (controller members only where they own the shards)
  int active = 0;     // pending or running
  int ready = 0;      // running and ready (a trainer, which has no readiness probe: running)
  int succeeded = 0;  // Adam's container exited 0
  int failed = 0;
  bool operator==(const RoleCount&) const = default;
};

// Every role status.roles lists (kRoles), counted: the pods not being deleted, by their Adam
// container's phase; the controller group's members from its StatefulSets' status.
std::map<PodRole, RoleCount> CountPods(const spec::AdamJob& job, const std::vector<Json>& pods,
                                       const std::vector<Json>& sets);

// True when every role has its desired pods running ready or finished.
bool AllRunning(const std::map<PodRole, RoleCount>& counts);

}  // namespace adam::op
