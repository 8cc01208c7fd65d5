// The AdamJob resource as typed structs, its YAML parser, and its validation.
//
// One schema serves `kubectl apply` (the CRD in crds/) and `adam run`. ParseAdamJob reads YAML
// text, fills defaults, and reports every problem at once, one per line, each prefixed with its
// field path (`spec.model.layers[3].units: must be > 0, got 0`). Everything here is pure and
// thread-compatible: no I/O except LoadAdamJob, which reads one file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace adam::spec {

enum class LayerType { kConv, kMaxPool, kAvgPool, kDense, kSoftmax, kDropout };
// kLeakyRelu: x for x > 0, kLeakySlope * x below.
enum class Activation { kNone, kTanh, kRelu, kSigmoid, kLeakyRelu };
inline constexpr float kLeakySlope = 0.01f;

const char* LayerTypeName(LayerType t);
struct TrainingSpec;
// The learning rate of epoch `epoch` (from 0) once `fraction` (in [0, 1]) of it is trained: the
// schedule, then the warmup ramp. A schedule `per: epoch` (the default) reads the epoch alone; one
// `per: step` reads the position epoch + fraction, so the rate moves with every step.
double LearningRateAt(const TrainingSpec& t, int epoch, double fraction = 0);
const char* ActivationName(Activation a);

// One layer of spec.model.layers. Which fields matter depends on `type`.
struct LayerSpec {
  LayerType type = LayerType::kDense;
  int maps = 0;       // conv: output feature maps
  int kernel = 0;     // conv: square kernel side
  int stride = 1;     // conv: stride (default 1)
  int padding = 0;    // conv: zero padding on each side (default 0)
  int size = 0;       // maxpool, avgpool: square window side, also its stride
  int units = 0;      // dense: output units
  int classes = 0;    // softmax: number of classes (a dense layer plus softmax)
  double rate = 0.5;  // dropout: the fraction of its inputs zeroed while training, in [0, 1)
  Activation activation = Activation::kTanh;  // conv and dense only
};

// Channels x height x width of one image or activation map.
struct Shape {
  int channels = 0;
  int height = 0;
  int width = 0;
  int64_t size() const { return int64_t{channels} * height * width; }
  bool operator==(const Shape&) const = default;
};

struct ModelSpec {
  Shape input;
  std::vector<LayerSpec> layers;
};

// One set of the data: IDX files (format idx), or a folder of class folders (format folder).
struct FilePair {
  std::string images;
  std::string labels;
  std::string folder;
};

struct AugmentSpec {
  int shift = 0;       // max pixels of random translation in each direction, 0..8
  bool hflip = false;  // random horizontal flip
  int variants = 2;    // precomputed augmented copies of each training image, 1..16
  // Format folder only, 0..32: images are fitted to (height + 2 crop) x (width + 2 crop) and
  // each variant is a random window of the input's size (variant 0 and the test set: the
  // centre one), as image-classification training crops larger images.
  int crop = 0;
};

// Where Adam's own volumes are mounted in every pod of a job (operator/reconcile/render.cc).
inline constexpr const char* kJobMountPath = "/etc/adam";
inline constexpr const char* kPodInfoPath = "/etc/podinfo";
inline constexpr const char* kStatePath = "/var/lib/adam";
inline constexpr const char* kTlsPath = "/etc/adam-tls";  // the job's TLS Secret (ca.crt, tls.*)

// A volume of the cluster: any volume source a pod spec accepts (persistentVolumeClaim, nfs,
// hostPath, configMap, csi, ...), written as it is there, and where the pod sees it. `adam run`
// ignores it: locally the paths are this machine's.
struct VolumeSpec {
  std::string source;      // a JSON object with one key, the source's type; "": no volume
  std::string mount_path;  // absolute; not over a system directory or one of Adam's mounts
};

