// Rendering an AdamJob's plan to the Kubernetes objects that run it.
//
// The operator and `adam render` share this: one pure function from a validated job to the
// objects (as JSON, the API's own form) that the reconciler creates, each labelled with the job
// and role and annotated with its start stage: controllers (stage 0), then parameter servers,
// then data servers and trainers. Placement is decided here: Guaranteed QoS for NUMA pinning,
// required anti-affinity between copies, topology spread, the Multus network annotation and the
// downward-API files a process reads its second interface from. Thread-compatible.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "spec/adamjob.h"

namespace adam::op {

using Json = nlohmann::ordered_json;

// Fixed ports inside every pod.
inline constexpr int kGrpcPort = 7070;
inline constexpr int kReplicationPort = 7071;
inline constexpr int kMetricsPort = 9090;

// Label and annotation keys the operator writes and selects on.
inline constexpr const char* kJobLabel = "adam.dev/job";
inline constexpr const char* kRoleLabel = "adam.dev/role";
// The role label of a split trainer's other processes (the others: spec::RoleSubcommand).
inline constexpr const char* kModelWorkerRole = "model-worker";
inline constexpr const char* kIndexLabel = "adam.dev/index";
inline constexpr const char* kStageAnnotation = "adam.dev/stage";
inline constexpr const char* kGenerationAnnotation = "adam.dev/generation";
inline constexpr const char* kMultusAnnotation = "k8s.v1.cni.cncf.io/networks";
inline constexpr const char* kNetworkStatusAnnotation = "k8s.v1.cni.cncf.io/network-status";
// The scheduler-plugins coscheduling plugin's gang label (spec.runPolicy.schedulingPolicy).
inline constexpr const char* kPodGroupLabel = "scheduling.x-k8s.io/pod-group";
// The API of Kubernetes' own gang scheduling (spec.runPolicy.schedulingPolicy.gang).
inline constexpr const char* kGangApiVersion = "scheduling.k8s.io/v1alpha2";
// Kueue's: the LocalQueue a job is submitted to (on the AdamJob), and the Workload's job uid.
inline constexpr const char* kQueueLabel = "kueue.x-k8s.io/queue-name";
// Kueue's label naming a job's WorkloadPriorityClass (its order in the queue, and preemption).
inline constexpr const char* kPriorityClassLabel = "kueue.x-k8s.io/priority-class";
inline constexpr const char* kKueueJobUidLabel = "kueue.x-k8s.io/job-uid";

// Where every pod finds its files (spec/adamjob.h: a manifest's volumes keep clear of them).
using spec::kJobMountPath;
using spec::kPodInfoPath;
using spec::kStatePath;
using spec::kTlsPath;

// Where trainer 0 writes the model in its pod with spec.output.volume (mounted at its mountPath):
// `<mountPath>/<job name>.onnx`.
std::string ModelPath(const spec::AdamJob& job);

// The job's certificates Secret: the CA's certificate and each role's certificate and key
// (ca.crt, ROLE.crt, ROLE.key); created by the reconciler, not rendered (it holds generated keys).
std::string CertificatesSecretName(const spec::AdamJob& job);
// The Secret with the job's CA key, from which the operator renews certificates; no pod mounts it.
std::string CaSecretName(const spec::AdamJob& job);

struct RenderOptions {
  // The manifest the roles read (mounted from the job's ConfigMap): YAML or JSON text.
  std::string manifest;
  // The AdamJob's uid; non-empty: every object but the checkpoint volumes gets an ownerReference
  // to it (controller=true), so deleting the job deletes them.
  std::string owner_uid;
  int64_t generation = 0;  // the AdamJob's metadata.generation, recorded on each object
};

// Every object of the job, in creation order (stage, then kind, then index). Each carries the
// labels adam.dev/job and adam.dev/role and the annotation adam.dev/stage.
std::vector<Json> Render(const spec::AdamJob& job, const RenderOptions& options);

// The metadata of an object of the job: its name and namespace, the labels adam.dev/job and
// adam.dev/role (`role`) with the app.kubernetes.io ones, the stage and generation annotations,
// and with options.owner_uid an ownerReference to the job (controller=true).
Json Metadata(const spec::AdamJob& job, const std::string& name, const std::string& role, int stage,
              const RenderOptions& options);

// How many pods the job runs at full strength (controllers, servers, data servers, trainers).
int PodCount(const spec::AdamJob& job);

// The stage annotation of a rendered object (0 when it has none).
int StageOf(const Json& object);

// The objects as a YAML stream ("---" between documents), with strings quoted where YAML would
// read them as another type.
std::string ToYaml(const std::vector<Json>& objects);

// One JSON value as YAML (a document without the "---").
std::string ToYaml(const Json& value);

}  // namespace adam::op
