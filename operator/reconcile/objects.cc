// The job's objects made and kept as rendered (reconciler.h: EnsureObjects): stage by stage at
// the start, a gang's PodGroup first, drift put back.
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>

#include "core/exit_codes.h"
#include "net/tls.h"
#include "reconcile/conditions.h"
#include "reconcile/diff.h"
#include "reconcile/drift.h"
#include "reconcile/kueue.h"
#include "reconcile/reconciler.h"
#include "reconcile/render.h"
#include "reconcile/start_failures.h"
#include "reconcile/state.h"
#include "spec/adamjob.h"

namespace adam::op {

using kube::FormatTime;
using kube::ParseTime;

std::map<std::string, Json> Reconciler::ExistingObjects(State& s) {
  std::map<std::string, Json> existing;
  const kube::Resource kinds[] = {kube::ConfigMaps(),
                                  kube::Services(),
                                  kube::StatefulSets(),
                                  kube::PersistentVolumeClaims(),
                                  kube::Pods(),
                                  kube::NetworkPolicies(),
                                  kube::PodDisruptionBudgets()};
  const char* kind_names[] = {
      "ConfigMap", "Service",       "StatefulSet",        "PersistentVolumeClaim",
      "Pod",       "NetworkPolicy", "PodDisruptionBudget"};
  for (size_t i = 0; i < std::size(kinds); ++i)
    for (Json& o : children_->Owned(kinds[i], s.ns, s.name, s.uid))
      existing[std::string(kind_names[i]) + "/" + o["metadata"].value("name", "")] = o;
  return existing;
}

StatusOr<bool> Reconciler::ApplyChange(State& s, const ObjectChange& c) {
  switch (c.change) {
    case Change::kMake:
      return MakeObject(s, *c.want);
    case Change::kWait:
      return false;
    case Change::kCompare:
      break;
  }
  const Json& o = *c.want;
  ADAM_ASSIGN_OR_RETURN(const kube::Resource r, kube::ResourceForKind(o["apiVersion"], o["kind"]));
  Repair(s, r, o, *c.current);
  return c.ready;
}

StatusOr<bool> Reconciler::MakeObject(State& s, const Json& o) {
  const std::string kind = o["kind"];
  ADAM_ASSIGN_OR_RETURN(const kube::Resource r, kube::ResourceForKind(o["apiVersion"], kind));
  if (kind == "Pod") {
    if (const auto left = BackoffLeft(s, o)) {  // a crash-looping role waits its turn
      LookAgainWithin(s.requeue_after, *left);
      return false;
    }
  }
  auto c = client_->Create(r, s.ns, Json::parse(o.dump()));
  if (!c.ok() && c.status().code() != StatusCode::kAlreadyExists) {
    // Refused for good (admission, quota, an invalid field): said on the job, tried again
    // later; any other error fails the pass, which the work queue retries with its back-off.
    auto refused = RefusedCreate(kind, o["metadata"]["name"], c.status());
    if (!refused) return c.status();
    if (!s.refused) s.refused = std::move(refused);
    const std::chrono::milliseconds again(10000);
    LookAgainWithin(s.requeue_after, again);
    return false;
  }
  return kind != "Pod" && kind != "StatefulSet";
}

void Reconciler::Repair(State& s, const kube::Resource& r, const Json& o, const Json& cur) {
  const Json want = ApplyConfiguration(o);
  const std::string diff = FirstDifference(want, cur);
  if (diff.empty()) return;
  const std::string kind = o["kind"];
  const std::string what = kind + " " + o["metadata"]["name"].get<std::string>();
  // Made or last applied at this generation of the spec, yet different: another client changed
  // it. Otherwise the spec changed since, and this brings the object to it.
  const bool drift = Annotation(cur, kGenerationAnnotation) == std::to_string(s.generation);
  auto applied = client_->Apply(r, s.ns, want, kFieldManager);
  if (!applied.ok() && applied.status().code() == StatusCode::kInvalidArgument && kind != "Pod" &&
      kind != "PersistentVolumeClaim")  // their labels are maps: never refused
    applied = client_->Update(r, s.ns, WrittenOver(cur, want));  // drift.h: a re-keyed item
  if (!applied.ok()) {
    // Not the pass's failure: the job's other objects are still made and its pods still
    // replaced; the next pass tries again. (Event logs it too.)
    Event(s, "Warning", "RepairFailed",
          what + ": " + diff +
              " differs from the job's and could not be put back: " + applied.status().message());
    return;
  }
  if (!drift) return;
  Event(s, "Normal", "Repaired", what + ": " + diff + " was changed by another client; put back");
  if (on_repair_) on_repair_(kind);
}

const std::vector<Json>& Reconciler::Rendered(State& s) {
  if (!s.rendered) {
    RenderOptions ro;
    ro.manifest = ManifestOf(s.held_job ? *s.held_job : s.job);
    ro.owner_uid = s.uid;
    ro.generation = s.generation;
    s.rendered = Render(*s.spec, ro);
  }
  return *s.rendered;
}

StatusOr<bool> Reconciler::EnsurePodGroup(State& s, std::vector<Json>* desired, bool creating) {
  for (const Json& o : *desired) {
    if (o["kind"] != "PodGroup") continue;
    if (o["apiVersion"] == kGangApiVersion) return EnsureGang(s, Json(o), desired, creating);
    // Made with the job's first objects; no informer watches PodGroups. Once made, its
    // minMember follows the job's pod count (trainers scaled), so that a gang is never waited
    // for with more, or placed with fewer, pods than the job has.
    if (ConditionIs(s.status, "Created", "True")) {
      auto cur = client_->Get(kube::PodGroups(), s.ns, o["metadata"]["name"]);
      if (!cur.ok()) {
        if (cur.status().code() == StatusCode::kNotFound) return true;  // the next look makes it
        return cur.status();
      }
      if ((*cur)["spec"].value("minMember", 0) == o["spec"].value("minMember", 0)) return true;
      auto w = client_->Apply(kube::PodGroups(), s.ns, ApplyConfiguration(o), kFieldManager);
      if (!w.ok()) return w.status();
      return true;
    }
    auto c = client_->Create(kube::PodGroups(), s.ns, Json::parse(o.dump()));
    if (c.ok() || c.status().code() == StatusCode::kAlreadyExists) return true;
    if (c.status().code() != StatusCode::kNotFound) return c.status();
    return NoPodGroupApi(s,
                         "spec.runPolicy.schedulingPolicy.coscheduling: the API server has no "
                         "scheduling.x-k8s.io/v1alpha1 PodGroups (install the scheduler-plugins "
                         "coscheduling plugin); no pod is made until it has");
  }
  return true;
}

bool Reconciler::NoPodGroupApi(State& s, const std::string& msg) {
  const Json* created = FindCondition(s.status, "Created");
  if (!created || created->value("reason", "") != "NoPodGroupAPI")
    Event(s, "Warning", "NoPodGroupAPI", msg);
  SetCondition(s, "Created", false, "NoPodGroupAPI", msg, true);
  s.requeue_after = std::chrono::milliseconds(30000);
  return false;
}

StatusOr<bool> Reconciler::EnsureGang(State& s, const Json& group, std::vector<Json>* desired,
                                      bool creating) {
  // A PodGroup is immutable (and kept while a pod names it): its minCount stays the job's pod
  // count when it was made, and is read once per job; it is looked for again on a pass that makes
  // pods (made again if another client deleted it).
  const std::string key = s.ns + "/" + s.name;
  std::optional<int64_t> min;
  if (!creating) {
    MutexLock lock(mu_);
    auto known = gang_min_counts_.find(key);
    if (known != gang_min_counts_.end() && known->second.first == s.uid) min = known->second.second;
  }
  if (!min) {
    const std::string name = group["metadata"]["name"];
    auto cur = client_->Get(kube::GangPodGroups(), s.ns, name);
    if (!cur.ok() && cur.status().code() != StatusCode::kNotFound) return cur.status();
    if (!cur.ok()) {
      auto c = client_->Create(kube::GangPodGroups(), s.ns, group);
      if (c.ok() || c.status().code() == StatusCode::kAlreadyExists) return true;
      if (c.status().code() != StatusCode::kNotFound) return c.status();
      return NoPodGroupApi(
          s, "spec.runPolicy.schedulingPolicy.gang: the API server serves no " +
                 std::string(kGangApiVersion) +
                 " PodGroups (Kubernetes 1.36 with the GenericWorkload and GangScheduling feature "
                 "gates and that API version enabled); no pod is made until it does");
    }
    const Json policy =
        (*cur).value("spec", Json::object()).value("schedulingPolicy", Json::object());
    const Json read = policy.value("gang", Json::object()).value("minCount", Json(0));
    min = read.is_number_integer() ? read.get<int64_t>() : 0;
    MutexLock lock(mu_);
    gang_min_counts_[key] = {s.uid, *min};
  }
  // A job scaled below minCount makes its pods outside the gang (on every pass, so that the
  // controllers' template compares the same): in it they would wait for pods that never come.
  if (*min > PodCount(*s.spec))
    for (Json& o : *desired) {
      if (o["kind"] == "Pod") o["spec"].erase("schedulingGroup");
      if (o["kind"] == "StatefulSet") o["spec"]["template"]["spec"].erase("schedulingGroup");
    }
  return true;
}

// The pods the diff found unplanned (diff.h: ObjectDiff::unplanned_pods).
Status Reconciler::DeleteUnplanned(State& s, const std::vector<std::string>& pods) {
  for (const std::string& name : pods) {
    Status d = client_->Delete(kube::Pods(), s.ns, name);
    if (!d.ok() && d.code() != StatusCode::kNotFound) return d;
  }
  return OkStatus();
}

Status Reconciler::EnsureObjects(State& s) {
  std::vector<Json> desired = Rendered(s);
  const std::map<std::string, Json> existing = ExistingObjects(s);
  // Placed where Kueue admitted it when pods are made, and on every pass while the controllers'
  // StatefulSet exists: its template, compared for drift, holds the flavor's tolerations (a list
  // an apply would replace). A pod is compared by its labels and annotations only, where the
  // placement's extra keys are no difference, so other passes read no ResourceFlavor.
  const bool creating = MakesPods(desired, existing);
  if (s.admission && (creating || HasStatefulSet(existing))) {
    ADAM_ASSIGN_OR_RETURN(const bool placed, PlaceAdmitted(s, &desired));
    if (!placed) return OkStatus();
  }
  ADAM_ASSIGN_OR_RETURN(const bool grouped, EnsurePodGroup(s, &desired, creating));
  if (!grouped) return OkStatus();  // a gang without its group would be placed pod by pod
  const ObjectDiff diff = DiffObjects(desired, existing, ConditionIs(s.status, "Created", "True"));
  // At the start a later stage waits until the one before it is ready. Once the job ran whole
  // and still has pods of its last stage (diff.started), a lost pod is made again at once
  // whatever the other stages' state: a trainer whose node was lost goes on elsewhere with the
  // copies left while a parameter server tied to that node's volume cannot come back. A job whose
  // pods all went (suspended, evicted by Kueue) starts stage by stage again.
  const size_t last = diff.stages.size() - 1;
  bool later_stages_wait = false;
  for (size_t stage = 0; stage <= last; ++stage) {
    bool ready = true;
    for (const ObjectChange& c : diff.stages[stage]) {
      ADAM_ASSIGN_OR_RETURN(const bool up, ApplyChange(s, c));
      ready = ready && up;
    }
    if (!ready && !diff.started) {
      // Later stages wait; a pod or StatefulSet change requeues the job through the informers.
      later_stages_wait = stage < last;
      break;
    }
  }
  ADAM_RETURN_IF_ERROR(DeleteUnplanned(s, diff.unplanned_pods));
  if (!later_stages_wait)  // every object of the plan was made (the last stage's maybe not up yet)
    SetCondition(s, "Created", true, "ObjectsCreated", "every object of the plan exists");
  return OkStatus();
}

}  // namespace adam::op