struct DatasetSpec {
  std::string format = "idx";  // idx | folder
  FilePair train;
  FilePair test;  // format folder: absent when held_out > 0
  AugmentSpec augment;
  // Format folder (data/image_folder.h): the fraction of the training folder held out as the
  // test set instead of a test folder; how images meet model.input (crop: scaled to cover it and
  // centre-cropped; stretch: scaled to it); how many undecodable files each set may skip.
  double held_out = 0;
  std::string fit = "crop";
  int max_corrupt = 100;
  // Format idx: the classes' names in label order (an image folder's class folders name its
  // own); they go into the model file and the summaries. Empty: "0", "1", ...
  std::vector<std::string> class_names;
  // spec.dataset.volume and mountPath (default /data): mounted read-only into the data server's
  // pod only; the train and test paths lie under mountPath.
  VolumeSpec volume{"", "/data"};
};

// spec.output: where the trained model goes on a cluster (trainer 0 writes `<mountPath>/<job
// name>.onnx` on the volume), and how often (every `every_epochs` epochs as well as at the end;
// 0: at the end only). Locally `adam run --model-out PATH` names the file.
struct OutputSpec {
  VolumeSpec volume{"", "/output"};
  int every_epochs = 0;
};

// async: no waiting (Adam). sync: a trainer's pull after its k-th push returns once every trainer
// has pushed k times. bounded: once every trainer has pushed k - maxStaleness times.
enum class Consistency { kAsync, kSync, kBounded };

// How dense layers' updates travel from trainers to parameter servers: as weight deltas, or as
// Adam's activation and error vectors from which the parameter server computes the update
// itself. auto picks, per layer, whichever sends fewer bytes at the job's pushEvery.
enum class DenseUpdates { kAuto, kWeights, kActivations };

// Where a trainer's worker threads keep the weights: one shared copy written by every thread
// (Hogwild, Adam), or a private copy per thread that applies its own update at once and every
// other thread's from a ring of update vectors (dense layers as activation and error rows).
enum class ThreadWeights { kShared, kPrivate };

// spec.training.learningRateSchedule: the learning rate per epoch, instead of learningRateDecay.
struct LearningRateSchedule {
  enum class Type { kExponential, kStep, kCosine };
  Type type = Type::kExponential;  // kExponential: learning_rate * learning_rate_decay^e
  int every_epochs = 0;            // step: epochs between drops
  double factor = 0.1;             // step: the rate is multiplied by it at every drop
  double final = 0.0;              // cosine: the fraction of learning_rate it falls towards
  // per: step -- the rate (and the warmup ramp) follows the schedule within each epoch, by the
  // share of the epoch trained, rather than once per epoch (LearningRateAt).
  bool per_step = false;
};

// How trainers and parameter servers exchange updates and weights (update/codec.h). Defaults:
// every change sent, as 4-byte floats, uncompressed.
struct CommunicationSpec {
  // The significantly-modified filter: an entry of a pushed weight delta is sent once its change
  // not yet sent reaches `filter` in magnitude; smaller ones are kept for a later push. 0: all.
  double filter = 0;
  bool float16 = false;  // values: float16 -- deltas, activations, errors and pulled weights
  bool zstd = false;     // compress: zstd -- of every message's values
  bool operator==(const CommunicationSpec&) const = default;
};

struct TrainingSpec {
  int epochs = 10;
  double learning_rate = 0.02;
  double learning_rate_decay = 1.0;  // learning rate of epoch e = learning_rate * decay^e
  LearningRateSchedule schedule;
  int warmup_epochs = 0;  // epoch e < W runs at (e + 1) / (W + 1) of the scheduled rate
  // Each worker's SGD step, as PyTorch's SGD: v = momentum * v + g + weight_decay * w (weights,
  // not biases), w -= lr * v, with a velocity per worker thread. Both 0 = Adam's plain SGD. The
  // pushed delta carries the step; dense layers then travel as weights (see ParseAdamJob).
  double momentum = 0;
  double weight_decay = 0;
  // The loss's targets: 1 - s + s / classes for an image's class, s / classes for the others.
  double label_smoothing = 0;
  int push_every = 100;  // k: images between update pushes
  int batch_size = 1;    // images per thread per SGD step (1 = Adam's per-image SGD)
  int apply_every = 1;   // steps a worker holds its updates before writing the shared weights
  ThreadWeights thread_weights = ThreadWeights::kShared;
  Consistency consistency = Consistency::kAsync;
  int max_staleness = 0;  // bounded only: pushes a trainer may run ahead of the slowest
  DenseUpdates dense_updates = DenseUpdates::kAuto;
  CommunicationSpec communication;
  double epoch_quorum = 0.75;             // fraction of trainers whose finish ends an epoch
  std::optional<double> target_accuracy;  // stop early when test accuracy reaches it
  uint64_t seed = 1;                      // weight initialisation and data shuffling
};

