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
#include <string>
#include <vector>

#include "reconcile/render.h"

namespace adam::op {

// The Workload's name for a job: "adamjob-<name>-<first 5 characters of its uid>", as Kueue names
// the Workloads of its own integrations after their owner.
std::string WorkloadName(const std::string& job_name, const std::string& job_uid);

// The Workload of a job submitted to LocalQueue `queue`, from its rendered objects: one pod set
// per role that has pods (controller, ps, data-server, trainer), each with its count and the
// template of its first pod, which carries the requests Kueue counts against the quota. Owned by
// the job (deleting the job deletes it, and Kueue frees its quota).
Json WorkloadFor(const spec::AdamJob& job, const std::vector<Json>& rendered,
                 const std::string& queue, const std::string& job_uid, int64_t generation);

// True when `workload` asks for the pod sets of `desired` (names and counts): a scaled job's
// Workload no longer does, and is made again.
bool SamePodSets(const Json& workload, const Json& desired);

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
  bool admitted = false;        // condition Admitted True
  bool quota_reserved = false;  // status.admission is set
  bool evicted = false;         // condition Evicted True
  bool finished = false;        // condition Finished True
  std::string cluster_queue;    // status.admission.clusterQueue
  std::string evicted_reason;   // the Evicted condition's reason and message
  std::string evicted_message;
  std::string pending_message;  // QuotaReserved's message while not admitted ("" = none yet)
  // Pod set name -> the ResourceFlavors assigned to its resources (each once).
  std::map<std::string, std::vector<std::string>> flavors;
  // Pod set name -> the podSetUpdates of the admission checks, in the Workload's order.
  std::map<std::string, std::vector<PodSetUpdate>> updates;
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

}  // namespace adam::op
