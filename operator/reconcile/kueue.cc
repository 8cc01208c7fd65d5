// An AdamJob as a Kueue Workload.
#include "reconcile/kueue.h"

#include <algorithm>
#include <set>

#include "reconcile/conditions.h"

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

}  // namespace

std::string WorkloadName(const std::string& job_name, const std::string& job_uid) {
  return "adamjob-" + job_name + "-" + job_uid.substr(0, std::min<size_t>(5, job_uid.size()));
}

Json WorkloadFor(const spec::AdamJob& job, const std::vector<Json>& rendered,
                 const std::string& queue, const std::string& job_uid, int64_t generation) {
  Json pod_sets = Json::array();
  const std::map<std::string, RolePods> by_role = PodsByRole(rendered);
  // In start order, so that the Workload reads as the job does.
  for (const char* role : {"controller", "ps", "data-server", "trainer", "model-worker"}) {
    auto it = by_role.find(role);
    if (it == by_role.end() || it->second.count == 0) continue;
    pod_sets.push_back(
        {{"name", role},
         {"count", it->second.count},
         {"template", {{"metadata", it->second.metadata}, {"spec", it->second.spec}}}});
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
  auto shape = [](const Json& w) {
    std::vector<std::pair<std::string, int>> out;
    const Json spec = w.value("spec", Json::object());
    for (const Json& ps : spec.value("podSets", Json::array()))
      out.emplace_back(ps.value("name", ""), ps.value("count", 0));
    return out;
  };
  return shape(workload) == shape(desired);
}

WorkloadState ReadWorkload(const Json& workload) {
  WorkloadState w;
  w.admitted = IsTrue(workload, kAdmitted);
  w.evicted = IsTrue(workload, kEvicted);
  w.finished = IsTrue(workload, kFinished);
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
  Json w = workload;
  Set(w, kFinished, true, succeeded ? "Succeeded" : "Failed", message, now);
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
