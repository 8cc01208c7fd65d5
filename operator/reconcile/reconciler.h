// The AdamJob reconciler: level-based, idempotent, one job per call.
//
// Reconcile(namespace, name) reads the job and what it owns, compares them with the rendered
// plan (render.h) and acts: makes the job's CA and certificate Secrets and renews the
// certificate before it expires, creates missing objects stage by stage (a stage starts once every
// pod of the previous one is ready), deletes what the plan no longer has, restarts failed pods
// under the run policy, finishes, suspends, resumes, times out and cleans up, waits for Kueue's
// admission where the job is queued (reconcile/kueue.h), and writes the status subresource (phase,
// conditions with observedGeneration, per-role counts) and Events.
//
// Run policy: a pod that exits 0 has finished (a job succeeds when every trainer has); exit code
// 2 means invalid input (a manifest or file the role refused), which no restart can fix, so the
// job fails at once; any other failure (a crash, a signal, OOM) deletes the pod to be recreated
// and counts one restart, written to the status before the pod goes; more than
// spec.runPolicy.backoffLimit fails the job. A pod the cluster took away (its DisruptionTarget
// condition: eviction, preemption, node loss) is replaced without counting.
//
// Children are read from `Children` (the informers' caches); writes go through the Client.
// Thread-safe for different jobs at once; one job must not be reconciled twice at once (the
// work queue guarantees it).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "kube/client.h"
#include "kube/scrape.h"
#include "net/tls.h"

namespace adam::op {

using Json = kube::Json;

struct WorkloadState;  // reconcile/kueue.h
struct ObjectChange;   // reconcile/diff.h

// What a job owns, as the caches see it.
class Children {
 public:
  virtual ~Children() = default;
  // Objects of `resource` in `ns` labelled adam.dev/job=`job` whose controller ownerReference is
  // the job with `uid`; an object with no controller (a parameter server's checkpoint claim,
  // which outlives its job) is matched by the label alone. A dying predecessor's objects of the
  // same name are not the job's.
  virtual std::vector<Json> Owned(const kube::Resource& resource, const std::string& ns,
                                  const std::string& job, const std::string& uid) const = 0;
};

// How long a job's certificate, once read and found valid, is taken as it was.
inline constexpr std::chrono::minutes kSecretRecheck{10};
// How long an elastic job runs on a Workload slice Kueue finished in favour of a new one before
// it counts the new one as not admitted (and stops): Kueue writes the new one's admission just
// after it finished the old one.
inline constexpr std::chrono::seconds kSliceHandover{30};

// The phases and condition types of status.
inline constexpr const char* kFinalizer = "adam.dev/flush";

struct ReconcileResult {
  std::optional<std::chrono::milliseconds> requeue_after;  // look again then (timers, stages)
};

class Reconciler {
 public:
  // `metrics` (may be null) holds the trainers' /metrics for status.epoch, testAccuracy,
  // imagesPerSecond and the CpuPinned condition; while a job runs it is then looked at again
  // every `status_period`.
  // `clock` (not owned) is where a pass reads the time: its timers, back-offs and the times
  // status and Events carry (WallNow).
  Reconciler(kube::Client* client, const Children* children, Clock* clock = Clock::Real(),
             kube::MetricsCache* metrics = nullptr,
             std::chrono::milliseconds status_period = std::chrono::milliseconds(10000));

  // ABORTED on a write conflict (the caller requeues with backoff); other errors likewise.
  StatusOr<ReconcileResult> Reconcile(const std::string& ns, const std::string& name);

  // The lifetime of the job certificates this reconciler issues (net::kCertificateValidity by
  // default); one is renewed when less than a third of it is left.
  void set_certificate_validity(std::chrono::seconds v) { certificate_validity_ = v; }

  // Kueue (reconcile/kueue.h): a job labelled kueue.x-k8s.io/queue-name is submitted to that
  // LocalQueue as a Workload and runs no pod until Kueue admits it. Off: the label is ignored.
  void set_kueue(bool on) { kueue_ = on; }

  // The image of a job whose spec names none ("" = spec::AdamJob's default). Where the chart
  // installed the CRD, the API server has already written the chart's image into the spec.
  void set_default_image(std::string image) { default_image_ = std::move(image); }
  // Who writes the Events (their reportingInstance): the operator's identity.
  void set_reporting_instance(std::string id) { reporting_instance_ = std::move(id); }

