// A queued job's admission by Kueue (reconciler.h: Admit and its parts), and where the pods of
// an admitted job go (PlaceAdmitted). kueue.h has the pure parts.
#include <algorithm>
#include <utility>

#include "reconcile/conditions.h"
#include "reconcile/kueue.h"
#include "reconcile/reconciler.h"
#include "reconcile/render.h"
#include "reconcile/state.h"

namespace adam::op {

using kube::FormatTime;

namespace {

// What the Admitted condition adds while an elastic job waits for its larger slice.
std::string ResizingNote(const WorkloadState& slice) {
  return "resizing: the job runs at these counts until Kueue admits Workload " + slice.name +
         (slice.pending_message.empty() ? "" : " (" + slice.pending_message + ")");
}

}  // namespace

StatusOr<bool> Reconciler::PlaceAdmitted(State& s, std::vector<Json>* desired) {
  // Pods go where the admitted ResourceFlavors put them (their node labels and tolerations).
  std::map<std::string, FlavorPlacement> flavors;
  for (const auto& [pod_set, names] : s.admission->flavors)
    for (const std::string& f : names) {
      if (flavors.count(f)) continue;
      ADAM_ASSIGN_OR_RETURN(const Json rf, client_->Get(kube::ResourceFlavors(), "", f));
      const Json spec = rf.value("spec", Json::object());
      flavors[f] = {spec.value("nodeLabels", Json::object()),
                    spec.value("tolerations", Json::array())};
    }
  // And with what the admission checks give them (podSetUpdates).
  Status placed = ApplyFlavors(*s.admission, flavors, desired);
  if (placed.ok()) placed = ApplyPodSetUpdates(*s.admission, desired);
  // And, for the roles Kueue placed by topology, gated for its topology ungater.
  if (placed.ok()) {
    ApplyTopology(*s.admission, desired);
    return true;
  }
  // No pod is made: a retry cures it only once Kueue or the job changes.
  const std::string& msg = placed.message();
  const Json* created = FindCondition(s.status, "Created");
  if (!created || created->value("message", "") != msg)
    Event(s, "Warning", "PlacementConflict", msg);
  SetCondition(s, "Created", false, "PlacementConflict", msg, true);
  s.requeue_after = std::chrono::milliseconds(30000);
  return false;
}

bool Reconciler::Queued(State& s, const std::string& message) {
  s.status["phase"] = "Queued";
  s.status.erase("startTime");  // the deadline counts from the admission, as a Job's from a resume
  SetCondition(s, "Admitted", false, "Pending", message, true);
  SetCondition(s, "Running", false, "Queued", message);
  return false;
}

StatusOr<bool> Reconciler::Admit(State& s) {
  const std::string queue = Label(s.job, kQueueLabel);
  if (!kueue_ || queue.empty()) return true;
  Json desired = WorkloadFor(*s.spec, Rendered(s), queue, s.uid, s.generation);
  if (Annotation(s.job, kElasticJobAnnotation) == "true") {
    desired["metadata"]["annotations"][kElasticJobAnnotation] = "true";
    return AdmitElastic(s, desired, queue);
  }
  const std::string name = desired["metadata"]["name"];
  std::optional<Json> wl;
  for (Json& w : children_->Owned(kube::Workloads(), s.ns, s.name, s.uid))
    if (w["metadata"].value("name", "") == name) wl = std::move(w);
  if (!wl) return Submit(s, desired, queue);
  if (HasDeletion(*wl)) return Queued(s, "Workload " + name + " is being deleted");
  const WorkloadState st = ReadWorkload(*wl);
  if (st.evicted && (st.quota_reserved || !s.pods.empty())) return StopEvicted(s, *wl, st);
  // A scaled job asks for other quota: its Workload is made again and admitted again.
  if (!SamePodSets(*wl, desired))
    return Requeue(s, std::vector<Json>{*wl}, st.admitted, "the pod counts changed");
  if (!st.admitted) return Waiting(s, st);
  return RunAdmitted(s, std::move(*wl), st);
}

StatusOr<bool> Reconciler::AdmitElastic(State& s, const Json& desired, const std::string& queue) {
  std::vector<Json> active;  // the job's Workloads not finished, oldest first
  for (Json& w : children_->Owned(kube::Workloads(), s.ns, s.name, s.uid))
    if (!HasDeletion(w) && !ReadWorkload(w).finished) active.push_back(std::move(w));
  std::sort(active.begin(), active.end(), [](const Json& a, const Json& b) {
    return std::make_pair(WorkloadGeneration(a), a["metadata"].value("name", "")) <
           std::make_pair(WorkloadGeneration(b), b["metadata"].value("name", ""));
  });
  if (active.empty()) return Submit(s, desired, queue);
  WorkloadState st = ReadWorkload(active.back());
  if (active.size() > 1 && !st.quota_reserved && SamePodSets(active[active.size() - 2], desired) &&
      ReadWorkload(active[active.size() - 2]).admitted) {
    // Scaled back to the admitted counts before Kueue admitted the slice asked for: it goes.
    Status d = client_->Delete(kube::Workloads(), s.ns, st.name);
    if (!d.ok() && d.code() != StatusCode::kNotFound) return d;
    active.pop_back();
    st = ReadWorkload(active.back());
  }
  if (st.evicted && (st.quota_reserved || !s.pods.empty()))
    return StopEvicted(s, active.back(), st);
  const Resize resize = CompareCounts(active.back(), desired);
  if (resize == Resize::kReshaped)
    return Requeue(s, active, st.admitted, "the job's roles changed");
  if (resize == Resize::kUp && st.quota_reserved) return Grow(s, active.back(), desired, st);
  if (resize != Resize::kSame) {
    // In place: a Workload without quota may change its counts, an admitted one lower them
    // (with Kueue's ElasticJobsViaWorkloadSlices; without it Kueue refuses, and the job is
    // queued again whole, as a job that is not elastic is).
    auto u = client_->Update(kube::Workloads(), s.ns, WithCounts(active.back(), desired));
    if (!u.ok() && u.status().code() == StatusCode::kAborted) return u.status();  // stale: again
    if (!u.ok())
      return Requeue(s, active, st.admitted,
                     "the pod counts changed and Kueue refused changing those of Workload " +
                         st.name + " in place (" + u.status().message() + ")");
    active.back() = *u;
    if (st.quota_reserved)
      Event(s, "Normal", "Resized",
            "lowered the counts of Workload " + st.name + " in place; Kueue takes back the rest");
  }
  if (st.admitted) return Resized(s, active, st);
  // The newest waits for Kueue; an admitted older slice keeps the job running at its counts.
  for (auto older = active.rbegin() + 1; older != active.rend(); ++older) {
    const WorkloadState o = ReadWorkload(*older);
    if (!o.quota_reserved) continue;
    if (o.evicted) return StopEvicted(s, *older, o);
    if (!o.admitted) break;
    HoldAt(s, *older);
    return RunAdmitted(s, *older, o, ResizingNote(st));
  }
  if (std::optional<Json> replaced = JustReplaced(s, active.back())) {
    // Kueue admitted the slice in the replaced one's place and has yet to write so: the job
    // runs on at the replaced one's counts (nothing is written to a finished Workload).
    HoldAt(s, *replaced);
    RunAdmitted(s, *replaced, ReadWorkload(*replaced),
                "Kueue replaced it with Workload " + st.name + "; its admission is on its way");
    s.workload.reset();
    return true;
  }
  return Waiting(s, st);
}

std::optional<Json> Reconciler::JustReplaced(State& s, const Json& slice) {
  const std::string key = Annotation(slice, kSliceReplacementAnnotation);
  if (key.empty()) return std::nullopt;
  const std::string name = key.substr(key.find('/') + 1);
  for (const Json& w : children_->Owned(kube::Workloads(), s.ns, s.name, s.uid)) {
    const WorkloadState old = ReadWorkload(w);
    if (old.name != name || !old.finished || old.finished_reason != kSliceReplacedReason) continue;
    const auto at = kube::ParseTime(old.finished_at);
    const auto until = (at ? *at : s.now) + kSliceHandover;
    if (until <= s.now) return std::nullopt;  // the slice was never admitted: the job stops
    LookAgainWithin(s.requeue_after,
                    std::chrono::duration_cast<std::chrono::milliseconds>(until - s.now) +
                        std::chrono::milliseconds(10));
    return w;
  }
  return std::nullopt;
}

StatusOr<bool> Reconciler::Grow(State& s, const Json& admitted, const Json& desired,
                                const WorkloadState& st) {
  // A larger slice replaces the admitted Workload once Kueue admits it, counting the admitted
  // one's quota as its own; until then the job runs as admitted.
  const Json slice = SliceReplacing(admitted, desired, s.generation);
  const std::string name = slice["metadata"]["name"];
  ADAM_ASSIGN_OR_RETURN(
      const std::string why,
      SubmitWorkload(s, slice, "Resizing",
                     "asked Kueue for Workload " + name + " with the new counts, to replace " +
                         st.name + "; the job runs at its admitted counts until Kueue admits it"));
  if (!st.admitted) return Waiting(s, st);
  HoldAt(s, admitted);
  WorkloadState pending;
  pending.name = name;
  pending.pending_message = why;
  return RunAdmitted(s, admitted, st, ResizingNote(pending));
}

StatusOr<bool> Reconciler::Resized(State& s, const std::vector<Json>& active,
                                   const WorkloadState& st) {
  // Kueue marks a slice it replaced Finished as it admits the new one; one it has not (its
  // ElasticJobsViaWorkloadSlices off: both then hold quota) is finished here, as Kueue's job
  // framework does.
  for (size_t i = 0; i + 1 < active.size(); ++i) {
    auto u = client_->UpdateStatus(
        kube::Workloads(), s.ns,
        WithFinishedBecause(active[i], "OutOfSync", "replaced by Workload " + st.name,
                            FormatTime(s.now)));
    if (!u.ok() && u.status().code() != StatusCode::kNotFound) return u.status();
  }
  const Json* admitted = FindCondition(s.status, "Admitted");
  if (admitted && admitted->value("status", "") == "True" &&
      admitted->value("message", "").rfind("Kueue admitted Workload " + st.name + " in ", 0) != 0)
    Event(s, "Normal", "Resized", "Kueue admitted Workload " + st.name + " with the new counts");
  return RunAdmitted(s, active.back(), st);
}

void Reconciler::HoldAt(State& s, const Json& workload) {
  const std::map<std::string, int> counts = PodSetCounts(workload);
  Json job = s.job;
  bool held = false;
  auto hold = [&](PodRole pod_set, const char* role, int* replicas) {
    auto it = counts.find(RoleName(pod_set));
    if (it == counts.end() || it->second == *replicas) return;
    *replicas = it->second;
    job["spec"]["roles"][role]["replicas"] = it->second;
    held = true;
  };
  hold(PodRole::kParamServer, "parameterServer", &s.spec->roles.parameter_server.replicas);
  hold(PodRole::kDataServer, "dataServer", &s.spec->roles.data_server.replicas);
  hold(PodRole::kTrainer, "trainer", &s.spec->roles.trainer.replicas);
  if (!held) return;
  s.held_job = std::move(job);
  s.rendered.reset();
}

StatusOr<bool> Reconciler::Submit(State& s, const Json& desired, const std::string& queue) {
  ADAM_RETURN_IF_ERROR(Cleanup(s, true));
  const std::string name = desired["metadata"]["name"];
  ADAM_ASSIGN_OR_RETURN(const std::string why, SubmitWorkload(s, desired, "Queued",
                                                              "submitted to LocalQueue " + queue +
                                                                  " as Workload " + name));
  return Queued(s, why.empty() ? "waiting for Kueue to admit Workload " + name : why);
}

StatusOr<std::string> Reconciler::SubmitWorkload(State& s, Json made, const std::string& reason,
                                                 const std::string& note) {
  if (const std::string cls = Label(s.job, kPriorityClassLabel); !cls.empty()) {
    // Kueue orders (and preempts) by the value of the job's WorkloadPriorityClass, which a
    // Workload that names one must carry.
    auto pc = client_->Get(kube::WorkloadPriorityClasses(), "", cls);
    if (!pc.ok() && pc.status().code() != StatusCode::kNotFound) return pc.status();
    if (!pc.ok() || !pc->value("value", Json()).is_number_integer()) {
      const std::string msg = std::string(kPriorityClassLabel) + ": WorkloadPriorityClass " + cls +
                              (pc.ok() ? " has no integer value" : " does not exist") +
                              "; the job is not submitted until it does";
      if (!ConditionIs(s.status, "Admitted", "False") ||
          FindCondition(s.status, "Admitted")->value("message", "") != msg)
        Event(s, "Warning", "NoPriorityClass", msg);
      s.requeue_after = std::chrono::milliseconds(30000);
      return msg;
    }
    made["spec"]["priorityClassRef"] = {
        {"group", "kueue.x-k8s.io"}, {"kind", "WorkloadPriorityClass"}, {"name", cls}};
    made["spec"]["priority"] = (*pc)["value"];
  }
  auto c = client_->Create(kube::Workloads(), s.ns, made);
  if (!c.ok() && c.status().code() != StatusCode::kAlreadyExists) return c.status();
  if (c.ok()) Event(s, "Normal", reason, note);  // not again when the cache has yet to see it
  return std::string();
}

StatusOr<bool> Reconciler::StopEvicted(State& s, const Json& wl, const WorkloadState& st) {
  // Kueue's job framework: stop the job, then give the quota back (it queues the job again).
  if (s.status.value("phase", "") != "Queued")
    Event(s, "Warning", "Evicted",
          "Kueue evicted Workload " + st.name + " (" + st.evicted_reason +
              "): " + st.evicted_message + "; pods deleted, the job waits to be admitted again");
  ADAM_RETURN_IF_ERROR(Cleanup(s, true));
  const bool stopped = std::all_of(s.pods.begin(), s.pods.end(), HasDeletion) &&
                       children_->Owned(kube::StatefulSets(), s.ns, s.name, s.uid).empty();
  if (stopped && st.quota_reserved) {
    auto u = client_->UpdateStatus(kube::Workloads(), s.ns,
                                   WithReservationCleared(wl, FormatTime(s.now)));
    if (!u.ok()) return u.status();
  }
  return Queued(s, "evicted by Kueue (" + st.evicted_reason + "): " + st.evicted_message);
}

StatusOr<bool> Reconciler::Requeue(State& s, const std::vector<Json>& workloads, bool admitted,
                                   const std::string& why) {
  if (admitted)
    Event(s, "Normal", "Requeued",
          why + "; the job waits for Kueue to admit it with the new counts");
  ADAM_RETURN_IF_ERROR(Cleanup(s, true));
  for (const Json& w : workloads) {
    Status d = client_->Delete(kube::Workloads(), s.ns, w["metadata"].value("name", ""));
    if (!d.ok() && d.code() != StatusCode::kNotFound) return d;
  }
  return Queued(s, why + "; the job's Workload is made again");
}

StatusOr<bool> Reconciler::Waiting(State& s, const WorkloadState& st) {
  ADAM_RETURN_IF_ERROR(Cleanup(s, true));  // none, unless an admission was taken back
  return Queued(s, st.pending_message.empty() ? "waiting for Kueue to admit Workload " + st.name
                                              : st.pending_message);
}

bool Reconciler::RunAdmitted(State& s, Json wl, const WorkloadState& st, const std::string& note) {
  const bool was_admitted = ConditionIs(s.status, "Admitted", "True");
  std::string message =
      "Kueue admitted Workload " + st.name + " in ClusterQueue " + st.cluster_queue;
  if (!note.empty()) message += "; " + note;
  if (!was_admitted) {
    Event(s, "Normal", "Admitted", message);
    s.status["phase"] = "Pending";
  }
  SetCondition(s, "Admitted", true, "Admitted", message);
  s.admission = st;
  s.workload = std::move(wl);
  return true;
}

Status Reconciler::FinishWorkload(State& s) {
  if (!kueue_ || Label(s.job, kQueueLabel).empty()) return OkStatus();
  // Every Workload of the job not yet finished (an elastic job's slices included).
  for (const Json& w : children_->Owned(kube::Workloads(), s.ns, s.name, s.uid)) {
    if (HasDeletion(w) || ReadWorkload(w).finished) continue;
    const bool succeeded = s.status.value("phase", "") == "Succeeded";
    std::string message = "the job " + std::string(succeeded ? "succeeded" : "failed");
    auto u = client_->UpdateStatus(kube::Workloads(), s.ns,
                                   WithFinished(w, succeeded, message, FormatTime(s.now)));
    if (!u.ok() && u.status().code() != StatusCode::kNotFound) return u.status();
  }
  return OkStatus();
}

}  // namespace adam::op
