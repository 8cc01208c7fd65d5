// The job's pods as they run (reconciler.h): failures counted and decided by the failure rules,
// lost pods replaced with back-off, the start deadline, and what the cluster says of pods that do
// not start.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>
#include <set>

#include "core/exit_codes.h"
#include "net/tls.h"
#include "reconcile/conditions.h"
#include "reconcile/drift.h"
#include "reconcile/kueue.h"
#include "reconcile/reconciler.h"
#include "reconcile/render.h"
#include "reconcile/start_failures.h"
#include "reconcile/state.h"
#include "reconcile/status.h"
#include "spec/adamjob.h"

namespace adam::op {

using kube::FormatTime;
using kube::ParseTime;

namespace {

bool HasCondition(const Json& pod, const std::string& type, const std::string& status) {
  return ConditionIs(pod.value("status", Json::object()), type, status);
}

// What a failed pod means: the first of its role's spec failureRules that matches, else Adam's
// defaults (spec/adamjob.h FailureRule).
struct FailureVerdict {
  spec::FailureRule::Action action = spec::FailureRule::Action::kRestart;
  std::string rule;    // "spec.roles.trainer.failureRules[1]" when a rule decided; "" otherwise
  std::string reason;  // the condition's or event's reason
  std::string why;     // appended to "pod NAME failed (...)"
};

FailureVerdict JudgeFailure(const spec::AdamJob& job, PodRole role, const Json& pod, int code) {
  using Action = spec::FailureRule::Action;
  const std::vector<spec::FailureRule>* rules = nullptr;
  std::string field;
  switch (role) {
    case PodRole::kParamServer:
      rules = &job.roles.parameter_server.failure_rules;
      field = "parameterServer";
      break;
    case PodRole::kDataServer:
      rules = &job.roles.data_server.failure_rules;
      field = "dataServer";
      break;
    case PodRole::kTrainer:
    case PodRole::kModelWorker:  // a split trainer's other processes
      rules = &job.roles.trainer.failure_rules;
      field = "trainer";
      break;
    case PodRole::kController:
    case PodRole::kNone:
      break;
  }
  for (size_t i = 0; rules && i < rules->size(); ++i) {
    const spec::FailureRule& r = (*rules)[i];
    bool match = false;
    if (r.on_exit_codes) {
      const bool listed =
          std::find(r.exit_codes.begin(), r.exit_codes.end(), code) != r.exit_codes.end();
      match = code > 0 && listed == r.exit_codes_in;
    }
    for (const auto& [type, status] : r.pod_conditions) match |= HasCondition(pod, type, status);
    if (!match) continue;
    FailureVerdict v{r.action, "spec.roles." + field + ".failureRules[" + std::to_string(i) + "]",
                     "", ""};
    v.reason = r.action == Action::kFailJob  ? "FailureRule"
               : r.action == Action::kIgnore ? "PodFailureIgnored"
                                             : "PodFailed";
    v.why = " (" + v.rule + ": " + spec::FailureActionName(r.action) + ")";
    return v;
  }
  if (HasCondition(pod, "DisruptionTarget", "True"))
    return {Action::kIgnore, "", "PodDisrupted",
            " by the cluster (DisruptionTarget: eviction, preemption or node loss)"};
  if (code == kExitInvalid)
    return {Action::kFailJob, "", "InvalidInput",
            ": the role refused its input (a manifest field or data file; see the pod's log), "
            "which no restart can fix"};
  if (code == kExitDiverged)
    return {Action::kFailJob, "", "Diverged",
            ": training diverged; a restart would go on from the same weights"};
  return {Action::kRestart, "", "PodFailed", ""};
}

// A pod of a split trainer replica (modelWorkers > 1): the lead or one of its model workers.
bool ReplicaMember(const spec::AdamJob& job, PodRole role) {
  return job.roles.trainer.model_workers > 1 &&
         (role == PodRole::kTrainer || role == PodRole::kModelWorker);
}

// The role a pod's restarts and back-off count under (status.roles' key): a split replica's
// member counts as its trainer, the status listing no model worker of its own.
PodRole StatusRole(const spec::AdamJob& job, PodRole role) {
  return ReplicaMember(job, role) ? PodRole::kTrainer : role;
}

// The split replicas (by index) with a failed pod whose failure does not count (taken by the
// cluster, or a rule's Ignore).
std::set<std::string> ReplicasNotCounted(const spec::AdamJob& job, const std::vector<Json>& pods) {
  std::set<std::string> out;
  for (const Json& pod : pods) {
    const PodRole role = PodRoleOf(pod);
    if (HasDeletion(pod) || !ReplicaMember(job, role) || RolePhase(pod) != "Failed") continue;
    if (JudgeFailure(job, role, pod, ExitCode(pod)).action == spec::FailureRule::Action::kIgnore)
      out.insert(Label(pod, kIndexLabel));
  }
  return out;
}

// A member of a split replica that fails with a pod of its replica whose failure does not count
// (its lead, say, ended because the cluster took its worker) does not count either.
FailureVerdict JudgeMember(const spec::AdamJob& job, PodRole role, const Json& pod, int code,
                           const std::set<std::string>& not_counted) {
  FailureVerdict v = JudgeFailure(job, role, pod, code);
  if (v.action == spec::FailureRule::Action::kRestart && ReplicaMember(job, role) &&
      not_counted.count(Label(pod, kIndexLabel)))
    return {spec::FailureRule::Action::kIgnore, "", v.reason,
            " with a pod of its split replica whose failure does not count"};
  return v;
}

}  // namespace

// Adds to `replace` the members of each failed split replica that have not failed themselves,
// with an Event naming them: a lead waits on workers that are gone, and workers are handed their
// slices by a lead at its start.
void Reconciler::WithTheirReplicas(State& s, const std::set<std::string>& failed_replicas,
                                   std::vector<std::pair<std::string, std::string>>* replace) {
  for (const std::string& index : failed_replicas) {
    std::vector<std::string> rest;
    for (const Json& pod : s.pods) {
      const std::string name = pod["metadata"]["name"];
      if (HasDeletion(pod) || !ReplicaMember(*s.spec, PodRoleOf(pod)) ||
          Label(pod, kIndexLabel) != index)
        continue;
      const std::string phase = RolePhase(pod);
      if (phase == "Failed" || phase == "Succeeded") continue;
      replace->emplace_back(name, pod["metadata"].value("uid", name));
      rest.push_back(name);
    }
    if (rest.empty()) continue;
    std::string names;
    for (const std::string& n : rest) names += (names.empty() ? "" : ", ") + n;
    Event(s, "Normal", "ReplicaRestarting",
          "trainer " + index + " is a split replica: replacing " + names +
              " with its failed member, so that the replica starts again whole");
  }
}

// Whether this reconciler has counted the failure of the pod with `uid`.
bool Reconciler::Counted(const std::string& uid) {
  MutexLock lock(mu_);
  return counted_failures_.count(uid) > 0;
}

bool Reconciler::CountRestart(State& s, const std::string& role_key, const Json& pod,
                              const std::string& what) {
  const int backoff_limit = s.spec->run_policy.backoff_limit;
  const int restarts = s.status.value("restarts", 0) + 1;
  s.status["restarts"] = restarts;
  Json& rs = s.status["roles"][role_key];
  rs["restarts"] = (rs.is_object() ? rs.value("restarts", 0) : 0) + 1;
  if (restarts > backoff_limit) {
    Finish(s, false, "BackoffLimitExceeded",
           what + "; " + std::to_string(restarts) +
               " restarts exceed spec.runPolicy.backoffLimit " + std::to_string(backoff_limit));
    return true;
  }
  // With its last line: a crashed role's is its fatal signal (core/crash.h).
  SetCondition(s, "Restarting", true, "PodFailed", what + LastWords(pod) + "; restarting it");
  Event(s, "Warning", "PodFailed",
        what + LastWords(pod) + "; restarting it (" + std::to_string(restarts) + " of " +
            std::to_string(backoff_limit) + " restarts)");
  return false;
}

Status Reconciler::DeleteFailed(State& s,
                                const std::vector<std::pair<std::string, std::string>>& replace) {
  if (replace.empty()) return OkStatus();
  ADAM_RETURN_IF_ERROR(WriteStatus(s));  // the counts first
  for (const auto& [pod_name, uid] : replace) {
    {
      MutexLock lock(mu_);
      counted_failures_.insert(uid);
    }
    Status d = client_->Delete(kube::Pods(), s.ns, pod_name);
    if (!d.ok() && d.code() != StatusCode::kNotFound) return d;
  }
  return OkStatus();
}

// Failed pods are replaced. What a failure means is the role's failure rules' verdict
// (JudgeFailure): a restart counted against the run policy, a replacement without counting (a
// disruption by the cluster, by default), or the end of the job. The count is written to the
// status before the pod is deleted, so a conflicting status write loses nothing: the pod stays
// Failed and the next pass counts it again. A split replica is one unit, as `adam run` treats
// it: a failed member takes the rest of its replica with it (the new lead hands its new workers
// their slices), and members failing together count one restart.
Status Reconciler::HandlePods(State& s) {
  using Action = spec::FailureRule::Action;
  int trainers_done = 0;
  std::vector<std::pair<std::string, std::string>> replace;  // pod name, uid
  std::set<std::string> failed_replicas, counted_replicas;   // split replicas, by index
  std::set<std::string> crashed;  // roles (status keys) with a pod that failed by itself
  const std::set<std::string> not_counted = ReplicasNotCounted(*s.spec, s.pods);
  for (const Json& pod : s.pods) {
    if (HasDeletion(pod)) continue;
    const PodRole role = PodRoleOf(pod);
    const std::string pod_name = pod["metadata"]["name"];
    const std::string phase = RolePhase(pod);
    if (phase == "Succeeded" && role == PodRole::kTrainer) {
      ++trainers_done;
      if (Label(pod, kIndexLabel) == "0") ReadFinalFigures(s, pod);
    }
    if (phase != "Failed") continue;
    const std::string uid = pod["metadata"].value("uid", pod_name);
    replace.emplace_back(pod_name, uid);
    const bool member = ReplicaMember(*s.spec, role);
    if (member) failed_replicas.insert(Label(pod, kIndexLabel));
    if (Counted(uid)) continue;
    const int code = ExitCode(pod);
    const std::string why = pod.value("status", Json::object()).value("reason", "");
    const std::string what = "pod " + pod_name + " failed (" +
                             (code >= 0 ? "exit code " + std::to_string(code) : "no exit code") +
                             (why.empty() ? "" : ", " + why) + ")";
    const FailureVerdict v = JudgeMember(*s.spec, role, pod, code, not_counted);
    if (v.reason != "PodDisrupted") crashed.insert(RoleName(StatusRole(*s.spec, role)));
    if (v.action == Action::kIgnore) {
      Event(s, "Normal", v.reason, what + v.why + "; replacing it without counting a restart");
      continue;
    }
    if (v.action == Action::kFailJob) {
      Finish(s, false, v.reason, what + v.why + LastWords(pod));
      return OkStatus();
    }
    // One fault of a split replica: its members that failed with it are replaced uncounted.
    if (member && !counted_replicas.insert(Label(pod, kIndexLabel)).second) continue;
    // A model worker's restart is its replica's, a trainer's (the status lists no role of its own).
    if (CountRestart(s, RoleName(StatusRole(*s.spec, role)), pod, what + v.why)) return OkStatus();
  }
  WithTheirReplicas(s, failed_replicas, &replace);
  BackOff(s, crashed);
  ADAM_RETURN_IF_ERROR(DeleteFailed(s, replace));
  if (trainers_done >= s.spec->roles.trainer.replicas) {
    // Trainer 0 exits 0 only once the model is written (spec.output).
    if (!s.spec->output.volume.source.empty())
      s.status["model"] = {{"volume", Json::parse(s.spec->output.volume.source)},
                           {"file", s.spec->name + ".onnx"}};
    Finish(s, true, "TrainersSucceeded",
           "every trainer finished its " + std::to_string(s.spec->training.epochs) + " epochs");
  }
  return OkStatus();
}

// A pod whose node stopped answering stays (Terminating, once Kubernetes evicts it) until the
// kubelet confirms its end, which never comes while the node is away; and Adam's pods have fixed
// names, so its replacement waits as long. Trainers and data servers hold nothing a second copy
// could corrupt (a trainer that was only cut off pushes updates Hogwild takes, until its kubelet
// is back and stops it), so once the node has been unreachable (Ready Unknown) for
// node_loss_timeout_ they are force-deleted and made again elsewhere, not counted as failures.
// A parameter server or a controller member keeps its volume on that node: they wait for the
// node to come back, be deleted, or be tainted out-of-service (Kubernetes then deletes them).
Status Reconciler::ReplaceLostPods(State& s) {
  if (node_loss_timeout_.count() <= 0) return OkStatus();
  std::map<std::string, std::optional<std::chrono::system_clock::time_point>> lost_since;
  for (const Json& pod : s.pods) {
    const PodRole role = PodRoleOf(pod);
    if (role != PodRole::kTrainer && role != PodRole::kModelWorker && role != PodRole::kDataServer)
      continue;
    const std::string node = pod.value("spec", Json::object()).value("nodeName", "");
    const std::string phase = PodPhase(pod);
    if (node.empty() || phase == "Succeeded" || phase == "Failed") continue;
    if (!HasDeletion(pod) && PodReady(pod)) continue;  // its kubelet still reports it ready
    if (!lost_since.count(node)) {
      auto n = client_->Get(kube::Nodes(), "", node);
      if (!n.ok() && n.status().code() != StatusCode::kNotFound) return n.status();
      std::optional<std::chrono::system_clock::time_point> since;
      if (n.ok())
        for (const Json& c : n->value("status", Json::object()).value("conditions", Json::array()))
          if (c.value("type", "") == "Ready" && c.value("status", "") == "Unknown")
            since = ParseTime(c.value("lastTransitionTime", ""));
      lost_since[node] = since;  // a deleted node's pods go with Kubernetes' pod GC
    }
    const auto since = lost_since[node];
    if (!since) continue;
    const auto due = *since + node_loss_timeout_;
    const std::string name = pod["metadata"]["name"];
    if (due > s.now) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(due - s.now);
      LookAgainWithin(s.requeue_after, left);
      continue;
    }
    Status d = client_->ForceDelete(kube::Pods(), s.ns, name);
    if (d.code() == StatusCode::kNotFound) continue;
    if (!d.ok()) return d;
    Event(s, "Warning", "NodeLost",
          "pod " + name + ": node " + node + " has not answered since " + FormatTime(*since) +
              "; deleted at once so that it is made again on another node (not counted)");
  }
  return OkStatus();
}

