// An AdamJob as a Kueue Workload.
#include "reconcile/kueue.h"

#include <algorithm>
#include <optional>
#include <set>

#include "reconcile/conditions.h"
#include "spec/plan.h"

namespace adam::op {
namespace {

// Kueue's Workload conditions (kueue.x-k8s.io/v1beta2).
constexpr const char* kAdmitted = "Admitted";
constexpr const char* kQuotaReserved = "QuotaReserved";
constexpr const char* kEvicted = "Evicted";
constexpr const char* kFinished = "Finished";
constexpr const char* kRequeued = "Requeued";
constexpr const char* kPodsReady = "PodsReady";

const Json& StatusOf(const Json& workload) {
  static const Json kNone = Json::object();
  return workload.contains("status") ? workload["status"] : kNone;
}

const Json* Condition(const Json& workload, const std::string& type) {
  return FindCondition(StatusOf(workload), type);
}

bool IsTrue(const Json& workload, const std::string& type) {
  return ConditionIs(StatusOf(workload), type, "True");
}

void Set(Json& workload, const std::string& type, bool value, const std::string& reason,
         const std::string& message, const std::string& now) {
  PutCondition(workload["status"], type, value, reason, message, now,
               workload["metadata"].value("generation", int64_t{0}));
}

// The role's first pod (or the controllers' StatefulSet template) among the rendered objects,
// and how many pods the role has.
// NOLINTNEXTLINE(bugprone-exception-escape): its implicit moves move a json, which may throw.
struct RolePods {
  Json metadata;
  Json spec;
  int count = 0;
};

std::map<std::string, RolePods> PodsByRole(const std::vector<Json>& rendered) {
  std::map<std::string, RolePods> by_role;
  for (const Json& o : rendered) {
    const std::string kind = o.value("kind", "");
    const Json& md = o["metadata"];
    const std::string role = md.value("labels", Json::object()).value(kRoleLabel, "");
    if (kind == "Pod") {
      RolePods& r = by_role[role];
      if (r.count++ == 0) {
        r.metadata = {{"labels", md.value("labels", Json::object())}};
        if (md.contains("annotations")) r.metadata["annotations"] = md["annotations"];
        r.spec = o["spec"];
      }
    } else if (kind == "StatefulSet") {
      RolePods& r = by_role[role];
      r.count += o["spec"].value("replicas", 0);
      r.metadata = o["spec"]["template"].value("metadata", Json::object());
      r.spec = o["spec"]["template"]["spec"];
    }
  }
  return by_role;
}

// The topologyRequest a pod set's template asks for with Kueue's TAS annotations (null: none),
// read as Kueue's job framework reads them: required, else preferred, else unconstrained; the
// slice layer (a level and a size) beside any of them. spec::ParseAdamJob refused malformed
// values, so a value Kueue would refuse is left out here rather than guessed at.
Json TopologyRequest(const Json& metadata) {
  const Json annotations = metadata.value("annotations", Json::object());
  auto get = [&annotations](const char* key) -> std::optional<std::string> {
    auto it = annotations.find(key);
    if (it == annotations.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  Json request = Json::object();
  if (auto v = get(kTasRequiredAnnotation)) {
    request["required"] = *v;
  } else if (auto p = get(kTasPreferredAnnotation)) {
    request["preferred"] = *p;
  } else if (auto u = get(kTasUnconstrainedAnnotation); u == "true" || u == "false") {
    request["unconstrained"] = *u == "true";
  }
  const auto level = get(kTasSliceTopologyAnnotation), size = get(kTasSliceSizeAnnotation);
  if (level && size && !size->empty() &&
      std::all_of(size->begin(), size->end(), [](char c) { return c >= '0' && c <= '9'; }) &&
      size->size() < 10) {
    request["podSetSliceRequiredTopology"] = *level;
    request["podSetSliceSize"] = std::stoi(*size);
  }
  return request.empty() ? Json() : request;
}

}  // namespace

std::string WorkloadName(const std::string& job_name, const std::string& job_uid) {
  return "adamjob-" + job_name + "-" + job_uid.substr(0, std::min<size_t>(5, job_uid.size()));
}

Json WorkloadFor(const spec::AdamJob& job, const std::vector<Json>& rendered,
                 const std::string& queue, const std::string& job_uid, int64_t generation) {
  Json pod_sets = Json::array();
  const std::map<std::string, RolePods> by_role = PodsByRole(rendered);
  // In start order, so that the Workload reads as the job does.
  for (const char* role : {spec::RoleSubcommand(spec::Role::kController),
                           spec::RoleSubcommand(spec::Role::kParamServer),
                           spec::RoleSubcommand(spec::Role::kDataServer),
                           spec::RoleSubcommand(spec::Role::kTrainer), kModelWorkerRole}) {
    auto it = by_role.find(role);
    if (it == by_role.end() || it->second.count == 0) continue;
    Json pod_set = {{"name", role},
                    {"count", it->second.count},
                    {"template", {{"metadata", it->second.metadata}, {"spec", it->second.spec}}}};
    if (Json topology = TopologyRequest(it->second.metadata); !topology.is_null())
      pod_set["topologyRequest"] = std::move(topology);
    pod_sets.push_back(std::move(pod_set));
  }
  RenderOptions owned;
  owned.owner_uid = job_uid;
  owned.generation = generation;
  Json metadata = Metadata(job, WorkloadName(job.name, job_uid), "workload", 0, owned);
  metadata["labels"][kKueueJobUidLabel] = job_uid;
  return {{"apiVersion", "kueue.x-k8s.io/v1beta2"},
          {"kind", "Workload"},
          {"metadata", metadata},
          {"spec", {{"queueName", queue}, {"podSets", pod_sets}}}};
}

bool SamePodSets(const Json& workload, const Json& desired) {
  return CompareCounts(workload, desired) == Resize::kSame;
}

std::map<std::string, int> PodSetCounts(const Json& workload) {
  std::map<std::string, int> counts;
  const Json spec = workload.value("spec", Json::object());
  for (const Json& ps : spec.value("podSets", Json::array()))
    if (ps.is_object()) counts[ps.value("name", "")] = ps.value("count", 0);
  return counts;
}

Resize CompareCounts(const Json& workload, const Json& desired) {
  const std::map<std::string, int> have = PodSetCounts(workload), want = PodSetCounts(desired);
  if (have.size() != want.size()) return Resize::kReshaped;
  bool lower = false;
  for (const auto& [name, count] : want) {
    auto it = have.find(name);
    if (it == have.end()) return Resize::kReshaped;
    if (count > it->second) return Resize::kUp;
    lower = lower || count < it->second;
  }
  return lower ? Resize::kDown : Resize::kSame;
}

Json WithCounts(const Json& workload, const Json& desired) {
  Json w = workload;
  const std::map<std::string, int> want = PodSetCounts(desired);
  for (Json& ps : w["spec"]["podSets"]) {
    auto it = want.find(ps.value("name", ""));
    if (it != want.end()) ps["count"] = it->second;
  }
  return w;
}

int64_t WorkloadGeneration(const Json& workload) {
  const std::string g = workload.value("metadata", Json::object())
                            .value("annotations", Json::object())
                            .value(kGenerationAnnotation, "");
  if (g.empty() || g.size() > 18 ||
      !std::all_of(g.begin(), g.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return 0;
  return std::stoll(g);
}

Json SliceReplacing(const Json& old, const Json& desired, int64_t generation) {
  const Json& md = old["metadata"];
  const std::string old_name = md.value("name", "");
  const std::string chain =
      md.value("annotations", Json::object()).value(kSliceNameAnnotation, old_name);
  const std::string base = desired["metadata"].value("name", "");
  Json slice = desired;
  slice["metadata"]["name"] = base + "-g" + std::to_string(generation);
  Json& annotations = slice["metadata"]["annotations"];
  annotations[kSliceReplacementAnnotation] = md.value("namespace", "") + "/" + old_name;
  annotations[kSliceNameAnnotation] = chain;
  annotations[kElasticJobAnnotation] = "true";
  return slice;
}

WorkloadState ReadWorkload(const Json& workload) {
  WorkloadState w;
  const Json md = workload.value("metadata", Json::object());
  w.name = md.value("name", "");
  const Json annotations = md.value("annotations", Json::object());
  w.slice_name = annotations.value(kSliceNameAnnotation, w.name);
  w.elastic = annotations.value(kElasticJobAnnotation, "") == "true";
  w.admitted = IsTrue(workload, kAdmitted);
  w.evicted = IsTrue(workload, kEvicted);
  w.finished = IsTrue(workload, kFinished);
  if (const Json* c = Condition(workload, kFinished); c && w.finished) {
    w.finished_reason = c->value("reason", "");
    w.finished_at = c->value("lastTransitionTime", "");
  }
  if (const Json* c = Condition(workload, kEvicted); c && w.evicted) {
    w.evicted_reason = c->value("reason", "");
    w.evicted_message = c->value("message", "");
  }
  if (const Json* c = Condition(workload, kQuotaReserved); c && c->value("status", "") != "True")
    w.pending_message = c->value("message", "");
  const Json status = workload.value("status", Json::object());
  if (status.contains("admission") && status["admission"].is_object()) {
    w.quota_reserved = true;
    const Json& adm = status["admission"];
    w.cluster_queue = adm.value("clusterQueue", "");
    for (const Json& a : adm.value("podSetAssignments", Json::array())) {
      if (a.contains("topologyAssignment") && a["topologyAssignment"].is_object())
        w.topology.insert(a.value("name", ""));
      std::vector<std::string>& names = w.flavors[a.value("name", "")];
      const Json assigned = a.value("flavors", Json::object());
      for (const auto& [resource, flavor] : assigned.items()) {
        const std::string f = flavor.is_string() ? flavor.get<std::string>() : "";
        if (!f.empty() && std::find(names.begin(), names.end(), f) == names.end())
          names.push_back(f);
      }
    }
  }
  for (const Json& check : status.value("admissionChecks", Json::array())) {
    if (!check.is_object()) continue;
    for (const Json& u : check.value("podSetUpdates", Json::array())) {
      if (!u.is_object()) continue;
      PodSetUpdate update;
      update.check = check.value("name", "");
      auto take = [&u](const char* field, Json* into) {
        if (u.contains(field) && u[field].type() == into->type()) *into = u[field];
      };
      take("labels", &update.labels);
      take("annotations", &update.annotations);
      take("nodeSelector", &update.node_selector);
      take("tolerations", &update.tolerations);
      w.updates[u.value("name", "")].push_back(std::move(update));
    }
  }
  return w;
}

Json WithReservationCleared(const Json& workload, const std::string& now) {
  Json w = workload;
  const WorkloadState st = ReadWorkload(workload);
  const std::string message = st.evicted_message.empty() ? "the job stopped" : st.evicted_message;
  // Kueue queues a preempted job, or one whose node failed, again at once; the others (a
  // deactivation, say) wait for whoever evicted them.
  const bool requeue = st.evicted_reason == "Preempted" || st.evicted_reason == "NodeFailures";
  Set(w, kRequeued, requeue, st.evicted_reason.empty() ? "Pending" : st.evicted_reason, message,
      now);
  w["status"].erase("admission");
  Set(w, kQuotaReserved, false, "Pending", message, now);
  if (Condition(w, kAdmitted))
    Set(w, kAdmitted, false, "NoReservation", "The workload has no reservation", now);
  return w;
}

Json WithFinished(const Json& workload, bool succeeded, const std::string& message,
                  const std::string& now) {
  return WithFinishedBecause(workload, succeeded ? "Succeeded" : "Failed", message, now);
}

Json WithFinishedBecause(const Json& workload, const std::string& reason,
                         const std::string& message, const std::string& now) {
  Json w = workload;
  Set(w, kFinished, true, reason, message, now);
  return w;
}

bool PodsReadyIs(const Json& workload, bool ready) {
  return ConditionIs(StatusOf(workload), kPodsReady, ready ? "True" : "False");
}

Json WithPodsReady(const Json& workload, bool ready, const std::string& now) {
  Json w = workload;
  if (ready) {
    Set(w, kPodsReady, true, "PodsReady", "All pods reached readiness and the workload is running",
        now);
    return w;
  }
  const Json* before = Condition(w, kPodsReady);
  const bool started = before && (before->value("status", "") == "True" ||
                                  before->value("reason", "") == "WaitForRecovery");
  Set(w, kPodsReady, false, started ? "WaitForRecovery" : "WaitForStart",
      "Not all pods are ready or succeeded", now);
  return w;
}

namespace {

// Adds `from`'s string values to the object `into` (made one if absent); a key `into` holds with
// another value is refused, the message naming `who`, `what` and both values.
Status MergeStrings(const Json& from, Json& into, const std::string& who, const std::string& what) {
  if (!into.is_object()) into = Json::object();
  for (const auto& [key, value] : from.items()) {
    if (!value.is_string()) continue;
    if (into.contains(key) && into[key] != value)
      return FailedPreconditionError(
          who + " " + what + " " + key + "=" + value.get<std::string>() + ", but they have " + key +
          "=" + (into[key].is_string() ? into[key].get<std::string>() : into[key].dump()));
    into[key] = value;
  }
  return OkStatus();
}

void AddTolerations(const Json& from, Json& into) {
  if (!into.is_array()) into = Json::array();
  for (const Json& t : from)
    if (std::find(into.begin(), into.end(), t) == into.end()) into.push_back(t);
}

// The pod an object of `objects` makes (a Pod itself, a StatefulSet's template), with its role;
// nullptr for any other kind.
Json* PodOf(Json& o, std::string* role) {
  const std::string kind = o.value("kind", "");
  if (kind != "Pod" && kind != "StatefulSet") return nullptr;
  *role = o["metadata"].value("labels", Json::object()).value(kRoleLabel, "");
  return kind == "Pod" ? &o : &o["spec"]["template"];
}

}  // namespace

Status ApplyPodSetUpdates(const WorkloadState& admission, std::vector<Json>* objects) {
  for (Json& o : *objects) {
    std::string role;
    Json* made = PodOf(o, &role);
    auto updates = admission.updates.find(role);
    if (!made || updates == admission.updates.end()) continue;
    Json& pod = *made;
    for (const PodSetUpdate& u : updates->second) {
      const std::string who = "admission check " + u.check + " gives " + role + " pods";
      ADAM_RETURN_IF_ERROR(MergeStrings(u.labels, pod["metadata"]["labels"], who, "label"));
      ADAM_RETURN_IF_ERROR(
          MergeStrings(u.annotations, pod["metadata"]["annotations"], who, "annotation"));
      ADAM_RETURN_IF_ERROR(
          MergeStrings(u.node_selector, pod["spec"]["nodeSelector"], who, "nodeSelector"));
      AddTolerations(u.tolerations, pod["spec"]["tolerations"]);
    }
  }
  return OkStatus();
}

void ApplyTopology(const WorkloadState& admission, std::vector<Json>* objects) {
  for (Json& o : *objects) {
    std::string role;
    Json* made = PodOf(o, &role);
    if (!made || !admission.topology.count(role)) continue;
    Json& pod = *made;
    Json& labels = pod["metadata"]["labels"];
    Json& annotations = pod["metadata"]["annotations"];
    if (!labels.is_object()) labels = Json::object();
    if (!annotations.is_object()) annotations = Json::object();
    labels[kPodSetLabel] = role;
    annotations[kWorkloadAnnotation] = admission.name;
    // Kueue's ungater finds the pods of an elastic Workload by its slice chain's name.
    if (admission.elastic) annotations[kSliceNameAnnotation] = admission.slice_name;
    const Json asked = TopologyRequest(pod["metadata"]);
    if (asked.is_null() || (!asked.contains("required") && !asked.contains("preferred") &&
                            !asked.contains("unconstrained")))
      annotations[kTasUnconstrainedAnnotation] = "true";
    Json& gates = pod["spec"]["schedulingGates"];
    if (!gates.is_array()) gates = Json::array();
    const Json gate = {{"name", kTopologyGate}};
    if (std::find(gates.begin(), gates.end(), gate) == gates.end()) gates.push_back(gate);
  }
}

Status ApplyFlavors(const WorkloadState& admission,
                    const std::map<std::string, FlavorPlacement>& flavors,
                    std::vector<Json>* objects) {
  for (Json& o : *objects) {
    std::string role;
    Json* pod = PodOf(o, &role);
    auto assigned = admission.flavors.find(role);
    if (!pod || assigned == admission.flavors.end()) continue;
    Json& spec = (*pod)["spec"];
    for (const std::string& name : assigned->second) {
      auto f = flavors.find(name);
      if (f == flavors.end()) continue;
      ADAM_RETURN_IF_ERROR(MergeStrings(f->second.node_labels, spec["nodeSelector"],
                                        "ResourceFlavor " + name + " gives " + role + " pods",
                                        "nodeSelector"));
      AddTolerations(f->second.tolerations, spec["tolerations"]);
    }
  }
  return OkStatus();
}

}  // namespace adam::op