  // Back-off between re-creations of a role's pods after they fail: the first failure is
  // replaced at once, each further one within 2 * `max` of the last waits `initial`, doubling up
  // to `max`. Pods the cluster took (DisruptionTarget) or that were deleted are replaced at once.
  // A trainer or data server on a node whose kubelet stopped answering (Ready Unknown) for
  // `timeout` is force-deleted, and so made again elsewhere; 0 = never (Kubernetes' own paths
  // only: the node deleted, or tainted node.kubernetes.io/out-of-service).
  void set_node_loss_timeout(std::chrono::milliseconds timeout) { node_loss_timeout_ = timeout; }

  void set_restart_backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max) {
    backoff_initial_ = initial;
    backoff_max_ = max;
  }

  // Called with the kind of each object put back after another client changed it (metrics).
  void set_on_repair(std::function<void(const std::string& kind)> f) { on_repair_ = std::move(f); }

  // True for the watch event of this reconciler's own status write (the job as it wrote it, and
  // not changed since): nothing in it calls for another pass.
  bool OwnWrite(const kube::WatchEvent& ev);

 private:
  struct State;
  // The phases of Reconcile. Begin reads the job and handles its deletion and finalizer; false:
  // nothing more to do this pass.
  StatusOr<bool> Begin(const std::string& ns, const std::string& name, State& s,
                       ReconcileResult& result);
  // Parses the manifest into s.spec and keeps the InvalidSpec condition; false when invalid.
  bool CheckSpec(State& s);
  // Suspension and resumption (spec.runPolicy.suspend); true when the job is suspended.
  StatusOr<bool> Suspend(State& s);
  // A queued job's admission by Kueue: its Workload made, kept in step and given back after an
  // eviction; true when the pods may run (s.admission then says on which flavors).
  StatusOr<bool> Admit(State& s);
  // Admit's parts (admission.cc). An elastic job's Workloads (kueue.h: Workload slices): its
  // counts changed in place where Kueue allows, a larger slice asked for (Grow) and, once Kueue
  // admitted it, the replaced ones finished (Resized).
  StatusOr<bool> AdmitElastic(State& s, const Json& desired, const std::string& queue);
  StatusOr<bool> Grow(State& s, const Json& admitted, const Json& desired, const WorkloadState& st);
  StatusOr<bool> Resized(State& s, const std::vector<Json>& active, const WorkloadState& st);
  // The Workload the not yet admitted `slice` replaces, where Kueue finished it for that within
  // kSliceHandover (it admits the slice just after); none otherwise.
  std::optional<Json> JustReplaced(State& s, const Json& slice);
  // The job run at the pod counts of its admitted Workload `workload` where they are not its
  // spec's (s.spec and s.held_job changed, s.rendered dropped).
  void HoldAt(State& s, const Json& workload);
  // The job's first Workload submitted (after any pods left from an admission taken back).
  StatusOr<bool> Submit(State& s, const Json& desired, const std::string& queue);
  // Creates the Workload `made` with the job's WorkloadPriorityClass, with the event `reason`
  // and `note` once made; "" when made (or there already), else why not (the class is missing:
  // nothing is submitted until it exists).
  StatusOr<std::string> SubmitWorkload(State& s, Json made, const std::string& reason,
                                       const std::string& note);
  // Kueue evicted `wl`: the pods deleted, then its quota given back; the job queued.
  StatusOr<bool> StopEvicted(State& s, const Json& wl, const WorkloadState& st);
  // The pods and `workloads` deleted, `why` said: the job queued again whole.
  StatusOr<bool> Requeue(State& s, const std::vector<Json>& workloads, bool admitted,
                         const std::string& why);
  // Not admitted (yet, or any more): no pods; the job queued with Kueue's message.
  StatusOr<bool> Waiting(State& s, const WorkloadState& st);
  // Admitted: the job may run on `wl`'s admission; `note` added to the Admitted condition.
  bool RunAdmitted(State& s, Json wl, const WorkloadState& st, const std::string& note = "");
  // Waiting for admission: no pods, phase Queued, condition Admitted False with `message`.
  bool Queued(State& s, const std::string& message);
  // The finished job's Workload marked Finished, which frees its quota.
  Status FinishWorkload(State& s);
  // The job's objects, rendered once per pass.
  const std::vector<Json>& Rendered(State& s);
  // A finished job: its pods cleaned up, its status written, deleted once its TTL passed.
  StatusOr<ReconcileResult> AfterFinish(State& s, ReconcileResult result);
  // Per-role counts in the status; true when every role has its desired pods ready.
  bool CountRoles(State& s);
  Status Finalize(State& s);
  Status EnsureCertificates(State& s);
  // EnsureCertificates' parts: the job's first certificate (with its CA, unless `ca` holds
  // one), and a renewal of the certificate in `tls`, due, from the CA in `ca`; `valid` is set
  // when the job then holds a certificate not yet due for renewal.
  Status IssueCertificate(State& s, const std::optional<Json>& ca,
                          const std::vector<std::string>& hosts, bool* valid);
  Status RenewCertificate(State& s, const Json& tls, const std::optional<Json>& ca,
                          const std::vector<std::string>& hosts, bool* valid);
  // The job's Secret `name`, read by name; none when missing or not the job's (a predecessor's).
  StatusOr<std::optional<Json>> OwnSecret(State& s, const std::string& name);
  // A renewal that cannot be made: a warning (at most hourly per job and fault), not a failed
  // reconcile; the next try in an hour.
  Status NotRenewable(State& s, const std::string& expiry, const std::string& why);
  Status EnsureObjects(State& s);
  // The coscheduling PodGroup of a gang-scheduled job, made before any pod; false (with a
  // condition and an event) while the API server has no PodGroups.
  StatusOr<bool> EnsurePodGroup(State& s, std::vector<Json>* desired, bool creating);
  // Kubernetes' own gang (scheduling.k8s.io PodGroup `group`), made with the job's first pods;
  // false (condition and event) while the API server does not serve it. Pods made once the job
  // has fewer pods than its minCount are made outside the gang (`desired` changed). `creating`:
  // this pass makes a pod or StatefulSet (the group is then read, not taken from the cache).
  StatusOr<bool> EnsureGang(State& s, const Json& group, std::vector<Json>* desired, bool creating);
  // A gang whose PodGroup API the server lacks: condition Created False and an event, reason
  // NoPodGroupAPI, with `msg`; a look again in 30 s. False.
  bool NoPodGroupApi(State& s, const std::string& msg);
  // A queued job's pods placed where Kueue admitted them (kueue.h: ApplyFlavors,
  // ApplyPodSetUpdates); false (with a condition and an event) when that contradicts the pods.
  StatusOr<bool> PlaceAdmitted(State& s, std::vector<Json>* desired);
  // EnsureObjects' parts: the job's objects that exist ("Kind/name"); one change of the diff
  // (diff.h) applied, false while its object is not ready (a pod or StatefulSet made or not yet
  // up, one going, one whose make waits or was refused); the pods the plan no longer has deleted.
  std::map<std::string, Json> ExistingObjects(State& s);
  StatusOr<bool> ApplyChange(State& s, const ObjectChange& c);
  StatusOr<bool> MakeObject(State& s, const Json& o);
  Status DeleteUnplanned(State& s, const std::vector<std::string>& pods);
  // An existing object `cur` brought back to what the operator owns of `o` (drift.h) by
  // server-side apply, or written whole where the API server refuses that apply: after another
  // client changed it (a Repaired event), or after the spec changed. A write still refused is a
  // RepairFailed warning, not the pass's failure.
  void Repair(State& s, const kube::Resource& r, const Json& o, const Json& cur);
  Status HandlePods(State& s);
  // HandlePods' parts: a counted restart of `pod` (failed as `what` says; `role_key` its role in
  // status.roles), true when it exceeds the run policy's backoffLimit (the job then failed); and
  // the failed pods (name, uid) deleted once the counts are written.
  bool CountRestart(State& s, const std::string& role_key, const Json& pod,
                    const std::string& what);
  Status DeleteFailed(State& s, const std::vector<std::pair<std::string, std::string>>& replace);
  // Fails a job still starting past spec.runPolicy.startupDeadlineSeconds; true when it did.
  bool StartupTooLong(State& s, ReconcileResult& result);
  // Fails a job running past spec.runPolicy.activeDeadlineSeconds (true), or asks for a look
  // again at that deadline.
  bool RanTooLong(State& s, ReconcileResult& result);
  // A running pass's reports: per-role counts, Kueue's PodsReady, the trainers' figures,
  // scheduling, and the Running phase and conditions once every pod runs.
  Status ReportProgress(State& s, ReconcileResult& result);
  bool Counted(const std::string& uid);
  // Force-deletes the trainers and data servers of a node lost for node_loss_timeout_.
  Status ReplaceLostPods(State& s);
  // HandlePods' part: the roles whose pods just failed (their status keys) enter or go on in
  // their back-off; and the time a role's pod may be made again, while it is in the future.
  void BackOff(State& s, const std::set<std::string>& roles);
  std::optional<std::chrono::milliseconds> BackoffLeft(State& s, const Json& pod);
  void WithTheirReplicas(State& s, const std::set<std::string>& failed_replicas,
                         std::vector<std::pair<std::string, std::string>>* replace);
  Status Cleanup(State& s, bool all);
  Status DeletePods(State& s, const std::string& role);
  Status WriteStatus(State& s);
  // An events.k8s.io/v1 Event on the job. The same event again (type, reason and note) within
  // kEventSeriesWindow of its last is not a new object: the one made is updated into a series
  // (series.count, series.lastObservedTime), as Kubernetes' own event recorder does.
  void Event(State& s, const std::string& type, const std::string& reason,
             const std::string& message);
  // Sets (or adds) a condition; a false one that was never set is added only with report_false.
  void SetCondition(State& s, const std::string& type, bool status, const std::string& reason,
                    const std::string& message, bool report_false = false);
  void Finish(State& s, bool succeeded, const std::string& reason, const std::string& message);
  void ReadTrainerMetrics(State& s);
  void ReportScheduling(State& s);
  void ReportStartFailures(State& s);
  void ReadFinalFigures(State& s, const Json& pod);