// spec.runPolicy.startupDeadlineSeconds: a job whose pods have not all run that long after its
// start (the phase not yet Running) fails, quoting why they do not start, and gives back what it
// holds (its Kueue quota: the Workload is Finished). True when it failed; else a look is due then.
bool Reconciler::StartupTooLong(State& s, ReconcileResult& result) {
  const auto deadline = s.spec->run_policy.startup_deadline_seconds;
  if (!deadline || s.status.value("phase", "") == "Running") return false;
  const auto start = ParseTime(s.status.value("startTime", ""));
  const auto end = (start ? *start : s.now) + std::chrono::seconds(*deadline);
  if (end > s.now) {
    const auto in = std::chrono::duration_cast<std::chrono::milliseconds>(end - s.now) +
                    std::chrono::milliseconds(10);
    LookAgainWithin(result.requeue_after, in);
    return false;
  }
  std::string why;  // the first of these conditions that holds
  for (const char* type : {"StartFailure", "Unschedulable"}) {
    const Json* c = FindCondition(s.status, type);
    if (c && c->value("status", "") == "True") {
      why = "; " + c->value("message", "");
      break;
    }
  }
  Finish(s, false, "StartupDeadlineExceeded",
         "the job's pods were not all running within spec.runPolicy.startupDeadlineSeconds (" +
             std::to_string(*deadline) + " s)" + why);
  return true;
}

