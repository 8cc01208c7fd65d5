// Reconciler.
#include "reconcile/reconciler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>

#include "core/exit_codes.h"
#include "net/tls.h"
#include "reconcile/conditions.h"
#include "reconcile/drift.h"
#include "reconcile/kueue.h"
#include "reconcile/render.h"
#include "reconcile/start_failures.h"
#include "reconcile/state.h"
#include "spec/adamjob.h"

namespace adam::op {

using kube::FormatTime;
using kube::ParseTime;

std::string ManifestOf(const Json& job) {
  const Json md = job.value("metadata", Json::object());
  Json m = {{"apiVersion", job.value("apiVersion", "adam.dev/v1alpha1")},
            {"kind", job.value("kind", "AdamJob")},
            {"metadata",
             {{"name", md.value("name", "")}, {"namespace", md.value("namespace", "default")}}},
            {"spec", job.value("spec", Json::object())}};
  return m.dump(2) + "\n";  // JSON is YAML: every role parses it as its manifest
}

namespace {

bool PodReady(const Json& pod) {
  for (const Json& c : pod.value("status", Json::object()).value("conditions", Json::array()))
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  return false;
}

std::string PodPhase(const Json& pod) {
  return pod.value("status", Json::object()).value("phase", "Pending");
}

// The status of Adam's container in a pod (named after the role, as the role label is): other
// containers (a service mesh's sidecar, the user's) do not decide whether a role finished. The
// first container's when none has that name; null when the kubelet reported none.
Json AdamContainer(const Json& pod) {
  const Json statuses =
      pod.value("status", Json::object()).value("containerStatuses", Json::array());
  const std::string role = Label(pod, kRoleLabel);
  for (const Json& cs : statuses)
    if (cs.value("name", "") == role) return cs;
  return statuses.empty() ? Json() : statuses[0];
}

// The exit code of Adam's container once it terminated; -1 while it runs or when unknown
// (evicted, lost node).
int ExitCode(const Json& pod) {
  const Json cs = AdamContainer(pod);
  if (!cs.is_object()) return -1;
  const Json term = cs.value("state", Json::object()).value("terminated", Json::object());
  if (term.contains("exitCode") && term["exitCode"].is_number_integer())
    return term["exitCode"].get<int>();
  return -1;
}

// A pod's phase as Adam's container sees it: Succeeded or Failed once that container ended,
// though a sidecar keeps the pod Running (restartPolicy Never: it does not start again).
std::string RolePhase(const Json& pod) {
  std::string phase = PodPhase(pod);
  if (phase != "Running") return phase;
  const int code = ExitCode(pod);
  return code < 0 ? phase : code == 0 ? "Succeeded" : "Failed";
}

const char* kRoles[] = {"controller", "ps", "data-server", "trainer"};

// ": " and the last line the container wrote before it ended (its termination message: the
// kubelet keeps the end of the log of a failed container, FallbackToLogsOnError); "" if none.
std::string LastWords(const Json& pod) {
  const Json cs = AdamContainer(pod);
  if (!cs.is_object()) return "";
  std::string msg =
      cs.value("state", Json::object()).value("terminated", Json::object()).value("message", "");
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  if (msg.empty()) return "";
  const size_t nl = msg.rfind('\n');
  return ": " + (nl == std::string::npos ? msg : msg.substr(nl + 1)).substr(0, 1024);
}

}  // namespace

Reconciler::Reconciler(kube::Client* client, const Children* children, Now now,
                       kube::MetricsCache* metrics, std::chrono::milliseconds status_period)
    : client_(client),
      children_(children),
      now_(now ? std::move(now) : Now([] { return std::chrono::system_clock::now(); })),
      metrics_(metrics),
      status_period_(status_period) {}

// Trainer 0 evaluates after each epoch: its epoch and test accuracy are the job's; images/s is
// the sum of every trainer's rate between its last two samples. A trainer that runs unpinned
// (its cpuset is not its own: no static CPU manager) says so in adam_cpu_pinned, and the job's
// CpuPinned condition names it. Samples come from the cache, never from a wait on a pod.
void Reconciler::ReadTrainerMetrics(State& s) {
  if (!metrics_) return;
  double rate = 0;
  bool any_rate = false;
  std::vector<std::string> unpinned;
  int pinned = 0;
  for (const Json& pod : s.pods) {
    if (Label(pod, kRoleLabel) != "trainer" || PodPhase(pod) != "Running" || HasDeletion(pod))
      continue;
    const std::string ip = pod.value("status", Json::object()).value("podIP", "");
    if (ip.empty()) continue;
    const auto samples = metrics_->Latest(pod["metadata"].value("uid", ""), ip, kMetricsPort);
    if (samples.empty()) continue;  // not answered yet: the next look will tell
    const auto& m = samples[0].values;
    if (Label(pod, kIndexLabel) == "0") {
      if (auto e = m.find("adam_trainer_epoch"); e != m.end())
        s.status["epoch"] = int64_t(e->second);
      if (auto a = m.find("adam_trainer_test_accuracy"); a != m.end() && a->second > 0)
        s.status["testAccuracy"] = std::round(a->second * 10000) / 10000;
    }
    if (auto p = m.find("adam_cpu_pinned"); p != m.end()) {
      if (p->second > 0)
        ++pinned;
      else
        unpinned.push_back(pod["metadata"].value("name", ""));
    }
    if (samples.size() < 2) continue;
    auto now_images = m.find("adam_trainer_images_total");
    auto old_images = samples[1].values.find("adam_trainer_images_total");
    const double dt = std::chrono::duration<double>(samples[0].at - samples[1].at).count();
    if (now_images == m.end() || old_images == samples[1].values.end() || dt <= 0) continue;
    rate += std::max(0.0, now_images->second - old_images->second) / dt;
    any_rate = true;
  }
  if (any_rate) s.status["imagesPerSecond"] = std::round(rate);
  if (!unpinned.empty()) {
    std::string names;
    for (const auto& n : unpinned) names += (names.empty() ? "" : ", ") + n;
    SetCondition(
        s, "CpuPinned", false, "CpuSetShared",
        "trainers " + names +
            " run unpinned: their allowed CPUs are not their own (no "
            "static CPU manager on the node, or a fractional CPU limit), so pinning would pile "
            "threads of different pods onto the same cores",
        /*report_false=*/true);
  } else if (pinned > 0) {
    SetCondition(s, "CpuPinned", true, "ExclusiveCpus",
                 "every trainer's threads are pinned to its own cores");
  }
}

void Reconciler::SetCondition(State& s, const std::string& type, bool value,
                              const std::string& reason, const std::string& message,
                              bool report_false) {
  PutCondition(s.status, type, value, reason, message, FormatTime(s.now), s.generation,
               report_false);
}

namespace {

// The message cut to the API's limit, at a character boundary, marked as cut.
std::string EventNote(const std::string& message) {
  if (message.size() <= kEventNoteMax) return message;
  size_t end = kEventNoteMax - 3;
  while (end > 0 && (static_cast<unsigned char>(message[end]) & 0xC0) == 0x80) --end;
  return message.substr(0, end) + "...";
}

// A reconcile's next look is due within `in` at the latest: `at` keeps the earliest asked for.
void LookAgainWithin(std::optional<std::chrono::milliseconds>& at, std::chrono::milliseconds in) {
  if (!at || *at > in) at = in;
}

}  // namespace

void Reconciler::Event(State& s, const std::string& type, const std::string& reason,
                       const std::string& message) {
  spdlog::info("{}/{}: {} {}: {}", s.ns, s.name, type, reason, message);
  const std::string note = EventNote(message);
  const std::string key = s.ns + "/" + s.uid + "/" + type + "/" + reason + "/" + note;
  std::optional<Json> earlier;
  {
    MutexLock lock(mu_);
    auto it = recent_events_.find(key);
    if (it != recent_events_.end() && s.now - it->second.last < kEventSeriesWindow)
      earlier = it->second.event;
  }
  StatusOr<Json> written = UnavailableError("not written");
  if (earlier) {
    Json ev = *earlier;
    const int count = ev.contains("series") ? ev["series"].value("count", 1) + 1 : 2;
    ev["series"] = {{"count", count}, {"lastObservedTime", kube::FormatMicroTime(s.now)}};
    written = client_->Update(kube::EventsV1(), s.ns, ev);
    // Gone or changed meanwhile: the event is written anew.
  }
  if (!written.ok()) {
    // Named as Kubernetes' recorder names them, JOB.HEX-NANOSECONDS (events.k8s.io refuses a
    // generateName ending in '.'), each name later than the last.
    const int64_t at =
        std::chrono::duration_cast<std::chrono::nanoseconds>(s.now.time_since_epoch()).count();
    int64_t nanos;
    {
      MutexLock lock(mu_);
      nanos = last_event_nanos_ = std::max(last_event_nanos_ + 1, at);
    }
    char suffix[24];
    std::snprintf(suffix, sizeof suffix, ".%llx", static_cast<unsigned long long>(nanos));
    Json ev = {{"apiVersion", "events.k8s.io/v1"},
               {"kind", "Event"},
               {"metadata", {{"name", s.name + suffix}, {"namespace", s.ns}}},
               {"eventTime", kube::FormatMicroTime(s.now)},
               {"reportingController", "adam.dev/operator"},
               {"reportingInstance", reporting_instance_.substr(0, 128)},
               {"action", "Reconcile"},
               {"regarding",
                {{"apiVersion", "adam.dev/v1alpha1"},
                 {"kind", "AdamJob"},
                 {"name", s.name},
                 {"namespace", s.ns},
                 {"uid", s.uid}}},
               {"type", type},
               {"reason", reason},
               {"note", note}};
    written = client_->Create(kube::EventsV1(), s.ns, ev);
  }
  if (!written.ok()) {
    spdlog::warn("event {} for {}/{}: {}", reason, s.ns, s.name, written.status().message());
    return;
  }
  MutexLock lock(mu_);
  recent_events_[key] = {std::move(written).value(), s.now};
  if (recent_events_.size() > 512) {
    for (auto it = recent_events_.begin(); it != recent_events_.end();)
      it = s.now - it->second.last >= kEventSeriesWindow ? recent_events_.erase(it) : std::next(it);
  }
}

void Reconciler::Finish(State& s, bool succeeded, const std::string& reason,
                        const std::string& message) {
  s.finished = true;
  s.status["phase"] = succeeded ? "Succeeded" : "Failed";
  s.status["completionTime"] = FormatTime(s.now);
  SetCondition(s, "Running", false, reason, message);
  SetCondition(s, "Restarting", false, reason, message);
  SetCondition(s, succeeded ? "Succeeded" : "Failed", true, reason, message);
  Event(s, succeeded ? "Normal" : "Warning", reason, message);
}

Status Reconciler::DeletePods(State& s, const std::string& role) {
  for (const Json& pod : s.pods) {
    if (HasDeletion(pod) || (!role.empty() && Label(pod, kRoleLabel) != role)) continue;
    Status d = client_->Delete(kube::Pods(), s.ns, pod["metadata"]["name"]);
    if (!d.ok() && d.code() != StatusCode::kNotFound) return d;
  }
  return OkStatus();
}

// Pods (and the controller StatefulSet) a finished or suspended job no longer runs.
Status Reconciler::Cleanup(State& s, bool all) {
  const std::string policy = s.spec ? s.spec->run_policy.clean_pod_policy : "Running";
  if (!all && policy == "None") return OkStatus();
  for (const Json& pod : s.pods) {
    if (HasDeletion(pod)) continue;
    const std::string phase = PodPhase(pod);
    if (!all && policy == "Running" && phase != "Running" && phase != "Pending") continue;
    Status d = client_->Delete(kube::Pods(), s.ns, pod["metadata"]["name"]);
    if (!d.ok() && d.code() != StatusCode::kNotFound) return d;
  }
  for (const Json& sts : children_->Owned(kube::StatefulSets(), s.ns, s.name, s.uid)) {
    if (HasDeletion(sts)) continue;
    Status d = client_->Delete(kube::StatefulSets(), s.ns, sts["metadata"]["name"]);
    if (!d.ok() && d.code() != StatusCode::kNotFound) return d;
  }
  return OkStatus();
}

// Parameter servers flush on SIGTERM: the job's finalizer holds its deletion until they are
// gone, then lets the garbage collector take the rest. A server stuck terminating (its node
// unreachable) holds it for at most spec.runPolicy.flushTimeoutSeconds.
Status Reconciler::Finalize(State& s) {
  const Json fins = s.job["metadata"].value("finalizers", Json::array());
  if (std::find(fins.begin(), fins.end(), kFinalizer) == fins.end()) return OkStatus();
  std::vector<std::string> left;
  for (const Json& pod : s.pods) {
    if (Label(pod, kRoleLabel) != "ps") continue;
    left.push_back(pod["metadata"].value("name", ""));
    if (HasDeletion(pod)) continue;
    Status d = client_->Delete(kube::Pods(), s.ns, pod["metadata"]["name"]);
    if (!d.ok() && d.code() != StatusCode::kNotFound) return d;
  }
  if (!left.empty()) {
    const int64_t timeout =
        s.spec ? s.spec->run_policy.flush_timeout_seconds : spec::RunPolicy{}.flush_timeout_seconds;
    const auto since = ParseTime(s.job["metadata"].value("deletionTimestamp", ""));
    const auto until = (since ? *since : s.now) + std::chrono::seconds(timeout);
    if (s.now < until) {
      s.requeue_after = std::min<std::chrono::milliseconds>(
          std::chrono::milliseconds(1000),
          std::chrono::duration_cast<std::chrono::milliseconds>(until - s.now) +
              std::chrono::milliseconds(10));
      return Status(StatusCode::kUnavailable, "waiting for parameter servers to flush");
    }
    std::string names;
    for (const auto& n : left) names += (names.empty() ? "" : ", ") + n;
    Event(s, "Warning", "FlushTimedOut",
          "parameter servers " + names +
              " did not finish within spec.runPolicy.flushTimeoutSeconds (" +
              std::to_string(timeout) +
              " s); deleting the job without their last checkpoint flush");
  }
  Json updated = s.job;
  Json rest = Json::array();
  for (const Json& f : fins)
    if (f != kFinalizer) rest.push_back(f);
  updated["metadata"]["finalizers"] = rest;
  auto r = client_->Update(kube::AdamJobs(), s.ns, updated);
  if (!r.ok() && r.status().code() != StatusCode::kNotFound) return r.status();
  return OkStatus();
}

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

FailureVerdict JudgeFailure(const spec::AdamJob& job, const std::string& role, const Json& pod,
                            int code) {
  using Action = spec::FailureRule::Action;
  const std::vector<spec::FailureRule>* rules = nullptr;
  std::string field;
  if (role == "ps") {
    rules = &job.roles.parameter_server.failure_rules;
    field = "parameterServer";
  } else if (role == "data-server") {
    rules = &job.roles.data_server.failure_rules;
    field = "dataServer";
  } else if (role == "trainer" || role == "model-worker") {  // a split trainer's other processes
    rules = &job.roles.trainer.failure_rules;
    field = "trainer";
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
bool ReplicaMember(const spec::AdamJob& job, const std::string& role) {
  return job.roles.trainer.model_workers > 1 && (role == "trainer" || role == "model-worker");
}

// The split replicas (by index) with a failed pod whose failure does not count (taken by the
// cluster, or a rule's Ignore).
std::set<std::string> ReplicasNotCounted(const spec::AdamJob& job, const std::vector<Json>& pods) {
  std::set<std::string> out;
  for (const Json& pod : pods) {
    const std::string role = Label(pod, kRoleLabel);
    if (HasDeletion(pod) || !ReplicaMember(job, role) || RolePhase(pod) != "Failed") continue;
    if (JudgeFailure(job, role, pod, ExitCode(pod)).action == spec::FailureRule::Action::kIgnore)
      out.insert(Label(pod, kIndexLabel));
  }
  return out;
}

// A member of a split replica that fails with a pod of its replica whose failure does not count
// (its lead, say, ended because the cluster took its worker) does not count either.
FailureVerdict JudgeMember(const spec::AdamJob& job, const std::string& role, const Json& pod,
                           int code, const std::set<std::string>& not_counted) {
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
      if (HasDeletion(pod) || !ReplicaMember(*s.spec, Label(pod, kRoleLabel)) ||
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

// Failed pods are replaced. What a failure means is the role's failure rules' verdict
// (JudgeFailure): a restart counted against the run policy, a replacement without counting (a
// disruption by the cluster, by default), or the end of the job. The count is written to the
// status before the pod is deleted, so a conflicting status write loses nothing: the pod stays
// Failed and the next pass counts it again. A split replica is one unit, as `adam run` treats
// it: a failed member takes the rest of its replica with it (the new lead hands its new workers
// their slices), and members failing together count one restart.
Status Reconciler::HandlePods(State& s) {
  using Action = spec::FailureRule::Action;
  const int backoff_limit = s.spec->run_policy.backoff_limit;
  int trainers_done = 0;
  std::vector<std::pair<std::string, std::string>> replace;  // pod name, uid
  std::set<std::string> failed_replicas, counted_replicas;   // split replicas, by index
  std::set<std::string> crashed;  // roles (status keys) with a pod that failed by itself
  const std::set<std::string> not_counted = ReplicasNotCounted(*s.spec, s.pods);
  for (const Json& pod : s.pods) {
    if (HasDeletion(pod)) continue;
    const std::string role = Label(pod, kRoleLabel);
    const std::string pod_name = pod["metadata"]["name"];
    const std::string phase = RolePhase(pod);
    if (phase == "Succeeded" && role == "trainer") {
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
    if (v.reason != "PodDisrupted") crashed.insert(member ? "trainer" : role);
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
    const int restarts = s.status.value("restarts", 0) + 1;
    s.status["restarts"] = restarts;
    // A model worker's restart is its replica's, a trainer's (the status lists no role of its own).
    Json& rs = s.status["roles"][member ? "trainer" : role];
    rs["restarts"] = (rs.is_object() ? rs.value("restarts", 0) : 0) + 1;
    if (restarts > backoff_limit) {
      Finish(s, false, "BackoffLimitExceeded",
             what + v.why + "; " + std::to_string(restarts) +
                 " restarts exceed spec.runPolicy.backoffLimit " + std::to_string(backoff_limit));
      return OkStatus();
    }
    // With its last line: a crashed role's is its fatal signal (core/crash.h).
    SetCondition(s, "Restarting", true, "PodFailed",
                 what + v.why + LastWords(pod) + "; restarting it");
    Event(s, "Warning", "PodFailed",
          what + v.why + LastWords(pod) + "; restarting it (" + std::to_string(restarts) + " of " +
              std::to_string(backoff_limit) + " restarts)");
  }
  WithTheirReplicas(s, failed_replicas, &replace);
  BackOff(s, crashed);
  if (!replace.empty()) {
    ADAM_RETURN_IF_ERROR(WriteStatus(s));  // the counts first
    for (const auto& [pod_name, uid] : replace) {
      {
        MutexLock lock(mu_);
        counted_failures_.insert(uid);
      }
      Status d = client_->Delete(kube::Pods(), s.ns, pod_name);
      if (!d.ok() && d.code() != StatusCode::kNotFound) return d;
    }
  }
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
    const std::string role = Label(pod, kRoleLabel);
    if (role != "trainer" && role != "model-worker" && role != "data-server") continue;
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
    const auto last = ParseTime(rs.value("lastFailureTime", ""));
    const bool recent = last && s.now - *last < 2 * backoff_max_;
    const int n = recent ? rs.value("recentFailures", 0) + 1 : 1;
    rs["recentFailures"] = n;
    rs["lastFailureTime"] = FormatTime(s.now);
    auto delay = std::chrono::milliseconds(0);
    if (n > 1 && backoff_initial_.count() > 0) {
      delay = backoff_initial_;
      for (int i = 2; i < n && delay < backoff_max_; ++i) delay *= 2;
      delay = std::min(delay, backoff_max_);
    }
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
  const std::string role = Label(pod, kRoleLabel);
  const std::string key = ReplicaMember(*s.spec, role) ? "trainer" : role;
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

namespace {

// A Secret of the job `job` (uid `uid`), owned by it.
Json SecretObject(const std::string& name, const std::string& ns, const std::string& job,
                  const std::string& uid, const std::string& type,
                  const std::map<std::string, std::string>& data) {
  Json d = Json::object();
  for (const auto& [k, v] : data) d[k] = kube::Base64Encode(v);
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"type", type},
          {"metadata",
           {{"name", name},
            {"namespace", ns},
            {"labels",
             {{"app.kubernetes.io/name", "adam"},
              {"app.kubernetes.io/instance", job},
              {"app.kubernetes.io/managed-by", "adam-operator"},
              {kJobLabel, job},
              {kRoleLabel, "job"}}},
            {"ownerReferences",
             {{{"apiVersion", "adam.dev/v1alpha1"},
               {"kind", "AdamJob"},
               {"name", job},
               {"uid", uid},
               {"controller", true},
               {"blockOwnerDeletion", true}}}}}},
          {"data", d}};
}

// A Secret's data[key], decoded; "" when absent or not base64.
std::string SecretData(const Json& secret, const char* key) {
  auto v = kube::Base64Decode(secret.value("data", Json::object()).value(key, ""));
  return v.ok() ? *v : "";
}

}  // namespace

// Two Secrets per job: JOB-tls (ca.crt, tls.crt, tls.key), which every pod mounts, and JOB-ca
// (ca.crt, ca.key), which no pod mounts. Made once; the CA is never regenerated while its Secret
// exists. Once less than a third of the certificate's validity is left, a new certificate from the
// same CA replaces it in JOB-tls; roles read their files again every minute (net/tls.h).
//
// The operator never lists or watches Secrets (its RBAC has no list or watch on them): it reads
// its jobs' two by name, and only when it needs to. A certificate found valid is not read again
// until it is due for renewal, or for kSecretRecheck, whichever is sooner (a deleted JOB-tls is
// made again within that).
Status Reconciler::EnsureCertificates(State& s) {
  const std::string key = s.ns + "/" + s.name;
  {
    MutexLock lock(mu_);
    auto known = certificates_.find(key);
    if (known != certificates_.end() && known->second.uid == s.uid &&
        s.now < known->second.check_at) {
      s.renew_at = known->second.renew_at;
      return OkStatus();
    }
  }
  const std::string tls_name = TlsSecretName(*s.spec), ca_name = CaSecretName(*s.spec);
  ADAM_ASSIGN_OR_RETURN(const std::optional<Json> tls, OwnSecret(s, tls_name));
  bool valid = false;
  if (tls) {
    auto not_after = net::CertificateNotAfter(SecretData(*tls, "tls.crt"));
    valid = not_after.ok() && *not_after - certificate_validity_ / 3 > s.now;
    if (valid) s.renew_at = *not_after - certificate_validity_ / 3;
  }
  if (!valid) {  // the CA is read only to issue or renew
    ADAM_ASSIGN_OR_RETURN(const std::optional<Json> ca, OwnSecret(s, ca_name));
    const std::vector<std::string> hosts = {"*." + s.name, "*." + s.name + "." + s.ns + ".svc",
                                            "*." + s.name + "." + s.ns + ".svc.cluster.local"};
    ADAM_RETURN_IF_ERROR(tls ? RenewCertificate(s, *tls, ca, hosts, &valid)
                             : IssueCertificate(s, ca, hosts, &valid));
  }
  if (valid && s.renew_at) {
    MutexLock lock(mu_);
    certificates_[key] = {s.uid, *s.renew_at, std::min(*s.renew_at, s.now + kSecretRecheck)};
  }
  return OkStatus();
}

StatusOr<std::optional<Json>> Reconciler::OwnSecret(State& s, const std::string& name) {
  auto got = client_->Get(kube::Secrets(), s.ns, name);
  if (!got.ok()) {
    if (got.status().code() == StatusCode::kNotFound) return std::optional<Json>();
    return got.status();
  }
  // A predecessor's of the same name, still being deleted, is not the job's.
  if (HasDeletion(*got)) return std::optional<Json>();
  for (const Json& ref : (*got)["metadata"].value("ownerReferences", Json::array()))
    if (ref.value("controller", false) && ref.value("uid", "") == s.uid)
      return std::optional<Json>(std::move(*got));
  return std::optional<Json>();
}

namespace {

net::TlsMaterial IssuerOf(const Json& ca_secret) {
  net::TlsMaterial m;
  m.ca_pem = SecretData(ca_secret, "ca.crt");
  m.ca_key_pem = SecretData(ca_secret, "ca.key");
  return m;
}

}  // namespace

Status Reconciler::IssueCertificate(State& s, const std::optional<Json>& ca,
                                    const std::vector<std::string>& hosts, bool* valid) {
  const std::string tls_name = TlsSecretName(*s.spec), ca_name = CaSecretName(*s.spec);
  StatusOr<net::TlsMaterial> made =
      ca ? net::RenewCertificate(IssuerOf(*ca), s.name, hosts, certificate_validity_)
         : net::MakeJobCertificates(s.name, hosts, certificate_validity_);
  if (!ca && made.ok()) {
    auto c =
        client_->Create(kube::Secrets(), s.ns,
                        SecretObject(ca_name, s.ns, s.name, s.uid, "Opaque",
                                     {{"ca.crt", made->ca_pem}, {"ca.key", made->ca_key_pem}}));
    if (!c.ok() && c.status().code() != StatusCode::kAlreadyExists) return c.status();
    if (!c.ok()) {  // made by an earlier pass the cache has not shown yet: issue from that CA
      ADAM_ASSIGN_OR_RETURN(const Json existing, client_->Get(kube::Secrets(), s.ns, ca_name));
      made = net::RenewCertificate(IssuerOf(existing), s.name, hosts, certificate_validity_);
    }
  }
  if (!made.ok()) return Status(made.status().code(), ca_name + ": " + made.status().message());
  auto c = client_->Create(
      kube::Secrets(), s.ns,
      SecretObject(
          tls_name, s.ns, s.name, s.uid, "kubernetes.io/tls",
          {{"ca.crt", made->ca_pem}, {"tls.crt", made->cert_pem}, {"tls.key", made->key_pem}}));
  if (!c.ok() && c.status().code() != StatusCode::kAlreadyExists) return c.status();
  s.renew_at = s.now + certificate_validity_ - certificate_validity_ / 3;
  *valid = c.ok();  // one of the same name that is not the job's is looked at again next pass
  return OkStatus();
}

Status Reconciler::RenewCertificate(State& s, const Json& tls, const std::optional<Json>& ca,
                                    const std::vector<std::string>& hosts, bool* valid) {
  const std::string ca_name = CaSecretName(*s.spec);
  const auto renew_before = certificate_validity_ / 3;
  auto not_after = net::CertificateNotAfter(SecretData(tls, "tls.crt"));
  const std::string expiry =
      not_after.ok() ? "expires at " + FormatTime(*not_after) : "holds no readable tls.crt";
  if (!ca) return NotRenewable(s, expiry, "Secret " + ca_name + " with its CA's key is missing");
  auto renewed = net::RenewCertificate(IssuerOf(*ca), s.name, hosts, certificate_validity_);
  if (!renewed.ok()) {
    return NotRenewable(s, expiry,
                        "Secret " + ca_name + " is unusable: " + renewed.status().message());
  }
  Json updated = tls;
  updated["data"]["tls.crt"] = kube::Base64Encode(renewed->cert_pem);
  updated["data"]["tls.key"] = kube::Base64Encode(renewed->key_pem);
  updated["data"]["ca.crt"] = kube::Base64Encode(renewed->ca_pem);
  auto u = client_->Update(kube::Secrets(), s.ns, updated);  // ABORTED if the cache was stale
  if (!u.ok()) return u.status();
  {
    MutexLock lock(mu_);
    certificate_warned_.erase(s.ns + "/" + s.name);
  }
  const auto new_end = s.now + certificate_validity_;
  Event(s, "Normal", "CertificateRenewed",
        "the job's certificate " + expiry + "; renewed from the job's CA until " +
            FormatTime(new_end) +
            " (each role reads it within a minute of its Secret volume's update)");
  s.renew_at = new_end - renew_before;
  *valid = true;
  return OkStatus();
}

// The job's pods keep being looked after while someone mends the CA Secret. Every reconcile
// tries again; one fault is warned of at most hourly.
Status Reconciler::NotRenewable(State& s, const std::string& expiry, const std::string& why) {
  bool warn = false;
  {
    MutexLock lock(mu_);
    auto& [when, what] = certificate_warned_[s.ns + "/" + s.name];
    if (what != why || s.now - when >= std::chrono::hours(1)) {
      when = s.now;
      what = why;
      warn = true;
    }
  }
  if (warn) {
    const std::string tls_name = TlsSecretName(*s.spec);
    Event(s, "Warning", "CertificateNotRenewable",
          "the job's certificate in Secret " + tls_name + " " + expiry + " and " + why +
              "; mend it, or delete " + tls_name +
              " and the job's pods to start over with a new CA");
  }
  s.renew_at = s.now + std::chrono::hours(1);
  return OkStatus();
}

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

StatusOr<bool> Reconciler::EnsureObject(State& s, const Json& o,
                                        const std::map<std::string, Json>& existing) {
  const std::string kind = o["kind"];
  const std::string key = kind + "/" + o["metadata"]["name"].get<std::string>();
  ADAM_ASSIGN_OR_RETURN(const kube::Resource r, kube::ResourceForKind(o["apiVersion"], kind));
  auto it = existing.find(key);
  if (it == existing.end()) {
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
  const Json& cur = it->second;
  if (HasDeletion(cur)) return false;
  Repair(s, r, o, cur);
  bool ready = true;
  if (kind == "StatefulSet") {
    const int want = o["spec"]["replicas"];
    if (cur.value("status", Json::object()).value("readyReplicas", 0) < want) ready = false;
  }
  if (kind == "Pod" && Label(cur, kRoleLabel) != "trainer" && !PodReady(cur)) ready = false;
  return ready;
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

StatusOr<bool> Reconciler::EnsurePodGroup(State& s, std::vector<Json>* desired) {
  for (const Json& o : *desired) {
    if (o["kind"] != "PodGroup") continue;
    if (o["apiVersion"] == kGangApiVersion) return EnsureGang(s, Json(o), desired);
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
    const std::string msg =
        "spec.runPolicy.schedulingPolicy.coscheduling: the API server has no "
        "scheduling.x-k8s.io/v1alpha1 PodGroups (install the scheduler-plugins coscheduling "
        "plugin); no pod is made until it has";
    const Json* created = FindCondition(s.status, "Created");
    if (!created || created->value("reason", "") != "NoPodGroupAPI")
      Event(s, "Warning", "NoPodGroupAPI", msg);
    SetCondition(s, "Created", false, "NoPodGroupAPI", msg, true);
    s.requeue_after = std::chrono::milliseconds(30000);
    return false;
  }
  return true;
}

StatusOr<bool> Reconciler::EnsureGang(State& s, const Json& group, std::vector<Json>* desired) {
  const std::string name = group["metadata"]["name"];
  auto cur = client_->Get(kube::GangPodGroups(), s.ns, name);
  if (!cur.ok() && cur.status().code() != StatusCode::kNotFound) return cur.status();
  if (!cur.ok()) {
    auto c = client_->Create(kube::GangPodGroups(), s.ns, group);
    if (c.ok() || c.status().code() == StatusCode::kAlreadyExists) return true;
    if (c.status().code() != StatusCode::kNotFound) return c.status();
    const std::string msg =
        "spec.runPolicy.schedulingPolicy.gang: the API server serves no " +
        std::string(kGangApiVersion) +
        " PodGroups (Kubernetes 1.36 with the GenericWorkload and GangScheduling feature gates and "
        "that API version enabled); no pod is made until it does";
    const Json* created = FindCondition(s.status, "Created");
    if (!created || created->value("reason", "") != "NoPodGroupAPI")
      Event(s, "Warning", "NoPodGroupAPI", msg);
    SetCondition(s, "Created", false, "NoPodGroupAPI", msg, true);
    s.requeue_after = std::chrono::milliseconds(30000);
    return false;
  }
  // A PodGroup is immutable (and kept while a pod names it): its minCount stays the job's pod
  // count when it was made. A job scaled below that makes its new pods outside the gang, which
  // would otherwise wait for pods that never come; the job holds the rest already.
  const Json policy =
      (*cur).value("spec", Json::object()).value("schedulingPolicy", Json::object());
  const Json min = policy.value("gang", Json::object()).value("minCount", Json(0));
  if (min.is_number_integer() && min.get<int64_t>() > PodCount(*s.spec))
    for (Json& o : *desired) {
      if (o["kind"] == "Pod") o["spec"].erase("schedulingGroup");
      if (o["kind"] == "StatefulSet") o["spec"]["template"]["spec"].erase("schedulingGroup");
    }
  return true;
}

Status Reconciler::EnsureObjects(State& s) {
  std::vector<Json> desired = Rendered(s);
  const std::map<std::string, Json> existing = ExistingObjects(s);
  // Placed where Kueue admitted it when pods are made, and on every pass while the controllers'
  // StatefulSet exists: its template, compared for drift, holds the flavor's tolerations (a list
  // an apply would replace). A pod is compared by its labels and annotations only, where the
  // placement's extra keys are no difference, so other passes read no ResourceFlavor.
  const bool creating = std::any_of(desired.begin(), desired.end(), [&](const Json& o) {
    const std::string kind = o["kind"];
    return (kind == "Pod" || kind == "StatefulSet") &&
           !existing.count(kind + "/" + o["metadata"]["name"].get<std::string>());
  });
  const bool has_set = std::any_of(existing.begin(), existing.end(), [](const auto& e) {
    return e.first.rfind("StatefulSet/", 0) == 0;
  });
  if (s.admission && (creating || has_set)) {
    ADAM_ASSIGN_OR_RETURN(const bool placed, PlaceAdmitted(s, &desired));
    if (!placed) return OkStatus();
  }

  std::set<std::string> desired_names;
  bool created_all = true;
  int stage_ready_through = -1;
  int max_stage = 0;
  for (const Json& o : desired) {
    max_stage = std::max(max_stage, StageOf(o));
    desired_names.insert(o["kind"].get<std::string>() + "/" +
                         o["metadata"]["name"].get<std::string>());
  }
  ADAM_ASSIGN_OR_RETURN(const bool grouped, EnsurePodGroup(s, &desired));
  if (!grouped) return OkStatus();  // a gang without its group would be placed pod by pod
  // At the start a later stage waits until the one before it is ready. Once the job ran whole
  // (Created) and still has pods of its last stage, a lost pod is made again at once whatever
  // the other stages' state: a trainer whose node was lost goes on elsewhere with the copies left
  // while a parameter server tied to that node's volume cannot come back. A job whose pods all
  // went (suspended, evicted by Kueue) starts stage by stage again.
  bool started = false;
  if (ConditionIs(s.status, "Created", "True"))
    for (const auto& [key, o] : existing)
      started =
          started || (key.rfind("Pod/", 0) == 0 && !HasDeletion(o) && StageOf(o) == max_stage);
  bool ready_so_far = true;
  for (int stage = 0; stage <= max_stage; ++stage) {
    bool ready = true;
    for (const Json& o : desired) {
      if (StageOf(o) != stage || o["kind"] == "PodGroup") continue;
      ADAM_ASSIGN_OR_RETURN(const bool up, EnsureObject(s, o, existing));
      ready = ready && up;
    }
    if (!ready && !started) {
      // Later stages wait; a pod or StatefulSet change requeues the job through the informers.
      created_all = stage == max_stage;
      break;
    }
    ready_so_far = ready_so_far && ready;
    if (ready_so_far) stage_ready_through = stage;
  }
  // Trainers the plan no longer has (a scale-down) go. A parameter server it no longer has
  // (spec.roles.parameterServer.replicas lowered, copies > 1) goes only once it retired: it
  // exits 0 by itself when the controller has moved its copies to the others, and until then it
  // still serves. Nothing else is deleted for a changed spec: controllers hold the shard map,
  // whose shape the CRD keeps immutable; if a change slipped past it, they keep running.
  for (const auto& [key, o] : existing) {
    if (desired_names.count(key) || HasDeletion(o) || key.rfind("Pod/", 0) != 0) continue;
    const std::string role = Label(o, kRoleLabel);
    if (role != "trainer" && !(role == "ps" && RolePhase(o) == "Succeeded")) continue;
    Status d = client_->Delete(kube::Pods(), s.ns, o["metadata"]["name"].get<std::string>());
    if (!d.ok() && d.code() != StatusCode::kNotFound) return d;
  }
  if (created_all || stage_ready_through == max_stage)
    SetCondition(s, "Created", true, "ObjectsCreated", "every object of the plan exists");
  return OkStatus();
}

bool Reconciler::OwnWrite(const kube::WatchEvent& ev) {
  if (ev.type != "MODIFIED" || !ev.object.contains("metadata")) return false;
  const Json& md = ev.object["metadata"];
  const std::string rv = md.value("resourceVersion", "");
  MutexLock lock(mu_);
  auto w = status_writes_.find(md.value("namespace", "") + "/" + md.value("name", ""));
  return w != status_writes_.end() && !rv.empty() && w->second.resource_version == rv;
}

// A conflict from a write to metadata alone (an annotation, a label) does not make this pass's
// status stale: the job is read again and, if its spec and status are still the ones this pass
// started from, the status is written over the new resourceVersion. Without that, a client that
// keeps touching the job's metadata could hold off every status write, and with it the
// replacement of a failed pod, indefinitely.
Status Reconciler::WriteStatus(State& s) {
  s.status["observedGeneration"] = s.generation;
  if (s.status == s.old_status) return OkStatus();
  const std::string key = s.ns + "/" + s.name;
  // A new throughput alone waits for the next of every 6 status periods (a minute by default):
  // figures that move with every scrape would otherwise write the job every period.
  if (s.status.contains("imagesPerSecond") && s.old_status.contains("imagesPerSecond")) {
    Json a = s.status, b = s.old_status;
    a.erase("imagesPerSecond");
    b.erase("imagesPerSecond");
    MutexLock lock(mu_);
    auto last = status_writes_.find(key);
    if (a == b && last != status_writes_.end() && s.now - last->second.at < 6 * status_period_)
      return OkStatus();
  }
  Json updated = s.job;
  for (int attempt = 0;; ++attempt) {
    updated["status"] = s.status;
    auto r = client_->UpdateStatus(kube::AdamJobs(), s.ns, updated);
    if (r.ok()) {
      s.job = *r;
      s.old_status = s.status;
      MutexLock lock(mu_);
      status_writes_[key] = {s.now, s.job["metadata"].value("resourceVersion", "")};
      return OkStatus();
    }
    if (r.status().code() != StatusCode::kAborted || attempt == 4) return r.status();
    auto fresh = client_->Get(kube::AdamJobs(), s.ns, s.name);
    if (!fresh.ok()) return r.status();
    const Json& md = (*fresh)["metadata"];
    if (md.value("uid", "") != s.uid || md.value("generation", int64_t{0}) != s.generation ||
        fresh->value("status", Json::object()) != s.old_status)
      return r.status();  // the spec or the status moved: the next pass starts again
    updated = *fresh;
  }
}

StatusOr<bool> Reconciler::Begin(const std::string& ns, const std::string& name, State& s,
                                 ReconcileResult& result) {
  auto got = client_->Get(kube::AdamJobs(), ns, name);
  if (!got.ok()) {
    if (got.status().code() == StatusCode::kNotFound) {  // gone: owned objects too
      MutexLock lock(mu_);
      certificate_warned_.erase(ns + "/" + name);
      certificates_.erase(ns + "/" + name);
      status_writes_.erase(ns + "/" + name);
      return false;
    }
    return got.status();
  }
  s.ns = ns;
  s.name = name;
  s.job = *got;
  s.uid = s.job["metadata"].value("uid", "");
  s.generation = s.job["metadata"].value("generation", int64_t{0});
  s.status = s.job.value("status", Json::object());
  s.old_status = s.status;
  s.now = now_();
  // Another controller's job (spec.runPolicy.managedBy, as Job's managedBy): not touched at all,
  // status included, so that the two never fight over it.
  const Json spec_json = s.job.value("spec", Json::object());
  const Json run_policy =
      spec_json.is_object() ? spec_json.value("runPolicy", Json::object()) : Json::object();
  if (run_policy.is_object() && run_policy.contains("managedBy") &&
      run_policy["managedBy"] != spec::kAdamManager)
    return false;
  if (spec_json.is_object() && spec_json.contains("managedBy") &&
      spec_json["managedBy"] != spec::kAdamManager)
    return false;  // spec.managedBy, Job's and MultiKueue's spelling
  s.pods = children_->Owned(kube::Pods(), ns, name, s.uid);
  if (HasDeletion(s.job)) {
    if (auto parsed = spec::ParseAdamJob(ManifestOf(s.job)); parsed.ok())
      s.spec = std::move(*parsed);
    Status f = Finalize(s);
    if (f.code() == StatusCode::kUnavailable) {
      result.requeue_after = s.requeue_after;
      return false;
    }
    if (!f.ok()) return f;
    return false;
  }
  const Json fins = s.job["metadata"].value("finalizers", Json::array());
  if (std::find(fins.begin(), fins.end(), kFinalizer) == fins.end()) {
    Json updated = s.job;
    updated["metadata"]["finalizers"].push_back(kFinalizer);
    auto r = client_->Update(kube::AdamJobs(), ns, updated);
    if (!r.ok()) return r.status();
    s.job = *r;
  }
  return true;
}

bool Reconciler::CheckSpec(State& s) {
  auto parsed = spec::ParseAdamJob(ManifestOf(s.job));
  if (!parsed.ok()) {
    const std::string msg = parsed.status().message();
    const bool changed = s.status.value("phase", "") != "Failed";
    SetCondition(s, "InvalidSpec", true, "InvalidSpec", msg);
    s.status["phase"] = "Failed";
    if (changed) Event(s, "Warning", "InvalidSpec", msg);
    return false;
  }
  s.spec = std::move(*parsed);
  if (!default_image_.empty() && !s.job.value("spec", Json::object()).contains("image"))
    s.spec->image = default_image_;
  const bool was_invalid = ConditionIs(s.status, "InvalidSpec", "True");
  SetCondition(s, "InvalidSpec", false, "SpecValid", "the spec is valid");
  if (was_invalid && s.status.value("phase", "") == "Failed") {
    // Failed only for its spec, which is valid now: the job starts.
    s.status["phase"] = "Pending";
    Event(s, "Normal", "SpecFixed", "the spec is valid now; starting the job");
  }
  return true;
}

StatusOr<ReconcileResult> Reconciler::AfterFinish(State& s, ReconcileResult result) {
  ADAM_RETURN_IF_ERROR(Cleanup(s, false));
  ADAM_RETURN_IF_ERROR(FinishWorkload(s));
  ADAM_RETURN_IF_ERROR(WriteStatus(s));
  const auto ttl = s.spec->run_policy.ttl_seconds_after_finished;
  if (!ttl) return result;
  auto done = ParseTime(s.status.value("completionTime", ""));
  const auto expires = (done ? *done : s.now) + std::chrono::seconds(*ttl);
  if (expires <= s.now) {
    Event(s, "Normal", "Expired", "ttlSecondsAfterFinished passed; deleting the job");
    Status d = client_->Delete(kube::AdamJobs(), s.ns, s.name);
    if (!d.ok() && d.code() != StatusCode::kNotFound) return d;
    return ReconcileResult{};
  }
  result.requeue_after = std::chrono::duration_cast<std::chrono::milliseconds>(expires - s.now) +
                         std::chrono::milliseconds(10);
  return result;
}

StatusOr<bool> Reconciler::Suspend(State& s) {
  const std::string phase = s.status.value("phase", "");
  if (s.spec->run_policy.suspend) {
    if (phase != "Suspended")
      Event(s, "Normal", "Suspended", "spec.runPolicy.suspend is true; pods deleted");
    ADAM_RETURN_IF_ERROR(Cleanup(s, true));
    if (kueue_ && !Label(s.job, kQueueLabel).empty()) {
      // A suspended job holds no quota: its Workload goes, and a new one queues on resume.
      for (const Json& w : children_->Owned(kube::Workloads(), s.ns, s.name, s.uid)) {
        if (HasDeletion(w)) continue;
        Status d = client_->Delete(kube::Workloads(), s.ns, w["metadata"].value("name", ""));
        if (!d.ok() && d.code() != StatusCode::kNotFound) return d;
      }
    }
    s.status["phase"] = "Suspended";
    SetCondition(s, "Suspended", true, "Suspended", "spec.runPolicy.suspend is true");
    SetCondition(s, "Running", false, "Suspended", "suspended");
    return true;
  }
  if (phase == "Suspended") {
    SetCondition(s, "Suspended", false, "Resumed", "spec.runPolicy.suspend is false");
    Event(s, "Normal", "Resumed", "spec.runPolicy.suspend is false; starting the pods again");
    s.status["startTime"] = FormatTime(s.now);  // the deadline counts from the resume
    s.status["phase"] = "Pending";
  }
  return false;
}

bool Reconciler::CountRoles(State& s) {
  std::map<std::string, int> desired = {
      {"controller",
       s.spec->roles.parameter_server.copies > 1 ? s.spec->roles.controller.replicas : 0},
      {"ps", s.spec->roles.parameter_server.replicas},
      {"data-server", s.spec->roles.data_server.replicas},
      {"trainer", s.spec->roles.trainer.replicas}};
  // The scale subresource's selector (kubectl scale, a HorizontalPodAutoscaler).
  s.status["trainerSelector"] =
      std::string(kJobLabel) + "=" + s.name + "," + kRoleLabel + "=trainer";
  bool all_running = true;
  const std::vector<Json> sets = children_->Owned(kube::StatefulSets(), s.ns, s.name, s.uid);
  const std::vector<Json> pods_now =
      children_->Owned(kube::Pods(), s.ns, s.name, s.uid);  // after this pass's writes
  for (const char* role : kRoles) {
    int active = 0, ready = 0, succeeded = 0, failed = 0;
    if (std::string(role) == "controller") {
      // Controller members are the StatefulSet's pods: its status counts them.
      for (const Json& sts : sets) {
        const Json st = sts.value("status", Json::object());
        active += st.value("replicas", 0);
        ready += st.value("readyReplicas", 0);
      }
    }
    for (const Json& pod : pods_now) {
      // Controller members are counted above, from their StatefulSet's status.
      if (std::string(role) == "controller" || Label(pod, kRoleLabel) != role || HasDeletion(pod))
        continue;
      const std::string p = RolePhase(pod);
      if (p == "Pending" || p == "Running") ++active;
      if (p == "Running" && (PodReady(pod) || std::string(role) == "trainer")) ++ready;
      if (p == "Succeeded") ++succeeded;
      if (p == "Failed") ++failed;
    }
    if (ready + succeeded < desired[role]) all_running = false;
    if (desired[role] == 0 && !s.status["roles"].contains(role)) continue;
    Json& r = s.status["roles"][role];
    r["desired"] = desired[role];
    r["active"] = active;
    r["ready"] = ready;
    r["succeeded"] = succeeded;
    r["failed"] = failed;
    if (!r.contains("restarts")) r["restarts"] = 0;
  }
  return all_running;
}

StatusOr<ReconcileResult> Reconciler::Reconcile(const std::string& ns, const std::string& name) {
  ReconcileResult result;
  State s;
  ADAM_ASSIGN_OR_RETURN(const bool go_on, Begin(ns, name, s, result));
  if (!go_on) return result;
  if (!CheckSpec(s)) {
    ADAM_RETURN_IF_ERROR(WriteStatus(s));
    return result;
  }
  const std::string phase = s.status.value("phase", "");
  if (phase == "Succeeded" || phase == "Failed") return AfterFinish(s, result);
  ADAM_ASSIGN_OR_RETURN(const bool suspended, Suspend(s));
  if (suspended) {
    ADAM_RETURN_IF_ERROR(WriteStatus(s));
    return result;
  }
  ADAM_ASSIGN_OR_RETURN(const bool admitted, Admit(s));
  if (!admitted) {
    ADAM_RETURN_IF_ERROR(WriteStatus(s));
    result.requeue_after = s.requeue_after;  // a look again for what it waits on, if anything
    return result;
  }
  if (!s.status.contains("startTime")) s.status["startTime"] = FormatTime(s.now);
  if (!s.status.contains("phase")) s.status["phase"] = "Pending";
  if (const auto deadline = s.spec->run_policy.active_deadline_seconds) {
    auto start = ParseTime(s.status["startTime"].get<std::string>());
    const auto end = (start ? *start : s.now) + std::chrono::seconds(*deadline);
    if (end <= s.now) {
      Finish(s, false, "DeadlineExceeded",
             "the job ran longer than spec.runPolicy.activeDeadlineSeconds (" +
                 std::to_string(*deadline) + " s)");
      return AfterFinish(s, result);
    }
    result.requeue_after = std::chrono::duration_cast<std::chrono::milliseconds>(end - s.now) +
                           std::chrono::milliseconds(10);
  }
  if (StartupTooLong(s, result)) return AfterFinish(s, result);
  ADAM_RETURN_IF_ERROR(HandlePods(s));
  if (s.finished) return AfterFinish(s, result);
  ADAM_RETURN_IF_ERROR(ReplaceLostPods(s));
  ADAM_RETURN_IF_ERROR(EnsureCertificates(s));  // first: every pod mounts the TLS Secret
  ADAM_RETURN_IF_ERROR(EnsureObjects(s));
  if (!s.backing_off.empty()) {  // the first role waiting, by name
    const auto& [role, when] = *s.backing_off.begin();
    SetCondition(s, "Restarting", true, "BackOff",
                 "role " + role + " keeps failing; its pods are made again at " + when);
  }
  ReportStartFailures(s);
  // A look again for what EnsureObjects waits on.
  if (s.requeue_after) LookAgainWithin(result.requeue_after, *s.requeue_after);
  if (s.renew_at) {
    const auto in = std::chrono::duration_cast<std::chrono::milliseconds>(*s.renew_at - s.now) +
                    std::chrono::milliseconds(10);
    LookAgainWithin(result.requeue_after, in);
  }
  const bool all_running = CountRoles(s);
  if (s.workload && !PodsReadyIs(*s.workload, all_running)) {
    // Kueue's waitForPodsReady counts from the admission to this.
    auto u = client_->UpdateStatus(kube::Workloads(), s.ns,
                                   WithPodsReady(*s.workload, all_running, FormatTime(s.now)));
    if (!u.ok()) return u.status();
  }
  ReadTrainerMetrics(s);
  ReportScheduling(s);
  // Refresh epoch, accuracy and throughput.
  if (metrics_) LookAgainWithin(result.requeue_after, status_period_);
  if (all_running) {
    if (s.status["phase"] != "Running") Event(s, "Normal", "Running", "every pod of the job runs");
    s.status["phase"] = "Running";
    SetCondition(s, "Running", true, "PodsRunning", "every pod of the job runs");
    SetCondition(s, "Restarting", false, "PodsRunning", "every pod of the job runs");
  }
  ADAM_RETURN_IF_ERROR(WriteStatus(s));
  return result;
}

}  // namespace adam::op