  kube::Client* client_;
  const Children* children_;
  Clock* const clock_;
  kube::MetricsCache* metrics_;
  std::chrono::milliseconds status_period_;
  std::chrono::seconds certificate_validity_ = net::kCertificateValidity;
  bool kueue_ = false;
  std::string default_image_;
  std::string reporting_instance_ = "adam-operator";
  std::chrono::milliseconds node_loss_timeout_{120000};
  std::chrono::milliseconds backoff_initial_{10000};
  std::chrono::milliseconds backoff_max_{300000};
  std::function<void(const std::string&)> on_repair_;
  Mutex mu_;  // the bookkeeping below, shared by the workers
  // Pod uids whose failure counted as a restart.
  std::set<std::string> counted_failures_ ABSL_GUARDED_BY(mu_);
  // "ns/job" -> when its last CertificateNotRenewable warning went out, and the fault it named.
  std::map<std::string, std::pair<std::chrono::system_clock::time_point, std::string>>
      certificate_warned_ ABSL_GUARDED_BY(mu_);
  // "ns/job" -> its last status write: when, and the resourceVersion it made (OwnWrite).
  struct StatusWrite {
    std::chrono::system_clock::time_point at;
    std::string resource_version;
  };
  std::map<std::string, StatusWrite> status_writes_ ABSL_GUARDED_BY(mu_);
  // "ns/job" -> its certificate as last read: valid until renew_at, read again at check_at.
  struct KnownCertificate {
    std::string uid;
    std::chrono::system_clock::time_point renew_at, check_at;
  };
  std::map<std::string, KnownCertificate> certificates_ ABSL_GUARDED_BY(mu_);
  // "ns/job" -> (uid, its gang PodGroup's minCount), PodGroups being immutable.
  std::map<std::string, std::pair<std::string, int64_t>> gang_min_counts_ ABSL_GUARDED_BY(mu_);
  // "ns/uid/type/reason/note" -> the Event last written for it and when it last happened.
  struct RecentEvent {
    Json event;
    std::chrono::system_clock::time_point last;
  };
  std::map<std::string, RecentEvent> recent_events_ ABSL_GUARDED_BY(mu_);
  int64_t last_event_nanos_ ABSL_GUARDED_BY(mu_) = 0;  // the last Event name's time
};

// How long after an event its repeat joins it as a series (Kubernetes' recorder: 6 minutes),
// and the longest note an Event takes (the API refuses more than 1 KiB).
inline constexpr std::chrono::minutes kEventSeriesWindow{6};
inline constexpr size_t kEventNoteMax = 1024;

// The manifest the roles read, from an AdamJob object: apiVersion, kind, name, namespace, spec.
std::string ManifestOf(const Json& job);

}  // namespace adam::op