// Kept in status.roles.<role> (recentFailures, lastFailureTime, createAfter), so that an
// operator leader change keeps the back-off: a rule that ignores a crash (exit 137, say) would
// otherwise be a hot delete-and-create loop.
void Reconciler::BackOff(State& s, const std::set<std::string>& roles) {
  for (const std::string& role : roles) {
    Json& rs = s.status["roles"][role];
    if (!rs.is_object()) rs = Json::object();
    const RoleBackoff b =
        NextBackoff(rs.value("recentFailures", 0), ParseTime(rs.value("lastFailureTime", "")),
                    s.now, backoff_initial_, backoff_max_);
    const int n = b.recent_failures;
    const auto delay = b.delay;
    rs["recentFailures"] = n;
    rs["lastFailureTime"] = FormatTime(s.now);
    if (delay.count() == 0) {
      rs.erase("createAfter");
      continue;
    }
    // Whole seconds, as the API writes times: rounded up, so no pod comes back early.
    rs["createAfter"] = FormatTime(std::chrono::ceil<std::chrono::seconds>(s.now + delay));
    Event(s, "Warning", "BackOff",
          "role " + role + " failed " + std::to_string(n) + " times in a row; its pods are made " +
              "again in " + std::to_string((delay.count() + 999) / 1000) + " s, at " +
              rs["createAfter"].get<std::string>());
  }
}