struct Resources {
  std::string cpu;     // Kubernetes quantity, e.g. "4" or "500m"; empty = unset
  std::string memory;  // Kubernetes quantity, e.g. "8Gi"; empty = unset
};

struct Persistence {
  int64_t interval_ms = 30000;
  std::string size = "10Gi";
};

// spec.roles.<role>.failureRules[]: what a failed pod of the role means, as Kubernetes'
// podFailurePolicy and JobSet's failure policy say it. The first rule that matches decides;
// without a match, Adam's defaults: a disruption by the cluster (DisruptionTarget: eviction,
// preemption, node loss) is replaced without counting; exit 2 (refused input) and 3 (diverged)
// fail the job; anything else is replaced and counted against runPolicy.backoffLimit.
struct FailureRule {
  enum class Action { kRestart, kIgnore, kFailJob };
  Action action = Action::kRestart;  // kRestart counts; kIgnore replaces without counting
  // onExitCodes (matches only a pod whose Adam container ended with a code): In or NotIn values.
  bool on_exit_codes = false;
  bool exit_codes_in = true;
  std::vector<int> exit_codes;
  // onPodConditions: any one of these conditions (type, status) on the pod.
  std::vector<std::pair<std::string, std::string>> pod_conditions;
};

const char* FailureActionName(FailureRule::Action a);

struct ControllerRole {
  int replicas = 3;
  Resources resources;
  std::string pod_template;  // spec.roles.<role>.podTemplate (spec/pod_template.h)
};

// When a parameter server with copies answers a push: once a quorum of the shard's copies holds
// it (no acknowledged update is lost when a primary dies), or once the primary applied it (the
// copies get it with the next forward: a failover may lose the last forward interval's updates).
enum class Acknowledge { kQuorum, kApplied };

struct ParameterServerRole {
  int replicas = 1;
  int64_t shard_bytes = 1 << 20;
  int copies = 1;
  Acknowledge acknowledge = Acknowledge::kQuorum;
  Resources resources;
  Persistence persistence;
  std::string pod_template;  // spec.roles.<role>.podTemplate (spec/pod_template.h)
  std::vector<FailureRule> failure_rules;
};

struct DataServerRole {
  int replicas = 1;
  Resources resources;
  std::string pod_template;  // spec.roles.<role>.podTemplate (spec/pod_template.h)
  std::vector<FailureRule> failure_rules;
};

struct TrainerRole {
  int replicas = 1;
  int threads = 1;
  // Model workers per replica (model partitioning): each holds a slice of every layer with
  // parameters, cut by feature maps and units; 1 = the whole model in one process.
  int model_workers = 1;
  Resources resources;
  std::string pod_template;  // spec.roles.<role>.podTemplate (spec/pod_template.h)
  std::vector<FailureRule> failure_rules;
};

struct Roles {
  ControllerRole controller;
  ParameterServerRole parameter_server;
  DataServerRole data_server;
  TrainerRole trainer;
};

struct Placement {
  bool numa_pinning = true;
  std::string replica_topology_key = "kubernetes.io/hostname";
  std::string spread_topology_key = "topology.kubernetes.io/zone";
  // Where a split replica's model workers go: the domain of this key their trainer's pod is in
  // (the same node by default; a zone key puts them in its zone).
  std::string model_worker_topology_key = "kubernetes.io/hostname";
};

struct Networks {
  std::string replication;  // Multus NetworkAttachmentDefinition name; empty = none
};

// The operator that runs a job: Adam's own unless another controller (MultiKueue, say) takes it,
// as Job's spec.managedBy.
inline constexpr const char* kAdamManager = "adam.dev/operator";

