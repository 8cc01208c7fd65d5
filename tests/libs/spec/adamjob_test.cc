// AdamJob parsing, defaults and every validation rule, with the field path each error names.
#include "spec/adamjob.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <regex>

#include "spec/plan.h"
#include "spec/role_options.h"
#include "spec/yaml_json.h"
#include "testing/wait.h"

namespace adam::spec {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const char kValid[] = R"(
apiVersion: adam.dev/v1alpha1
kind: AdamJob
metadata: {name: tiny}
spec:
  dataset:
    train: {images: a.idx, labels: b.idx}
    test: {images: c.idx, labels: d.idx}
  model:
    input: {channels: 1, height: 28, width: 28}
    layers:
      - {type: conv, maps: 10, kernel: 5, activation: tanh}
      - {type: maxpool, size: 2}
      - {type: conv, maps: 20, kernel: 5}
      - {type: maxpool, size: 2}
      - {type: dense, units: 400}
      - {type: dense, units: 400, activation: relu}
      - {type: softmax, classes: 10}
)";

// Replaces the first occurrence of `from` in the valid manifest with `to`.
std::string With(const std::string& from, const std::string& to) {
  std::string s = kValid;
  auto pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return s.replace(pos, from.size(), to);
}

std::string ErrorOf(const std::string& yaml) {
  auto job = ParseAdamJob(yaml);
  EXPECT_FALSE(job.ok());
  return job.ok() ? "" : job.status().message();
}