std::optional<std::chrono::milliseconds> Reconciler::BackoffLeft(State& s, const Json& pod) {
  const std::string key = RoleName(StatusRole(*s.spec, PodRoleOf(pod)));
  const Json roles = s.status.value("roles", Json::object());
  if (!roles.is_object() || !roles.contains(key) || !roles[key].is_object()) return std::nullopt;
  const auto after = ParseTime(roles[key].value("createAfter", ""));
  if (!after || *after <= s.now) return std::nullopt;
  s.backing_off[key] = roles[key]["createAfter"];
  return std::chrono::ceil<std::chrono::milliseconds>(*after - s.now);
}

// Trainer 0's last figures, from the termination message it leaves when it succeeds (a JSON
// object: epochs, images, testAccuracy): what its /metrics said last may predate its last
// evaluation, and an exited container answers no scrape.
void Reconciler::ReadFinalFigures(State& s, const Json& pod) {
  const Json cs = AdamContainer(pod);
  if (!cs.is_object()) return;
  const std::string text =
      cs.value("state", Json::object()).value("terminated", Json::object()).value("message", "");
  const Json m = Json::parse(text, nullptr, false);
  if (!m.is_object()) return;
  if (m.contains("epochs") && m["epochs"].is_number_integer()) s.status["epoch"] = m["epochs"];
  if (m.contains("testAccuracy") && m["testAccuracy"].is_number())
    s.status["testAccuracy"] = std::round(m["testAccuracy"].get<double>() * 10000) / 10000;
}