// Gang scheduling (spec.runPolicy.schedulingPolicy): by the scheduler-plugins coscheduling plugin,
// or by Kubernetes' own (scheduling.k8s.io/v1alpha2 PodGroups, Kubernetes 1.36 with its
// GenericWorkload and GangScheduling feature gates); at most one of them.
struct SchedulingPolicy {
  // Every pod labelled scheduling.x-k8s.io/pod-group=<job>, a PodGroup whose minMember is the
  // job's pod count, and every pod made at once (stages would keep a gang from ever forming).
  bool coscheduling = false;
  // Every pod's spec.schedulingGroup names a scheduling.k8s.io PodGroup <job> whose gang policy's
  // minCount is the job's pod count; every pod made at once.
  bool gang = false;
  int64_t schedule_timeout_seconds = 60;  // the PodGroup's scheduleTimeoutSeconds
};

struct RunPolicy {
  int backoff_limit = 3;
  std::optional<int64_t> active_deadline_seconds;
  // The job fails when its pods have not all run this long after its start (Kubernetes only).
  std::optional<int64_t> startup_deadline_seconds;
  std::optional<int64_t> ttl_seconds_after_finished;
  std::string clean_pod_policy = "Running";
  bool suspend = false;
  // How long a deleted job waits for its parameter servers' last checkpoint flush.
  int64_t flush_timeout_seconds = 120;
  // Which controller acts on the job; anything but kAdamManager and Adam's operator leaves it be.
  std::string managed_by = kAdamManager;
  SchedulingPolicy scheduling;
};

struct AdamJob {
  std::string api_version;
  std::string kind;
  std::string name;
  std::string name_space = "default";
  std::string image = "adam:0.1.0";
  DatasetSpec dataset;
  OutputSpec output;
  ModelSpec model;
  TrainingSpec training;
  Roles roles;
  Placement placement;
  Networks networks;
  RunPolicy run_policy;
  // spec.podTemplate, for every role's pods; each role's own is merged over it
  // (spec/pod_template.h). JSON object text; "" = none.
  std::string pod_template;
};

// The input and output shape of each layer, and its parameter counts.
struct LayerShape {
  Shape in;
  Shape out;
  int64_t weights = 0;  // number of weight parameters
  int64_t biases = 0;   // number of bias parameters
};

// Bounds on what a manifest may ask for (the CRD has the same layer bound).
inline constexpr size_t kMaxManifestBytes = 1 << 20;
inline constexpr int kMaxLayers = 256;
inline constexpr int64_t kMaxParameters = 1'000'000'000;

// Parses and validates an AdamJob from YAML text. On error the status is INVALID_ARGUMENT and its
// message lists every problem, one per line, each starting with a field path. A key given twice
// in one mapping is an error naming both lines.
StatusOr<AdamJob> ParseAdamJob(const std::string& yaml_text);

// Reads `path` and parses it; the error names the file.
StatusOr<AdamJob> LoadAdamJob(const std::string& path);

// Infers every layer's shapes from spec.model, or names the first layer whose shape is impossible.
StatusOr<std::vector<LayerShape>> InferShapes(const ModelSpec& model);

// "30s", "500ms", "2m", "1h" -> milliseconds; -1 if malformed.
int64_t ParseDurationMs(const std::string& s);

// Number of classes the model predicts (its softmax layer's classes).
int NumClasses(const ModelSpec& model);

// Whether a controller group owns the job's shard map: spec.roles.parameterServer.copies > 1.
// Shards then move between servers (failover, rebalancing), so every dense layer travels as
// weight deltas (routable per shard; ParseAdamJob makes denseUpdates say so), every server can
// take any shard, trainers route by the controller's map, and the job has controller members
// (spec.roles.controller.replicas). Every role, the launcher and the operator decide it here,
// from the job: a role's command line only has to agree (CheckControllerFlag).
bool ControllerOwnsShards(const AdamJob& job);
// A role's --controller against the job: given exactly when the controller owns the shards; the
// error names which side is missing.
Status CheckControllerFlag(const AdamJob& job, bool controller_given);

}  // namespace adam::spec
