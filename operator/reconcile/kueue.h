// An AdamJob as a Kueue Workload: what the operator writes so that a Kueue queue admits a job
// whole or not at all, and what it reads back.
//
// Kueue (kueue.x-k8s.io) admits Workloads against the quota of a ClusterQueue. For a kind it does
// not build in, its `integrations.externalFrameworks` names the kind ("AdamJob.v1alpha1.adam.dev")
// and the kind's own controller does what Kueue's job framework does for a batch Job: it makes one
// Workload per job (a pod set per role, with the pods' requests), creates no pod until Kueue
// admits the Workload, places the pods on the node labels of the admitted ResourceFlavors, deletes
// the pods and gives the quota back when Kueue evicts it, and marks it Finished when the job ends.
// These are the pure parts of that; the reconciler does the writes. Thread-compatible.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "reconcile/render.h"

namespace adam::op {

// The Workload's name for a job: "adamjob-<name>-<first 5 characters of its uid>", as Kueue names
// the Workloads of its own integrations after their owner.
std::string WorkloadName(const std::string& job_name, const std::string& job_uid);

// Kueue's topology-aware scheduling (TAS): a role asks for it with Kueue's own pod-template
// annotations (in spec.podTemplate or roles.<role>.podTemplate), as a batch Job does, and its
// pod set then carries the matching topologyRequest.
inline constexpr const char* kTasRequiredAnnotation = "kueue.x-k8s.io/podset-required-topology";
inline constexpr const char* kTasPreferredAnnotation = "kueue.x-k8s.io/podset-preferred-topology";
inline constexpr const char* kTasUnconstrainedAnnotation =
    "kueue.x-k8s.io/podset-unconstrained-topology";
inline constexpr const char* kTasSliceTopologyAnnotation =
    "kueue.x-k8s.io/podset-slice-required-topology";
inline constexpr const char* kTasSliceSizeAnnotation = "kueue.x-k8s.io/podset-slice-size";
// What a pod placed by topology carries: the gate Kueue's topology ungater lifts once it has
// written the assigned domain's node labels into the pod's nodeSelector, the Workload it belongs
// to (annotation) and its pod set (label), by which the ungater finds it.
inline constexpr const char* kTopologyGate = "kueue.x-k8s.io/topology";
inline constexpr const char* kWorkloadAnnotation = "kueue.x-k8s.io/workload";
inline constexpr const char* kPodSetLabel = "kueue.x-k8s.io/podset";

// Kueue's elastic Workload slices (its ElasticJobsViaWorkloadSlices feature): a job annotated
// kElasticJobAnnotation "true" (Kueue's own key for a batch Job) changes its pod counts without
// giving its quota back. A scale-down lowers the counts of the admitted Workload in place; a
// scale-up makes a new Workload, a slice naming the admitted one in kSliceReplacementAnnotation,
// which Kueue admits counting the old slice's quota as its own and then marks the old one
// Finished (WorkloadSliceReplaced); the job runs at the old counts until then.
inline constexpr const char* kElasticJobAnnotation = "kueue.x-k8s.io/elastic-job";
inline constexpr const char* kSliceReplacementAnnotation =
    "kueue.x-k8s.io/workload-slice-replacement-for";
inline constexpr const char* kSliceNameAnnotation = "kueue.x-k8s.io/workload-slice-name";
// Kueue's reason for a slice it finished as it admitted the one replacing it. It finishes the old
// slice first and writes the new one's admission after: for a moment neither holds the job.
inline constexpr const char* kSliceReplacedReason = "WorkloadSliceReplaced";

// The Workload of a job submitted to LocalQueue `queue`, from its rendered objects: one pod set
// per role that has pods (controller, ps, data-server, trainer), each with its count and the
// template of its first pod, which carries the requests Kueue counts against the quota, and a
// topologyRequest where that template has Kueue's TAS annotations (required, else preferred,
// else unconstrained; a slice layer from the slice annotations). Owned by the job (deleting the
// job deletes it, and Kueue frees its quota).
Json WorkloadFor(const spec::AdamJob& job, const std::vector<Json>& rendered,
                 const std::string& queue, const std::string& job_uid, int64_t generation);

// True when `workload` asks for the pod sets of `desired` (names and counts): a scaled job's
// Workload no longer does, and is made again.
bool SamePodSets(const Json& workload, const Json& desired);

// A Workload's pod-set counts: pod set name -> count.
std::map<std::string, int> PodSetCounts(const Json& workload);

// How a job's desired pod sets differ from those of its Workload `workload`.
enum class Resize {
  kSame,      // the same names and counts
  kDown,      // the same names, no count higher and one lower
  kUp,        // the same names, a count higher
  kReshaped,  // other pod-set names (a role appeared or went)
};
Resize CompareCounts(const Json& workload, const Json& desired);

// `workload` with the pod-set counts of `desired`: a Workload without quota reserved may change
// them, and with ElasticJobsViaWorkloadSlices an admitted one may lower them.
Json WithCounts(const Json& workload, const Json& desired);

// The slice that replaces the admitted elastic Workload `old` for the job's `desired` one:
// named after the job's first Workload and `generation` ("...-g7"), annotated with the slice it
// replaces ("NAMESPACE/NAME") and with the chain's name (the first Workload's), as Kueue's job
// framework makes its slices.
Json SliceReplacing(const Json& old, const Json& desired, int64_t generation);

// The Workload's adam.dev/generation annotation: the job's generation when it was made.
int64_t WorkloadGeneration(const Json& workload);

// What a Ready admission check asks of one pod set's pods (an entry of the Workload's
// status.admissionChecks[].podSetUpdates): labels and annotations added to the pods, node labels
// added to their nodeSelector, tolerations added to theirs. A ProvisioningRequest check, say,
// binds the pods to the capacity it provisioned this way.
struct PodSetUpdate {
  std::string check;  // the admission check's name
  Json labels = Json::object();
  Json annotations = Json::object();
  Json node_selector = Json::object();
  Json tolerations = Json::array();
};

// What a Workload's status says.
struct WorkloadState {
  std::string name;             // metadata.name
  std::string slice_name;       // its slice chain's name (kSliceNameAnnotation, else its own)
  bool elastic = false;         // kElasticJobAnnotation "true"
  bool admitted = false;        // condition Admitted True
  bool quota_reserved = false;  // status.admission is set
  bool evicted = false;         // condition Evicted True
  bool finished = false;        // condition Finished True
  std::string finished_reason;  // and its reason and lastTransitionTime
  std::string finished_at;
  std::string cluster_queue;   // status.admission.clusterQueue
  std::string evicted_reason;  // the Evicted condition's reason and message
  std::string evicted_message;
  std::string pending_message;  // QuotaReserved's message while not admitted ("" = none yet)
  // Pod set name -> the ResourceFlavors assigned to its resources (each once).
  std::map<std::string, std::vector<std::string>> flavors;
  // Pod set name -> the podSetUpdates of the admission checks, in the Workload's order.
  std::map<std::string, std::vector<PodSetUpdate>> updates;
  // The pod sets Kueue admitted by topology (their assignment has a topologyAssignment).
  std::set<std::string> topology;
};
WorkloadState ReadWorkload(const Json& workload);

// The Workload with its quota reservation given back after an eviction (the job's pods are
// gone): status.admission cleared, QuotaReserved and Admitted False, Requeued True for a
// preemption or a node failure (Kueue then queues it again at once), as Kueue's job framework
// does.
Json WithReservationCleared(const Json& workload, const std::string& now);

// The Workload marked Finished (reason Succeeded or Failed), which frees its quota.
Json WithFinished(const Json& workload, bool succeeded, const std::string& message,
                  const std::string& now);
// The same with another reason (OutOfSync: a slice replaced by a newer one).
Json WithFinishedBecause(const Json& workload, const std::string& reason,
                         const std::string& message, const std::string& now);

// Whether the Workload's PodsReady condition says `ready`.
bool PodsReadyIs(const Json& workload, bool ready);

// The Workload with its PodsReady condition set as Kueue's job framework sets it, which Kueue's
// waitForPodsReady waits for (without it an admitted job is evicted at its timeout, again and
// again): True (reason PodsReady) once every pod of the job is ready or done; else False,
// WaitForStart until it first was, WaitForRecovery after.
Json WithPodsReady(const Json& workload, bool ready, const std::string& now);

// Where a ResourceFlavor puts pods: its spec.nodeLabels and spec.tolerations.
struct FlavorPlacement {
  Json node_labels = Json::object();
  Json tolerations = Json::array();
};

// Adds the node labels (to nodeSelector) and tolerations of each pod set's flavors to the pods
// and StatefulSet templates of that role in `objects`. `flavors`: ResourceFlavor name -> its
// placement. An error names a flavor whose node label contradicts the pod's own nodeSelector.
Status ApplyFlavors(const WorkloadState& admission,
                    const std::map<std::string, FlavorPlacement>& flavors,
                    std::vector<Json>* objects);

// Applies the admission checks' podSetUpdates of each pod set to the pods and StatefulSet
// templates of that role in `objects`, as Kueue's own integrations do when they start a job.
// A value that contradicts one the pods already have (their own labels, a flavor's node label,
// another check's) is refused: the error names the check, the field and both values.
Status ApplyPodSetUpdates(const WorkloadState& admission, std::vector<Json>* objects);

// Readies the pods (and StatefulSet templates) of each role Kueue admitted by topology for its
// topology ungater, as Kueue's job framework does for its own kinds: the scheduling gate
// kTopologyGate, the label kPodSetLabel (the role), the annotation kWorkloadAnnotation (the
// Workload's name) and, where the role asked for no topology (a ClusterQueue of TAS flavors
// only places every pod set), the unconstrained annotation. The ungater then lifts each pod's
// gate with the node labels of the domain it assigned it, and the scheduler places it there.
void ApplyTopology(const WorkloadState& admission, std::vector<Json>* objects);

}  // namespace adam::op
