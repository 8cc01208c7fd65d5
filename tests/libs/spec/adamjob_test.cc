// AdamJob parsing and defaults: what each part of a manifest becomes (adamjob_testing.h).
#include "libs/spec/adamjob_testing.h"

namespace adam::spec {
namespace {

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

// A schedule per step reads the place within the epoch: the cosine and the warmup ramp move
// continuously through the per-epoch values; a step schedule still drops at whole epochs; per
// epoch (the default) ignores the place.
TEST(AdamJob, ASchedulePerStepMovesWithinTheEpoch) {
  const auto parse = [&](const std::string& per) {
    return ParseAdamJob(With("spec:\n",
                             "spec:\n  training: {epochs: 4, learningRate: 0.1, warmupEpochs: 2, "
                             "learningRateSchedule: {type: cosine, final: 0, per: " +
                                 per + "}}\n"));
  };
  auto job = parse("step");
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_TRUE(job->training.schedule.per_step);
  const auto at = [&](double x) { return 0.1 * 0.5 * (1 + std::cos(M_PI * x / 4)); };
  // In warmup, 1.5 epochs in: (1.5 + 1) / 3 of the cosine there.
  EXPECT_NEAR(LearningRateAt(job->training, 1, 0.5), at(1.5) * 2.5 / 3, 1e-12);
  // At whole epochs, the per-epoch values; past the warmup, the cosine alone.
  EXPECT_NEAR(LearningRateAt(job->training, 1, 0), at(1) * 2 / 3, 1e-12);
  EXPECT_NEAR(LearningRateAt(job->training, 2, 0.25), at(2.25), 1e-12);
  EXPECT_NEAR(LearningRateAt(job->training, 3, 1), 0.0, 1e-12);  // the end of the last epoch
  // Within the cosine the rate falls at every step.
  EXPECT_GT(LearningRateAt(job->training, 2, 0.5), LearningRateAt(job->training, 2, 0.6));
  // A place outside [0, 1] is held to it.
  EXPECT_EQ(LearningRateAt(job->training, 2, 1.7), LearningRateAt(job->training, 2, 1));
  EXPECT_EQ(LearningRateAt(job->training, 2, -1), LearningRateAt(job->training, 2, 0));

  job = parse("epoch");
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_FALSE(job->training.schedule.per_step);
  EXPECT_EQ(LearningRateAt(job->training, 2, 0.9), LearningRateAt(job->training, 2));

  job =
      ParseAdamJob(With("spec:\n",
                        "spec:\n  training: {epochs: 10, learningRate: 0.1, learningRateSchedule: "
                        "{type: step, everyEpochs: 4, factor: 0.5, per: step}}\n"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_DOUBLE_EQ(LearningRateAt(job->training, 3, 0.99), 0.1);
  EXPECT_DOUBLE_EQ(LearningRateAt(job->training, 3, 1), 0.05);

  EXPECT_THAT(ErrorOf(With("spec:\n",
                           "spec:\n  training: {learningRateSchedule: "
                           "{type: cosine, per: batch}}\n")),
              HasSubstr("spec.training.learningRateSchedule.per: must be one of epoch, step; got "
                        "'batch'"));
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

}  // namespace
}  // namespace adam::spec
