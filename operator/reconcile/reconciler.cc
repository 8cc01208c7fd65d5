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
#include "reconcile/figures.h"
#include "reconcile/kueue.h"
#include "reconcile/render.h"
#include "reconcile/start_failures.h"
#include "reconcile/state.h"
#include "reconcile/status.h"
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

Reconciler::Reconciler(kube::Client* client, const Children* children, Clock* clock,
                       kube::MetricsCache* metrics, std::chrono::milliseconds status_period)
    : client_(client),
      children_(children),
      clock_(clock),
      metrics_(metrics),
      status_period_(status_period) {}

// The trainers' figures (reconcile/figures.h) into the status; the job's CpuPinned condition names
// the trainers that run unpinned. Samples come from the cache, never from a wait on a pod.
void Reconciler::ReadTrainerMetrics(State& s) {
  if (!metrics_) return;
  const TrainerFigures f = ReadTrainerFigures(s.pods, [&](const Json& pod) {
    const std::string ip = pod.value("status", Json::object()).value("podIP", "");
    if (ip.empty()) return std::vector<kube::MetricsCache::Sample>{};
    return metrics_->Latest(pod["metadata"].value("uid", ""), ip, kMetricsPort);
  });
  if (f.epoch) s.status["epoch"] = *f.epoch;
  if (f.test_accuracy) s.status["testAccuracy"] = *f.test_accuracy;
  if (f.images_per_second) s.status["imagesPerSecond"] = *f.images_per_second;
  if (!f.unpinned.empty()) {
    std::string names;
    for (const auto& n : f.unpinned) names += (names.empty() ? "" : ", ") + n;
    SetCondition(
        s, "CpuPinned", false, "CpuSetShared",
        "trainers " + names +
            " run unpinned: their allowed CPUs are not their own (no "
            "static CPU manager on the node, or a fractional CPU limit), so pinning would pile "
            "threads of different pods onto the same cores",
        /*report_false=*/true);
  } else if (f.pinned > 0) {
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
    if (PodRoleOf(pod) != PodRole::kParamServer) continue;
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
  const std::string key = s.ns + "/" + s.name;
  std::optional<std::chrono::milliseconds> since_last_write;
  {
    MutexLock lock(mu_);
    auto last = status_writes_.find(key);
    if (last != status_writes_.end())
      since_last_write =
          std::chrono::duration_cast<std::chrono::milliseconds>(s.now - last->second.at);
  }
  if (DecideStatusWrite(s.status, s.old_status, since_last_write, status_period_) !=
      StatusWriteDecision::kWrite)
    return OkStatus();
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
      gang_min_counts_.erase(ns + "/" + name);
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
  s.now = clock_->WallNow();
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
  s.status["trainerSelector"] = TrainerSelector(s.name);
  const std::map<PodRole, RoleCount> counts =
      CountPods(*s.spec, children_->Owned(kube::Pods(), s.ns, s.name, s.uid),  // after the writes
                children_->Owned(kube::StatefulSets(), s.ns, s.name, s.uid));
  PutRoleCounts(counts, &s.status);
  return AllRunning(counts);
}

bool Reconciler::RanTooLong(State& s, ReconcileResult& result) {
  const auto deadline = s.spec->run_policy.active_deadline_seconds;
  if (!deadline) return false;
  auto start = ParseTime(s.status["startTime"].get<std::string>());
  const auto end = (start ? *start : s.now) + std::chrono::seconds(*deadline);
  if (end <= s.now) {
    Finish(s, false, "DeadlineExceeded",
           "the job ran longer than spec.runPolicy.activeDeadlineSeconds (" +
               std::to_string(*deadline) + " s)");
    return true;
  }
  result.requeue_after = std::chrono::duration_cast<std::chrono::milliseconds>(end - s.now) +
                         std::chrono::milliseconds(10);
  return false;
}

Status Reconciler::ReportProgress(State& s, ReconcileResult& result) {
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
  return OkStatus();
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
  if (RanTooLong(s, result) || StartupTooLong(s, result)) return AfterFinish(s, result);
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
  ADAM_RETURN_IF_ERROR(ReportProgress(s, result));
  ADAM_RETURN_IF_ERROR(WriteStatus(s));
  return result;
}

}  // namespace adam::op