TEST(AdamJob, ConsistencyModesAndDenseUpdates) {
  auto job = ParseAdamJob(
      With("spec:\n",
           "spec:\n  training: {consistency: bounded, maxStaleness: 3, denseUpdates: weights, "
           "applyEvery: 8}\n"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->training.consistency, Consistency::kBounded);
  EXPECT_EQ(job->training.max_staleness, 3);
  EXPECT_EQ(job->training.dense_updates, DenseUpdates::kWeights);
  EXPECT_EQ(job->training.apply_every, 8);
  job = ParseAdamJob(With("spec:\n", "spec:\n  training: {consistency: sync}\n"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->training.consistency, Consistency::kSync);
  EXPECT_EQ(job->training.dense_updates, DenseUpdates::kAuto);
  EXPECT_EQ(job->training.thread_weights, ThreadWeights::kShared);
  job = ParseAdamJob(With("spec:\n", "spec:\n  training: {threadWeights: private}\n"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->training.thread_weights, ThreadWeights::kPrivate);
}

// One rule decides whether a controller owns the shard map (copies > 1): the plan then has
// controller members, dense layers travel as weights, and a role's --controller must agree with it,
// the error naming the side that is missing.
TEST(AdamJob, CopiesMeanAControllerOwnsTheShardsAndTheFlagMustAgree) {
  auto one = ParseAdamJob(kValid);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_FALSE(ControllerOwnsShards(*one));
  EXPECT_TRUE(CheckControllerFlag(*one, false).ok());
  EXPECT_THAT(CheckControllerFlag(*one, true).message(),
              AllOf(HasSubstr("--controller"), HasSubstr("copies is 1")));
  auto three = ParseAdamJob(
      With("spec:\n", "spec:\n  roles: {parameterServer: {replicas: 3, copies: 3}}\n"));
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  EXPECT_TRUE(ControllerOwnsShards(*three));
  EXPECT_EQ(three->training.dense_updates, DenseUpdates::kWeights);
  EXPECT_TRUE(CheckControllerFlag(*three, true).ok());
  EXPECT_THAT(CheckControllerFlag(*three, false).message(),
              AllOf(HasSubstr("copies is 3"), HasSubstr("--controller must name its members")));
}

TEST(AdamJob, AveragePoolingAndEveryActivationParse) {
  auto job =
      ParseAdamJob(With("      - {type: conv, maps: 10, kernel: 5, activation: tanh}\n      - "
                        "{type: maxpool, size: 2}",
                        "      - {type: conv, maps: 10, kernel: 5, activation: leakyRelu}\n      - "
                        "{type: avgpool, size: 2}"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->model.layers[0].activation, Activation::kLeakyRelu);
  EXPECT_EQ(job->model.layers[1].type, LayerType::kAvgPool);
  EXPECT_STREQ(LayerTypeName(job->model.layers[1].type), "avgpool");
  job = ParseAdamJob(
      With("{type: dense, units: 400}", "{type: dense, units: 400, activation: sigmoid}"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->model.layers[4].activation, Activation::kSigmoid);
  EXPECT_STREQ(ActivationName(Activation::kSigmoid), "sigmoid");
  EXPECT_THAT(ErrorOf(With("{type: maxpool, size: 2}", "{type: avgpool}")),
              HasSubstr("spec.model.layers[1].size"));
}

// The learning rate of every epoch, per schedule, with and without warmup.
TEST(AdamJob, LearningRateSchedules) {
  auto job = ParseAdamJob(With(
      "spec:\n", "spec:\n  training: {epochs: 10, learningRate: 0.1, learningRateDecay: 0.5}\n"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_DOUBLE_EQ(LearningRateAt(job->training, 0), 0.1);
  EXPECT_DOUBLE_EQ(LearningRateAt(job->training, 3), 0.1 * 0.125);

  job = ParseAdamJob(With("spec:\n",
                          "spec:\n  training: {epochs: 10, learningRate: 0.1, "
                          "learningRateSchedule: {type: step, everyEpochs: 4, factor: 0.5}}\n"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  for (int e : {0, 3}) EXPECT_DOUBLE_EQ(LearningRateAt(job->training, e), 0.1);
  for (int e : {4, 7}) EXPECT_DOUBLE_EQ(LearningRateAt(job->training, e), 0.05);
  EXPECT_DOUBLE_EQ(LearningRateAt(job->training, 8), 0.025);

  job = ParseAdamJob(With("spec:\n",
                          "spec:\n  training: {epochs: 4, learningRate: 0.1, warmupEpochs: 1, "
                          "learningRateSchedule: {type: cosine, final: 0.2}}\n"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  // Half a cosine over 4 epochs from 1 towards 0.2 of the rate; epoch 0 at half of it (warmup).
  const double expected[] = {0.5 * 0.1, 0.1 * (0.2 + 0.8 * 0.5 * (1 + std::cos(M_PI / 4))),
                             0.1 * (0.2 + 0.8 * 0.5),
                             0.1 * (0.2 + 0.8 * 0.5 * (1 + std::cos(3 * M_PI / 4)))};
  for (int e = 0; e < 4; ++e)
    EXPECT_NEAR(LearningRateAt(job->training, e), expected[e], 1e-12) << e;
  EXPECT_GT(LearningRateAt(job->training, 3), 0.02);  // the last epoch still trains

  EXPECT_THAT(
      ErrorOf(With(
          "spec:\n",
          "spec:\n  training: {learningRateDecay: 0.9, learningRateSchedule: {type: cosine}}\n")),
      HasSubstr(
          "spec.training.learningRateSchedule: replaces learningRateDecay; give one of them"));
  EXPECT_THAT(ErrorOf(With("spec:\n", "spec:\n  training: {learningRateSchedule: {type: step}}\n")),
              HasSubstr("spec.training.learningRateSchedule.everyEpochs: required"));
  EXPECT_THAT(
      ErrorOf(With("spec:\n",
                   "spec:\n  training: {learningRateSchedule: {type: cosine, factor: 0.5}}\n")),
      HasSubstr("spec.training.learningRateSchedule.factor: applies only to type: step"));
  EXPECT_THAT(
      ErrorOf(With("spec:\n", "spec:\n  training: {learningRateSchedule: {type: linear}}\n")),
      HasSubstr(
          "spec.training.learningRateSchedule.type: must be one of step, cosine; got 'linear'"));
  EXPECT_THAT(ErrorOf(With("spec:\n", "spec:\n  training: {epochs: 3, warmupEpochs: 3}\n")),
              HasSubstr("spec.training.warmupEpochs: must be less than epochs (3)"));
}

// Momentum and weight decay are read, make dense layers travel as weights (a row of inputs and
// errors carries a plain SGD step only), and are refused where a step is applied elsewhere.
TEST(AdamJob, MomentumAndWeightDecay) {
  auto job = ParseAdamJob(kValid);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->training.momentum, 0);  // Adam's plain SGD by default
  EXPECT_EQ(job->training.weight_decay, 0);
  EXPECT_EQ(job->training.dense_updates, DenseUpdates::kAuto);
  job = ParseAdamJob(With("spec:\n", "spec:\n  training: {momentum: 0.9, weightDecay: 0.0005}\n"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_DOUBLE_EQ(job->training.momentum, 0.9);
  EXPECT_DOUBLE_EQ(job->training.weight_decay, 0.0005);
  EXPECT_EQ(job->training.dense_updates, DenseUpdates::kWeights);
  job = ParseAdamJob(
      With("spec:\n", "spec:\n  training: {weightDecay: 0.001, denseUpdates: weights}\n"));
  ASSERT_TRUE(job.ok()) << job.status().message();

  EXPECT_EQ(job->training.label_smoothing, 0);  // one-hot targets by default
  job = ParseAdamJob(With("spec:\n", "spec:\n  training: {labelSmoothing: 0.1}\n"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_DOUBLE_EQ(job->training.label_smoothing, 0.1);
  EXPECT_THAT(ErrorOf(With("spec:\n", "spec:\n  training: {labelSmoothing: -0.1}\n")),
              HasSubstr("spec.training.labelSmoothing: must be in [0, 1), got -0.1"));

  EXPECT_THAT(ErrorOf(With("spec:\n", "spec:\n  training: {momentum: 1}\n")),
              HasSubstr("spec.training.momentum: must be in [0, 1), got 1"));
  EXPECT_THAT(ErrorOf(With("spec:\n", "spec:\n  training: {weightDecay: -0.1}\n")),
              HasSubstr("spec.training.weightDecay: must be in [0, 0.1]"));
  EXPECT_THAT(ErrorOf(With("spec:\n", "spec:\n  training: {momentum: 0.9, applyEvery: 4}\n")),
              HasSubstr("spec.training.momentum: needs each step applied at once: applyEvery: 1"));
  EXPECT_THAT(
      ErrorOf(With("spec:\n", "spec:\n  training: {weightDecay: 0.001, threadWeights: private}\n")),
      HasSubstr("spec.training.weightDecay: needs threadWeights: shared"));
  EXPECT_THAT(
      ErrorOf(With("spec:\n", "spec:\n  training: {momentum: 0.5, denseUpdates: activations}\n")),
      HasSubstr("spec.training.denseUpdates: activations carry plain SGD steps"));
}

TEST(AdamJob, Communication) {
  auto job = ParseAdamJob(kValid);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->training.communication, CommunicationSpec{});  // all sent, float32, as is
  job = ParseAdamJob(With(
      "spec:\n",
      "spec:\n  training: {communication: {filter: 0.001, values: float16, compress: zstd}}\n"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_DOUBLE_EQ(job->training.communication.filter, 0.001);
  EXPECT_TRUE(job->training.communication.float16);
  EXPECT_TRUE(job->training.communication.zstd);
  job = ParseAdamJob(
      With("spec:\n", "spec:\n  training: {communication: {values: float32, compress: none}}\n"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->training.communication, CommunicationSpec{});
  EXPECT_THAT(ErrorOf(With("spec:\n", "spec:\n  training: {communication: {filter: -1}}\n")),
              HasSubstr("spec.training.communication.filter: must be in [0, 1], got -1"));
  EXPECT_THAT(ErrorOf(With("spec:\n", "spec:\n  training: {communication: {compress: lz4}}\n")),
              HasSubstr("spec.training.communication.compress: must be one of none, zstd; got "
                        "'lz4'"));
  EXPECT_THAT(ErrorOf(With("spec:\n", "spec:\n  training: {communication: {level: 3}}\n")),
              HasSubstr("spec.training.communication.level: unknown field"));
  EXPECT_THAT(ErrorOf(With("spec:\n", "spec:\n  training: {communication: zstd}\n")),
              HasSubstr("spec.training.communication: must be a mapping"));
}

TEST(AdamJob, ValidManifestGetsDefaults) {
  auto job = ParseAdamJob(kValid);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->name, "tiny");
  EXPECT_EQ(job->model.layers.size(), 7u);
  EXPECT_EQ(job->model.layers[2].activation, Activation::kTanh);
  EXPECT_EQ(job->model.layers[5].activation, Activation::kRelu);
  EXPECT_EQ(job->training.epochs, 10);
  EXPECT_DOUBLE_EQ(job->training.epoch_quorum, 0.75);
  EXPECT_EQ(job->training.consistency, Consistency::kAsync);
  EXPECT_EQ(job->roles.parameter_server.shard_bytes, 1 << 20);
  EXPECT_EQ(job->roles.trainer.replicas, 1);
  EXPECT_FALSE(job->training.target_accuracy.has_value());
  EXPECT_EQ(job->run_policy.managed_by, kAdamManager);
  EXPECT_FALSE(job->run_policy.scheduling.coscheduling);
}

TEST(AdamJob, ManagerAndGangScheduling) {
  auto job = ParseAdamJob(With("spec:\n",
                               "spec:\n  runPolicy: {managedBy: kueue.x-k8s.io/multikueue, "
                               "schedulingPolicy: {coscheduling: true, "
                               "scheduleTimeoutSeconds: 30}}\n"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->run_policy.managed_by, "kueue.x-k8s.io/multikueue");
  EXPECT_TRUE(job->run_policy.scheduling.coscheduling);
  EXPECT_EQ(job->run_policy.scheduling.schedule_timeout_seconds, 30);
  EXPECT_THAT(ErrorOf(With("spec:\n", "spec:\n  runPolicy: {managedBy: /x}\n")),
              HasSubstr("spec.runPolicy.managedBy: must be a domain-prefixed path"));
  // Kubernetes' own gang scheduling, or the plugin's: not both.
  job = ParseAdamJob(With("spec:\n", "spec:\n  runPolicy: {schedulingPolicy: {gang: true}}\n"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_TRUE(job->run_policy.scheduling.gang);
  EXPECT_FALSE(job->run_policy.scheduling.coscheduling);
  EXPECT_THAT(ErrorOf(With("spec:\n",
                           "spec:\n  runPolicy: {schedulingPolicy: {gang: true, "
                           "coscheduling: true}}\n")),
              HasSubstr("spec.runPolicy.schedulingPolicy.gang: and coscheduling are two"));
  EXPECT_THAT(ErrorOf(With("spec:\n", "spec:\n  runPolicy: {schedulingPolicy: {gangs: true}}\n")),
              HasSubstr("spec.runPolicy.schedulingPolicy.gangs: unknown field"));
  // spec.managedBy (Job's and MultiKueue's place) says the same; both given, they must agree.
  job = ParseAdamJob(With("spec:\n", "spec:\n  managedBy: kueue.x-k8s.io/multikueue\n"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->run_policy.managed_by, "kueue.x-k8s.io/multikueue");
  job = ParseAdamJob(With("spec:\n",
                          "spec:\n  managedBy: adam.dev/operator\n"
                          "  runPolicy: {managedBy: adam.dev/operator}\n"));
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_THAT(ErrorOf(With("spec:\n",
                           "spec:\n  managedBy: kueue.x-k8s.io/multikueue\n"
                           "  runPolicy: {managedBy: adam.dev/operator}\n")),
              HasSubstr("spec.managedBy: is 'kueue.x-k8s.io/multikueue' but "
                        "spec.runPolicy.managedBy is 'adam.dev/operator'"));
}

TEST(AdamJob, ExampleManifestsAreValid) {
  for (const char* name :
       {"fashion-mnist.yaml", "fashion-mnist-ha.yaml", "fashion-mnist-best.yaml"}) {
    auto job = LoadAdamJob(std::string(ADAM_SOURCE_DIR) + "/examples/" + name);
    EXPECT_TRUE(job.ok()) << name << ": " << job.status().ToString();
  }
}

// A key given twice would silently lose one of the two values: refused, naming both lines.
TEST(AdamJob, AKeyGivenTwiceIsRefusedNamingBothLines) {
  const std::string twice = With("spec:\n", "spec:\n  training:\n    epochs: 1\n    epochs: 2\n");
  const std::string err = ErrorOf(twice);
  EXPECT_THAT(err, HasSubstr("spec.training.epochs: given twice (lines 7 and 8)")) << err;
  EXPECT_THAT(ErrorOf(With("{type: maxpool, size: 2}", "{type: maxpool, size: 2, size: 3}")),
              HasSubstr("spec.model.layers[1].size: given twice"));
}

// What a manifest may ask for is bounded, and a huge one is refused at once, not after minutes.
TEST(AdamJob, TheModelsSizeIsBounded) {
  std::string many = With("      - {type: softmax, classes: 10}\n", "");
  for (int i = 0; i < kMaxLayers; ++i) many += "      - {type: dense, units: 4}\n";
  many += "      - {type: softmax, classes: 10}\n";
  EXPECT_THAT(ErrorOf(many),
              HasSubstr("spec.model.layers: has " + std::to_string(6 + kMaxLayers + 1) +
                        " layers; at most 256"));
  const std::string big =
      ErrorOf(With("{type: dense, units: 400, activation: relu}",
                   "{type: dense, units: 40000}\n      - {type: dense, units: 40000}"));
  // 260 + 5020 + 128400 (conv, conv, dense 320->400) + 16040000 + 1600040000 + 400010.
  EXPECT_THAT(big, HasSubstr("spec.model: has 1616613690 parameters; at most 1000000000")) << big;
  const auto t0 = std::chrono::steady_clock::now();
  std::string huge = std::string(kValid) + "# " + std::string(kMaxManifestBytes, 'x') + "\n";
  EXPECT_THAT(ErrorOf(huge),
              AllOf(HasSubstr("the manifest is 1049"), HasSubstr("at most 1048576")));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
}

// Whole CPUs pin; fractions do not, unless pinning is off.
TEST(AdamJob, PinningNeedsWholeCpus) {
  for (const char* cpu : {"2", "2000m", "\"3.0\"", "1k"})
    EXPECT_TRUE(
        ParseAdamJob(With("spec:\n", std::string("spec:\n  roles: {trainer: {resources: {cpu: ") +
                                         cpu + "}}}\n"))
            .ok())
        << cpu;
  for (const char* cpu : {"500m", "1500m", "\"1.5\""})
    EXPECT_THAT(
        ErrorOf(With("spec:\n",
                     std::string("spec:\n  roles: {trainer: {resources: {cpu: ") + cpu + "}}}\n")),
        HasSubstr("spec.roles.trainer.resources.cpu: must be a whole number"))
        << cpu;
  EXPECT_TRUE(ParseAdamJob(With("spec:\n",
                                "spec:\n  placement: {numaPinning: false}\n"
                                "  roles: {trainer: {resources: {cpu: 500m}}}\n"))
                  .ok());
}

// The documented bad manifests (tests/operator/bad-manifests.yaml), each a change to the HA
// example, are refused naming the field; the real API server refuses the same ones
// (tests/cluster/e2e reads the same catalogue).
TEST(AdamJob, DocumentedBadManifestsAreRefused) {
  using Json = nlohmann::json;
  const Json example = spec::YamlToJson(
      testing::ReadText(std::string(ADAM_SOURCE_DIR) + "/examples/fashion-mnist-ha.yaml"));
  const Json catalogue = spec::YamlToJson(
      testing::ReadText(std::string(ADAM_SOURCE_DIR) + "/tests/operator/bad-manifests.yaml"));
  ASSERT_TRUE(catalogue.is_array());
  EXPECT_GE(catalogue.size(), 15u);
  for (const Json& bad : catalogue) {
    SCOPED_TRACE(bad["name"].get<std::string>());
    Json job = example;
    const Json::json_pointer ptr(bad["pointer"].get<std::string>());
    if (bad.value("remove", false))
      job[ptr.parent_pointer()].erase(ptr.back());
    else
      job[ptr] = bad["value"];
    auto parsed = ParseAdamJob(job.dump());  // JSON is YAML
    ASSERT_FALSE(parsed.ok());
    EXPECT_THAT(parsed.status().message(), HasSubstr(bad["validate"].get<std::string>()));
  }
}

// spec.dataset.volume and spec.output: a volume source passed through as written, where it is
// mounted, and how often the model is written.
TEST(AdamJob, DatasetAndOutputVolumes) {
  auto job = ParseAdamJob(R"(apiVersion: adam.dev/v1alpha1
kind: AdamJob
metadata: {name: vol}
spec:
  dataset:
    train: {images: /mnt/fm/train-images.gz, labels: /mnt/fm/train-labels.gz}
    test: {images: /mnt/fm/t10k-images.gz, labels: /mnt/fm/t10k-labels.gz}
    volume: {persistentVolumeClaim: {claimName: fashion-mnist, readOnly: true}}
    mountPath: /mnt/fm
  output: {volume: {hostPath: {path: /srv/models, type: DirectoryOrCreate}}, everyEpochs: 3}
  model:
    input: {channels: 1, height: 28, width: 28}
    layers: [{type: softmax, classes: 10}]
  training: {epochs: 12}
)");
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(nlohmann::json::parse(job->dataset.volume.source),
            nlohmann::json::parse(
                R"({"persistentVolumeClaim": {"claimName": "fashion-mnist", "readOnly": true}})"));
  EXPECT_EQ(job->dataset.volume.mount_path, "/mnt/fm");
  EXPECT_EQ(nlohmann::json::parse(job->output.volume.source)["hostPath"]["type"],
            "DirectoryOrCreate");
  EXPECT_EQ(job->output.volume.mount_path, "/output");  // the default
  EXPECT_EQ(job->output.every_epochs, 3);
  // Without them: no volume, the model at the end only.
  auto plain = ParseAdamJob(kValid);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->dataset.volume.source, "");
  EXPECT_EQ(plain->output.every_epochs, 0);
}

// spec.dataset.classNames: an IDX set's class names, one per softmax class, each once.
TEST(AdamJob, ClassNames) {
  const std::string idx =
      "    train: {images: a.idx, labels: b.idx}\n    test: {images: c.idx, labels: d.idx}\n";
  std::string ten = "    classNames: [";
  for (int c = 0; c < 10; ++c) ten += (c ? ", " : "") + std::string("kind ") + std::to_string(c);
  ten += "]\n";
  auto job = ParseAdamJob(With(idx, idx + ten));
  ASSERT_TRUE(job.ok()) << job.status().message();
  ASSERT_EQ(job->dataset.class_names.size(), 10u);
  EXPECT_EQ(job->dataset.class_names[9], "kind 9");
  EXPECT_TRUE(ParseAdamJob(kValid)->dataset.class_names.empty());
  EXPECT_THAT(ErrorOf(With(idx, idx + "    classNames: [a, b]\n")),
              HasSubstr("spec.dataset.classNames: names 2 classes but the model's softmax has 10"));
  EXPECT_THAT(ErrorOf(With(idx, idx + "    classNames: [a, b, a, '', c, d, e, f, g, h]\n")),
              AllOf(HasSubstr("spec.dataset.classNames[2]: 'a' is named twice"),
                    HasSubstr("spec.dataset.classNames[3]: must be a name of 1 to 128")));
  EXPECT_THAT(ErrorOf(With(idx, idx + "    classNames: shirts\n")),
              HasSubstr("spec.dataset.classNames: must be a list of names"));
  EXPECT_THAT(
      ErrorOf(With(idx, "    format: folder\n    train: {folder: tr}\n    heldOut: 0.2\n" + ten)),
      HasSubstr("spec.dataset.classNames: only with format: idx"));
}

// spec.dataset.format: folder: a training folder and a test folder or a held-out fraction; how
// images meet model.input; how many broken files may be skipped.
TEST(AdamJob, ImageFolders) {
  auto job = ParseAdamJob(
      With("    train: {images: a.idx, labels: b.idx}\n    test: {images: c.idx, labels: d.idx}\n",
           "    format: folder\n    train: {folder: /data/train}\n    heldOut: 0.1\n"
           "    fit: stretch\n    maxCorrupt: 5\n"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->dataset.format, "folder");
  EXPECT_EQ(job->dataset.train.folder, "/data/train");
  EXPECT_EQ(job->dataset.test.folder, "");
  EXPECT_DOUBLE_EQ(job->dataset.held_out, 0.1);
  EXPECT_EQ(job->dataset.fit, "stretch");
  EXPECT_EQ(job->dataset.max_corrupt, 5);
  auto both = ParseAdamJob(
      With("    train: {images: a.idx, labels: b.idx}\n    test: {images: c.idx, labels: d.idx}\n",
           "    format: folder\n    train: {folder: tr}\n    test: {folder: te}\n"));
  ASSERT_TRUE(both.ok()) << both.status().message();
  EXPECT_EQ(both->dataset.test.folder, "te");
  EXPECT_EQ(both->dataset.fit, "crop");  // the default
  EXPECT_EQ(both->dataset.max_corrupt, 100);
  const std::string folder =
      "    format: folder\n    train: {folder: tr}\n    test: {folder: te}\n";
  const std::string idx =
      "    train: {images: a.idx, labels: b.idx}\n    test: {images: c.idx, labels: d.idx}\n";
  EXPECT_THAT(ErrorOf(With(idx, "    format: folder\n" + idx)),
              AllOf(HasSubstr("spec.dataset.train.images: unknown field"),
                    HasSubstr("spec.dataset.train.folder: required")));
  EXPECT_THAT(ErrorOf(With(idx, idx + "    heldOut: 0.2\n")),
              HasSubstr("spec.dataset.heldOut: only with format: folder"));
  EXPECT_THAT(ErrorOf(With(idx, folder + "    heldOut: 1.5\n")),
              HasSubstr("spec.dataset.heldOut: must be a fraction between 0 and 1"));
  EXPECT_THAT(ErrorOf(With(idx, folder + "    heldOut: 0.5\n")),
              HasSubstr("spec.dataset.heldOut: replaces spec.dataset.test; give one of them"));
  EXPECT_THAT(ErrorOf(With(idx, folder + "    fit: zoom\n")),
              HasSubstr("spec.dataset.fit: must be 'crop' or 'stretch', got 'zoom'"));
  EXPECT_THAT(ErrorOf(With(idx, idx + "    fit: crop\n")),
              HasSubstr("spec.dataset.fit: only with format: folder"));
  EXPECT_THAT(ErrorOf(With(idx, "    format: png\n" + idx)),
              HasSubstr("spec.dataset.format: must be 'idx' or 'folder', got 'png'"));
  EXPECT_THAT(ErrorOf(With(idx, idx + "    augment: {crop: 2}\n")),
              HasSubstr("spec.dataset.augment.crop: only with format: folder"));
  EXPECT_THAT(ErrorOf(With(idx, folder + "    augment: {crop: 33}\n")),
              HasSubstr("spec.dataset.augment.crop: must be <= 32, got 33"));
  auto cropped = ParseAdamJob(With(idx, folder + "    augment: {crop: 4}\n"));
  ASSERT_TRUE(cropped.ok()) << cropped.status().message();
  EXPECT_EQ(cropped->dataset.augment.crop, 4);
  std::string two = With(idx, folder);
  two.replace(two.find("channels: 1"), 11, "channels: 2");
  EXPECT_THAT(ErrorOf(two), HasSubstr("spec.model.input.channels: must be 1 (grey) or 3 (RGB) with "
                                      "spec.dataset.format: folder"));
}

struct BadCase {
  std::string from, to, message;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.message; }

class AdamJobErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(AdamJobErrors, NamesTheField) {
  const BadCase& c = GetParam();
  EXPECT_THAT(ErrorOf(With(c.from, c.to)), HasSubstr(c.message));
}

INSTANTIATE_TEST_SUITE_P(
    Fields, AdamJobErrors,
    ::testing::Values(
        BadCase{"apiVersion: adam.dev/v1alpha1", "apiVersion: v1",
                "apiVersion: must be adam.dev/v1alpha1"},
        BadCase{"kind: AdamJob", "kind: Job", "kind: must be AdamJob"},
        BadCase{"{name: tiny}", "{name: Tiny_Job}", "metadata.name: must be a DNS-1035 label"},
        BadCase{"{name: tiny}", "{name: 1job}", "metadata.name: must be a DNS-1035 label"},
        BadCase{"spec:\n", "spec:\n  roles: {parameterServer: {resources: {cpu: \"1.5\"}}}\n",
                "spec.roles.parameterServer.resources.cpu: must be a whole number of CPUs"},
        BadCase{"spec:\n", "spec:\n  runPolicy: {flushTimeoutSeconds: 0}\n",
                "spec.runPolicy.flushTimeoutSeconds: must be > 0, got 0"},
        BadCase{"units: 400}", "units: 0}", "spec.model.layers[4].units: must be > 0, got 0"},
        BadCase{"units: 400}", "units: many}",
                "spec.model.layers[4].units: must be an integer, got 'many'"},
        BadCase{"{type: maxpool, size: 2}", "{type: pool, size: 2}",
                "spec.model.layers[1].type: must be one of conv, maxpool, avgpool, dense, dropout, "
                "softmax; got 'pool'"},
        BadCase{"{type: dense, units: 400}", "{type: dropout, rate: 1}",
                "spec.model.layers[4].rate: must be in [0, 1), got 1"},
        BadCase{"maps: 10, kernel: 5, activation: tanh", "maps: 10, kernel: 5, activation: swish",
                "spec.model.layers[0].activation: must be one of tanh, relu, leakyRelu, sigmoid, "
                "none; got 'swish'"},
        BadCase{"maps: 10, kernel: 5,", "maps: 10, kernel: 50,",
                "layers[0].kernel: 50 is larger than its input 28x28"},
        BadCase{"{type: conv, maps: 20, kernel: 5}",
                "{type: conv, maps: 20, kernel: 5, color: red}",
                "spec.model.layers[2].color: unknown field"},
        BadCase{"{type: softmax, classes: 10}", "{type: dense, units: 10}",
                "spec.model.layers: the last layer must be softmax"},
        BadCase{"      - {type: maxpool, size: 2}\n      - {type: conv, maps: 20",
                "      - {type: softmax, classes: 3}\n      - {type: conv, maps: 20",
                "spec.model.layers[1].type: softmax must be the last layer"},
        BadCase{"train: {images: a.idx, labels: b.idx}", "train: {images: a.idx}",
                "spec.dataset.train.labels: required"},
        BadCase{"    test: {images: c.idx, labels: d.idx}\n", "", "spec.dataset.test: required"},
        BadCase{"input: {channels: 1, height: 28, width: 28}", "input: {channels: 1, height: 28}",
                "spec.model.input.width: required"},
        BadCase{"spec:\n", "spec:\n  training: {epochs: 0}\n",
                "spec.training.epochs: must be > 0, got 0"},
        BadCase{"spec:\n", "spec:\n  training: {learningRate: -1}\n",
                "spec.training.learningRate: must be in (0, 10]"},
        BadCase{"spec:\n", "spec:\n  training: {learningRateDecay: 0}\n",
                "spec.training.learningRateDecay: must be in (0, 1], got 0"},
        BadCase{"spec:\n", "spec:\n  training: {epochQuorum: 1.5}\n",
                "spec.training.epochQuorum: must be in (0, 1]"},
        BadCase{"spec:\n", "spec:\n  training: {consistency: eventual}\n",
                "spec.training.consistency: must be one of async, sync, bounded"},
        BadCase{"spec:\n", "spec:\n  training: {consistency: sync, maxStaleness: 2}\n",
                "spec.training.maxStaleness: applies only to consistency: bounded"},
        BadCase{"spec:\n", "spec:\n  training: {applyEvery: 0}\n",
                "spec.training.applyEvery: must be > 0, got 0"},
        BadCase{"spec:\n", "spec:\n  training: {threadWeights: copies}\n",
                "spec.training.threadWeights: must be one of shared, private; got 'copies'"},
        BadCase{"spec:\n", "spec:\n  training: {threadWeights: private, applyEvery: 8}\n",
                "spec.training.threadWeights: private applies each update at once; it needs "
                "applyEvery: 1"},
        BadCase{"spec:\n", "spec:\n  training: {denseUpdates: gradients}\n",
                "spec.training.denseUpdates: must be one of auto, weights, activations"},
        BadCase{"spec:\n", "spec:\n  training: {targetAccuracy: 2}\n",
                "spec.training.targetAccuracy: must be in (0, 1]"},
        BadCase{"spec:\n", "spec:\n  roles: {trainer: {threads: 0}}\n",
                "spec.roles.trainer.threads: must be > 0, got 0"},
        BadCase{"spec:\n", "spec:\n  roles: {parameterServer: {shardBytes: 1001}}\n",
                "spec.roles.parameterServer.shardBytes: must be a multiple of 4"},
        BadCase{"spec:\n", "spec:\n  roles: {controller: {replicas: 2}}\n",
                "spec.roles.controller.replicas: must be odd"},
        BadCase{"spec:\n", "spec:\n  roles: {dataServer: {replicas: 17}}\n",
                "spec.roles.dataServer.replicas: must be <= 16, got 17"},
        BadCase{"spec:\n", "spec:\n  roles: {trainer: {resources: {memory: lots}}}\n",
                "spec.roles.trainer.resources.memory: must be a Kubernetes quantity"},
        BadCase{"spec:\n", "spec:\n  roles: {parameterServer: {persistence: {interval: soon}}}\n",
                "spec.roles.parameterServer.persistence.interval: must be a positive duration"},
        BadCase{"spec:\n", "spec:\n  runPolicy: {cleanPodPolicy: Some}\n",
                "spec.runPolicy.cleanPodPolicy: must be one of"},
        BadCase{"spec:\n", "spec:\n  dataset2: {}\n", "spec.dataset2: unknown field"},
        BadCase{"spec:\n", "spec:\n  dataset:\n    augment: {shift: 9}\n",
                "spec.dataset.augment.shift: must be <= 8, got 9"},
        BadCase{"test: {images: c.idx, labels: d.idx}",
                "test: {images: c.idx, labels: d.idx}\n    volume: {pvc: {claimName: x}}",
                "spec.dataset.volume.pvc: is not a Kubernetes volume source"},
        BadCase{"test: {images: c.idx, labels: d.idx}",
                "test: {images: c.idx, labels: d.idx}\n    volume: [nfs]",
                "spec.dataset.volume: must be one volume source"},
        BadCase{"test: {images: c.idx, labels: d.idx}",
                "test: {images: c.idx, labels: d.idx}\n    mountPath: data",
                "spec.dataset.mountPath: must be an absolute path of plain names"},
        BadCase{"test: {images: c.idx, labels: d.idx}",
                "test: {images: c.idx, labels: d.idx}\n    mountPath: /data/../etc",
                "spec.dataset.mountPath: must be an absolute path of plain names"},
        BadCase{"test: {images: c.idx, labels: d.idx}",
                "test: {images: c.idx, labels: d.idx}\n    mountPath: /var",
                "spec.dataset.mountPath: '/var' would overlap /var/lib/adam"},
        BadCase{"test: {images: c.idx, labels: d.idx}",
                "test: {images: c.idx, labels: d.idx}\n    mountPath: /usr",
                "spec.dataset.mountPath: '/usr' would hide the image's /usr"},
        BadCase{"spec:\n", "spec:\n  output: {everyEpochs: 2, path: x}\n",
                "spec.output.path: unknown field"},
        BadCase{"spec:\n", "spec:\n  output: {everyEpochs: -1}\n",
                "spec.output.everyEpochs: must be >= 0"},
        BadCase{"spec:\n", "spec:\n  output: {volume: {emptyDir: {}, nfs: {}}}\n",
                "spec.output.volume: must be one volume source"}));

TEST(AdamJob, ReportsEveryProblemAtOnce) {
  std::string yaml = With("units: 400}", "units: 0}");
  yaml = yaml.replace(yaml.find("kind: AdamJob"), 13, "kind: Job");
  const std::string msg = ErrorOf(yaml);
  EXPECT_THAT(msg, HasSubstr("kind: must be AdamJob"));
  EXPECT_THAT(msg, HasSubstr("spec.model.layers[4].units: must be > 0"));
  EXPECT_EQ(std::count(msg.begin(), msg.end(), '\n'), 1) << msg;
}

// Found by tests/fuzz/manifest_fuzzer: a layer missing its size divided by zero.
TEST(AdamJob, MissingLayerSizeIsReportedNotDividedBy) {
  EXPECT_THAT(ErrorOf(With("{type: maxpool, size: 2}", "{type: maxpool}")),
              HasSubstr("spec.model.layers[1].size: required"));
  EXPECT_THAT(ErrorOf(With("maps: 10, kernel: 5,", "maps: 10,")),
              HasSubstr("spec.model.layers[0].kernel: required"));
  ModelSpec m;
  m.input = {1, 8, 8};
  LayerSpec pool;
  pool.type = LayerType::kMaxPool;  // size 0
  m.layers = {pool};
  EXPECT_FALSE(InferShapes(m).ok());
}

TEST(AdamJob, SyntaxErrorNamesLine) {
  EXPECT_THAT(ErrorOf("apiVersion: [unclosed\nkind: x\n"), HasSubstr("YAML syntax error at line"));
  EXPECT_THAT(ErrorOf("- just\n- a list\n"), HasSubstr("must be a YAML mapping"));
  EXPECT_THAT(ErrorOf(""), HasSubstr("must be a YAML mapping"));
}

TEST(AdamJob, MissingFileIsNotFound) {
  auto job = LoadAdamJob("/nonexistent/job.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(job.status().message(), HasSubstr("/nonexistent/job.yaml"));
}

TEST(AdamJob, InferShapesFollowsTheModel) {
  auto job = ParseAdamJob(kValid);
  ASSERT_TRUE(job.ok());
  auto shapes = InferShapes(job->model);
  ASSERT_TRUE(shapes.ok());
  EXPECT_EQ((*shapes)[0].out, (Shape{10, 24, 24}));
  EXPECT_EQ((*shapes)[1].out, (Shape{10, 12, 12}));
  EXPECT_EQ((*shapes)[3].out, (Shape{20, 4, 4}));
  EXPECT_EQ((*shapes)[4].weights, 320 * 400);
  EXPECT_EQ((*shapes)[6].out, (Shape{10, 1, 1}));
}

TEST(Plan, OrdersServersBeforeTrainersAndNamesInstances) {
  auto job = ParseAdamJob(With(
      "spec:\n",
      "spec:\n  roles: {parameterServer: {replicas: 3}, trainer: {replicas: 2, threads: 4}}\n"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  Plan plan = MakePlan(*job);
  ASSERT_EQ(plan.instances.size(), 6u);
  int trainers = 0;
  for (const auto& in : plan.instances) {
    if (in.role == Role::kTrainer) {
      ++trainers;
      EXPECT_EQ(in.stage, 1);
      EXPECT_EQ(in.threads, 4);
    } else {
      EXPECT_EQ(in.stage, 0);
      EXPECT_EQ(in.host, "127.0.0.1");
      EXPECT_EQ(in.port, 0);
    }
  }
  EXPECT_EQ(trainers, 2);
  EXPECT_EQ(plan.instances[0].name, "ps-0");
  EXPECT_EQ(plan.instances[2].name, "ps-2");
  EXPECT_EQ(plan.instances[2].replication_host, "127.0.0.2");
  EXPECT_EQ(plan.instances[3].name, "data-server-0");
  EXPECT_EQ(plan.instances[5].name, "trainer-1");
}

TEST(Plan, ClusterModeUsesServiceNamesAndFixedPorts) {
  auto job = ParseAdamJob(kValid);
  ASSERT_TRUE(job.ok());
  PlanOptions o;
  o.local = false;
  Plan plan = MakePlan(*job, o);
  EXPECT_EQ(plan.instances[0].host, "tiny-ps-0.tiny");
  EXPECT_EQ(plan.instances[0].replication_host, "tiny-ps-0.tiny");
  EXPECT_EQ(plan.instances[0].port, o.grpc_port);
  EXPECT_EQ(plan.instances[0].metrics_port, o.metrics_port);
}

TEST(Plan, TrainerArgsCarryEndpoints) {
  auto job = ParseAdamJob(kValid);
  ASSERT_TRUE(job.ok());
  Plan plan = MakePlan(*job);
  const RoleInstance& trainer = plan.instances.back();
  auto args = ToArgs(
      OptionsFor(trainer, "job.yaml", {{"127.0.0.1:5"}, {"127.0.0.1:6", "127.0.0.1:7"}, {}, {}}));
  const std::vector<std::string> want = {"trainer",
                                         "--job",
                                         "job.yaml",
                                         "--name",
                                         "trainer-0",
                                         "--index",
                                         "0",
                                         "--threads",
                                         "1",
                                         "--data-server",
                                         "127.0.0.1:5",
                                         "--ps",
                                         "127.0.0.1:6,127.0.0.1:7"};
  EXPECT_EQ(args, want);
}

// spec.roles.trainer.modelWorkers: every layer with parameters must split that many ways, the
// update paths a split replica cannot take are refused, and dense layers travel as weights.
TEST(AdamJob, ModelWorkers) {
  auto job = ParseAdamJob(kValid);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->roles.trainer.model_workers, 1);
  EXPECT_EQ(job->training.dense_updates, DenseUpdates::kAuto);
  job = ParseAdamJob(With("spec:\n", "spec:\n  roles: {trainer: {modelWorkers: 4}}\n"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->roles.trainer.model_workers, 4);
  EXPECT_EQ(job->training.dense_updates, DenseUpdates::kWeights);
  EXPECT_THAT(ErrorOf(With("spec:\n", "spec:\n  roles: {trainer: {modelWorkers: 11}}\n")),
              HasSubstr("spec.model.layers[6]: has 10 outputs, fewer than "
                        "spec.roles.trainer.modelWorkers (11)"));
  EXPECT_THAT(ErrorOf(With("spec:\n", "spec:\n  roles: {trainer: {modelWorkers: 0}}\n")),
              HasSubstr("spec.roles.trainer.modelWorkers"));
  const std::string split = "spec:\n  roles: {trainer: {modelWorkers: 2}}\n  training: ";
  EXPECT_THAT(ErrorOf(With("spec:\n", split + "{threadWeights: private}\n")),
              HasSubstr("spec.training.threadWeights: private is not supported with "
                        "spec.roles.trainer.modelWorkers > 1"));
  EXPECT_THAT(ErrorOf(With("spec:\n", split + "{batchSize: 4, applyEvery: 2}\n")),
              HasSubstr("spec.training.applyEvery: must be 1"));
  EXPECT_THAT(ErrorOf(With("spec:\n", split + "{denseUpdates: activations}\n")),
              HasSubstr("spec.training.denseUpdates: activations need a layer's whole input"));
}

// A split replica's workers are instances of their own, each listening for the exchange, and
// each worker is told every address of its replica, the trainer's first.
TEST(Plan, SplitReplicasListEveryModelWorker) {
  auto job =
      ParseAdamJob(With("spec:\n", "spec:\n  roles: {trainer: {replicas: 2, modelWorkers: 3}}\n"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  Plan plan = MakePlan(*job);
  std::vector<std::string> names;
  for (auto& in : plan.instances)
    if (in.role == Role::kTrainer) {
      names.push_back(in.name);
      EXPECT_EQ(in.host, "127.0.0.1") << in.name;
      in.port = 100 * (in.index + 1) + in.model_worker;
    }
  EXPECT_EQ(names, (std::vector<std::string>{"trainer-0", "trainer-0-w1", "trainer-0-w2",
                                             "trainer-1", "trainer-1-w1", "trainer-1-w2"}));
  const auto addrs = ModelWorkerAddresses(plan);
  ASSERT_EQ(addrs.size(), 2u);
  EXPECT_EQ(addrs[1],
            (std::vector<std::string>{"127.0.0.1:200", "127.0.0.1:201", "127.0.0.1:202"}));
  Endpoints e{{"127.0.0.1:5"}, {"127.0.0.1:6"}, {}, addrs};
  const RoleInstance& w = plan.instances.back();
  RoleOptions options = OptionsFor(w, "job.yaml", e);
  Common(options).plaintext = true;
  auto parsed = ParseArgs(ToArgs(options));
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  const auto& t = std::get<TrainerOptions>(*parsed);
  EXPECT_EQ(t.index, 1);
  EXPECT_EQ(t.model_worker, 2);
  EXPECT_EQ(t.model_workers, addrs[1]);
  PlanOptions o;
  o.local = false;
  EXPECT_EQ(MakePlan(*job, o).instances.back().host, "tiny-trainer-1-w2.tiny");
  EXPECT_EQ(ModelWorkerAddresses(MakePlan(*ParseAdamJob(kValid))).size(), 0u);
}

// A controller's id and name come from its instance, or as the pod template gives them.
TEST(Plan, ControllerArgsTakeTheTemplatesIdentity) {
  auto job = ParseAdamJob(With("spec:\n",
                               "spec:\n  roles: {controller: {replicas: 3}, "
                               "parameterServer: {replicas: 3, copies: 3}}\n"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  Plan plan = MakePlan(*job);
  const RoleInstance* second = nullptr;
  for (const auto& in : plan.instances)
    if (in.role == Role::kController && in.index == 1) second = &in;
  ASSERT_NE(second, nullptr);
  const Endpoints endpoints{{}, {}, ControllerMembersOf(plan), {}};
  const auto value = [](const std::vector<std::string>& args, const std::string& flag) {
    auto it = std::find(args.begin(), args.end(), flag);
    return it == args.end() || it + 1 == args.end() ? std::string() : *(it + 1);
  };
  auto own = ToArgs(OptionsFor(*second, "job.yaml", endpoints));
  EXPECT_EQ(value(own, "--id"), "2");
  EXPECT_EQ(value(own, "--name"), second->name);
  auto templated =
      ToArgs(OptionsFor(*second, "job.yaml", endpoints, {"hostname", "$(ADAM_POD_NAME)"}));
  EXPECT_EQ(value(templated, "--id"), "hostname");
  EXPECT_EQ(value(templated, "--name"), "$(ADAM_POD_NAME)");
  ASSERT_EQ(endpoints.controller_members.size(), 3u);
  EXPECT_EQ(endpoints.controller_members[1].id, 2u);
  auto members = ParseMembers(value(templated, "--members"));
  ASSERT_TRUE(members.ok()) << members.status().message();
  EXPECT_EQ(*members, endpoints.controller_members);
}

// spec.roles.<role>.failureRules: an action and one matcher each, in order.
TEST(AdamJob, FailureRules) {
  auto job = ParseAdamJob(With("spec:\n", R"(spec:
  roles:
    trainer:
      failureRules:
        - {action: Ignore, onExitCodes: {operator: In, values: [137, 143]}}
        - {action: FailJob, onPodConditions: [{type: ConfigIssue}, {type: Ready, status: "False"}]}
        - {action: Restart, onExitCodes: {operator: NotIn, values: [1]}}
)"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  const auto& rules = job->roles.trainer.failure_rules;
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[0].action, FailureRule::Action::kIgnore);
  EXPECT_TRUE(rules[0].on_exit_codes && rules[0].exit_codes_in);
  EXPECT_EQ(rules[0].exit_codes, (std::vector<int>{137, 143}));
  EXPECT_EQ(rules[1].action, FailureRule::Action::kFailJob);
  EXPECT_FALSE(rules[1].on_exit_codes);
  EXPECT_EQ(rules[1].pod_conditions, (std::vector<std::pair<std::string, std::string>>{
                                         {"ConfigIssue", "True"}, {"Ready", "False"}}));
  EXPECT_FALSE(rules[2].exit_codes_in);
  EXPECT_TRUE(job->roles.parameter_server.failure_rules.empty());

  auto bad = [](const std::string& rules) {
    return ErrorOf(
        With("spec:\n", "spec:\n  roles: {dataServer: {failureRules: " + rules + "}}\n"));
  };
  EXPECT_THAT(bad("[{action: Retry, onExitCodes: {operator: In, values: [1]}}]"),
              HasSubstr("spec.roles.dataServer.failureRules[0].action: must be one of Restart, "
                        "Ignore, FailJob; got 'Retry'"));
  EXPECT_THAT(bad("[{action: Ignore}]"),
              HasSubstr("spec.roles.dataServer.failureRules[0]: give exactly one of onExitCodes "
                        "and onPodConditions"));
  EXPECT_THAT(bad("[{action: Ignore, onExitCodes: {operator: Is, values: [1, 1, 300]}}]"),
              AllOf(HasSubstr("onExitCodes.operator: must be one of In, NotIn; got 'Is'"),
                    HasSubstr("onExitCodes.values[1]: 1 is given twice"),
                    HasSubstr("onExitCodes.values[2]: must be in 1..255")));
  EXPECT_THAT(bad("[{action: Ignore, onPodConditions: [{type: X, status: maybe}]}]"),
              HasSubstr("onPodConditions[0].status: must be one of True, False, Unknown"));
  EXPECT_THAT(ErrorOf(With("spec:\n", "spec:\n  roles: {controller: {failureRules: []}}\n")),
              HasSubstr("spec.roles.controller.failureRules: unknown field"));
}

// A manifest is UTF-8 text (YAML is Unicode; every value goes on to Kubernetes as JSON): a byte
// that is not is named with its line and column, wherever it is, instead of failing later.
TEST(AdamJob, BytesThatAreNotUtf8AreNamed) {
  EXPECT_TRUE(
      ParseAdamJob(With("spec:\n", "spec:\n  podTemplate: {annotations: {team: \"ü\"}}\n")).ok());
  const std::string bad = With("spec:\n", "spec:\n  podTemplate: {labels: {team: \"\xff\"}}\n");
  const size_t at = bad.find('\xff');
  const std::string msg = ErrorOf(bad);
  EXPECT_THAT(msg, HasSubstr("(root): byte " + std::to_string(at) +
                             " (0xFF, line 6, column 33) "
                             "is not UTF-8"));
  // A NUL inside a pod template's key: valid UTF-8, but yaml-cpp hands back bytes that are not
  // (found by the manifest fuzzer). Refused naming the field, not thrown from the serialiser.
  std::string nul = With("spec:\n", "spec:\n  podTemplate: {schedul\tXName: gang}\n");
  nul[nul.find('X')] = '\0';
  EXPECT_THAT(ErrorOf(nul), HasSubstr("spec.podTemplate.schedul"));
  for (const char* seq : {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\x80"}) {
    SCOPED_TRACE(::testing::PrintToString(std::string(seq)));
    EXPECT_THAT(ErrorOf(With("tiny}", std::string("tiny, x: \"") + seq + "\"}")),
                HasSubstr("is not UTF-8"));
  }
}

}  // namespace
}  // namespace adam::spec