// Pods the scheduler cannot place: the job's status and an Event say why, in the scheduler's
// words, so `kubectl describe aj` answers "why is it Pending?".
void Reconciler::ReportScheduling(State& s) {
  std::string first;
  int unschedulable = 0;
  for (const Json& pod : s.pods) {
    if (HasDeletion(pod) || PodPhase(pod) != "Pending") continue;
    for (const Json& c : pod.value("status", Json::object()).value("conditions", Json::array())) {
      if (c.value("type", "") != "PodScheduled" || c.value("status", "") != "False" ||
          c.value("reason", "") != "Unschedulable")
        continue;
      if (unschedulable++ == 0)
        first = "pod " + pod["metadata"].value("name", "") +
                " cannot be scheduled: " + c.value("message", "");
    }
  }
  if (unschedulable == 0) {
    SetCondition(s, "Unschedulable", false, "PodsScheduled", "every pod of the job is placed");
    return;
  }
  const std::string message =
      first +
      (unschedulable > 1 ? " (and " + std::to_string(unschedulable - 1) + " more pods)" : "");
  const Json* before = FindCondition(s.status, "Unschedulable");
  const bool known =
      before && before->value("status", "") == "True" && before->value("message", "") == message;
  SetCondition(s, "Unschedulable", true, "Unschedulable", message);
  if (!known) Event(s, "Warning", "Unschedulable", message);
}

// Pods that do not start: the job's StartFailure condition and a Warning event say why, in the
// API server's or the kubelet's words, within a few seconds of its happening (a pod that waits
// for what only events tell is looked at again every kStartGrace).
void Reconciler::ReportStartFailures(State& s) {
  std::optional<StartFailure> f = s.refused;
  if (!f) f = WaitingContainer(s.pods);
  if (!f) {
    const std::vector<std::string> stuck =
        StuckObjects(s.pods, children_->Owned(kube::StatefulSets(), s.ns, s.name, s.uid), s.now);
    if (!stuck.empty()) {
      const std::chrono::milliseconds again(kStartGrace);
      LookAgainWithin(s.requeue_after, again);
      auto events = client_->List(kube::Events(), s.ns, {});
      if (events.ok())
        f = FromEvents(*events, stuck);
      else
        spdlog::warn("{}/{}: events: {}", s.ns, s.name, events.status().message());
    }
  }
  if (!f) {
    SetCondition(s, "StartFailure", false, "NoStartFailure", "no pod of the job fails to start");
    return;
  }
  const Json* before = FindCondition(s.status, "StartFailure");
  // The same failure of the same object is one event, however its details change between the
  // kubelet's tries.
  const bool known = before && before->value("status", "") == "True" &&
                     before->value("reason", "") == f->reason &&
                     before->value("message", "").rfind(f->object + ":", 0) == 0;
  SetCondition(s, "StartFailure", true, f->reason, f->message);
  if (!known) Event(s, "Warning", f->reason, f->message);
}

}  // namespace adam::op
