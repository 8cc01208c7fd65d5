// End to end: `adam run` on a tiny synthetic data set made here, through real processes and gRPC
// on loopback; and how the CLI and the launcher treat bad input, dead roles and Ctrl-C.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <png.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>

#include "data/idx.h"
#include "testing/chromium.h"
#include "testing/images.h"
#include "testing/sanitizer.h"
#include "testing/synthetic.h"
#include "testing/tmp_dir.h"
#include "testing/wait.h"

namespace adam {
namespace {

using testing::kSanitizerBuild;

// Epochs of the kill-and-restart jobs below: about 3 s of training on a quiet machine, so that a
// kill at 0.5 s finds the trainers training. A sanitizer build trains about four times slower, so
// a quarter of the epochs last as long there.
constexpr int kRestartEpochs = kSanitizerBuild ? 100 : 400;
// The training of the kill jobs: `epochs` of them.
std::string KillJobTraining(int epochs) {
  return "epochs: " + std::to_string(epochs) + ", learningRate: 0.02, pushEvery: 50";
}
const std::string kRestartTraining = KillJobTraining(kRestartEpochs);
// Epochs of the failover jobs of three copies (a kill at 1 s; the last of several at 4 s, back a
// second later): 200 take 20 to 30 s beside the other tests, time for the copies to catch up
// after the last fault. Under ASan they took 113 and 122 s; 60 take 33 and 39 s there.
constexpr int kFailoverEpochs = kSanitizerBuild ? 60 : 200;
const std::string kFailoverTraining = KillJobTraining(kFailoverEpochs);

using ::testing::HasSubstr;
using testing::Manifest;
using ::testing::Not;
using testing::WriteSynthetic;

struct Result {
  int exit_code = -1;
  std::string out, err;
};

// Runs `adam ARGS` to completion (bounded by `timeout_s`), capturing stdout and stderr; `env`
// ("NAME=value ...") is set for it.
Result Adam(const testing::TmpDir& dir, const std::string& args, int timeout_s = 240,
            const std::string& env = "") {
  const std::string out = dir.File("stdout"), err = dir.File("stderr");
  const std::string cmd = env + (env.empty() ? "" : " ") + "timeout " + std::to_string(timeout_s) +
                          " " ADAM_BINARY " " + args + " > " + out + " 2> " + err;
  const int status = std::system(cmd.c_str());
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = testing::ReadText(out);
  r.err = testing::ReadText(err);
  return r;
}

class AdamRun : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteSynthetic(dir_.File("train"), 1200, 1);
    WriteSynthetic(dir_.File("test"), 300, 2);
  }
  testing::TmpDir dir_;
};

// labelSmoothing reaches the trainers: with s = 0.5 over 4 classes the targets are 0.625 and
// 0.125, whose cross-entropy cannot fall below their entropy (1.07); the same job with one-hot
// targets ends near 0 (0.0012 when the trainer was made to drop the setting). The accuracy is
// unharmed.
TEST_F(AdamRun, SmoothedLabelsKeepTheLossAboveTheirEntropy) {
  Result r = Adam(dir_, "run " +
                            Manifest(dir_,
                                     "epochs: 3, learningRate: 0.02, pushEvery: 50, "
                                     "labelSmoothing: 0.5",
                                     "parameterServer: {replicas: 1}, "
                                     "trainer: {replicas: 1, threads: 2}") +
                            " --output json -q");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const double entropy = -(0.625 * std::log(0.625) + 3 * 0.125 * std::log(0.125));
  EXPECT_GT(j["train_loss"].get<double>(), entropy) << r.out;
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << r.out;
}

TEST_F(AdamRun, TrainsSyntheticDataFarAboveChance) {
  const std::string job = Manifest(dir_, "epochs: 3, learningRate: 0.02, pushEvery: 50",
                                   "parameterServer: {replicas: 2, shardBytes: 1024}, "
                                   "trainer: {replicas: 2, threads: 2}");
  Result r = Adam(dir_, "run " + job + " --output json --report " + dir_.File("report"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << r.out;  // chance is 0.25
  // The report: a row and a dot per epoch, and the summary.
  const std::string report = testing::ReadText(dir_.File("report/index.html"));
  EXPECT_THAT(report, HasSubstr("<td>3</td><td>"));
  EXPECT_THAT(report, HasSubstr("<th>result</th><td>completed</td>"));
  EXPECT_THAT(report, HasSubstr("<polyline class=\"series\""));
  EXPECT_EQ(j["epochs"].get<int>(), 3);
  EXPECT_GT(j["images_per_second"].get<double>(), 0);
  EXPECT_GT(j["wall_seconds"].get<double>(), 0);
  EXPECT_GE(j["images"].get<int64_t>(), 3 * 1200 * 3 / 4);
  // One progress line per epoch, and role-prefixed log lines.
  EXPECT_THAT(r.err, HasSubstr("epoch   1/3"));
  EXPECT_THAT(r.err, HasSubstr("epoch   3/3"));
  // The epoch lines fit an 80-column terminal.
  std::istringstream lines(r.err);
  for (std::string l; std::getline(lines, l);)
    if (l.rfind("epoch ", 0) == 0) {
      EXPECT_LE(l.size(), 80u) << l;
    }
  EXPECT_THAT(r.err, HasSubstr("[data-server-0]"));
  EXPECT_THAT(r.err, HasSubstr("[ps-1]"));
  EXPECT_THAT(r.err, HasSubstr("[trainer-1]"));
}

// Each consistency model trains the synthetic set far above chance, and the parameter servers
// report their waits.
class ConsistencyRun : public AdamRun, public ::testing::WithParamInterface<const char*> {};

TEST_P(ConsistencyRun, TrainsFarAboveChance) {
  const std::string job =
      Manifest(dir_, std::string("epochs: 3, learningRate: 0.02, pushEvery: 50, ") + GetParam(),
               "parameterServer: {replicas: 2, shardBytes: 1024}, "
               "trainer: {replicas: 2, threads: 1}");
  Result r = Adam(dir_, "run " + job + " --output json -q");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << r.out;
  EXPECT_EQ(j["epochs"].get<int>(), 3);
}

INSTANTIATE_TEST_SUITE_P(Modes, ConsistencyRun,
                         ::testing::Values("consistency: sync",
                                           "consistency: bounded, maxStaleness: 2",
                                           "consistency: async, denseUpdates: activations"));

// The newer layers (leakyRelu, avgpool, dropout, sigmoid) and a schedule with warmup train the
// synthetic set through each way updates travel: private thread weights with dense layers as
// activations and errors, shared weights with batches whose updates are held and pushed as
// deltas, and batches stepped with momentum and weight decay (a velocity per worker thread).
class LayersRun : public AdamRun, public ::testing::WithParamInterface<const char*> {};

TEST_P(LayersRun, TrainsFarAboveChance) {
  const std::string path = Manifest(
      dir_,
      std::string("epochs: 3, learningRate: 0.02, pushEvery: 50, warmupEpochs: 1, "
                  "learningRateSchedule: {type: cosine, final: 0.1}, ") +
          GetParam(),
      "parameterServer: {replicas: 2, shardBytes: 1024}, trainer: {replicas: 2, threads: 2}");
  std::string m = testing::ReadText(path);
  const std::string from =
      "      - {type: conv, maps: 4, kernel: 3, activation: tanh}\n"
      "      - {type: maxpool, size: 2}\n"
      "      - {type: dense, units: 16, activation: relu}\n";
  const size_t at = m.find(from);
  ASSERT_NE(at, std::string::npos) << m;
  m.replace(at, from.size(),
            "      - {type: conv, maps: 4, kernel: 3, activation: leakyRelu}\n"
            "      - {type: avgpool, size: 2}\n"
            "      - {type: dropout, rate: 0.1}\n"
            "      - {type: dense, units: 16, activation: sigmoid}\n"
            "      - {type: dropout, rate: 0.2}\n");
  std::ofstream(path) << m;
  Result r = Adam(dir_, "run " + path + " --output json -q");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << r.out;
  EXPECT_EQ(j["epochs"].get<int>(), 3);
}

INSTANTIATE_TEST_SUITE_P(UpdatePaths, LayersRun,
                         ::testing::Values("threadWeights: private, denseUpdates: activations",
                                           "batchSize: 4, applyEvery: 2, denseUpdates: weights",
                                           "batchSize: 4, momentum: 0.9, weightDecay: 0.0005"));

// spec.training.communication: the significantly-modified filter with half-precision,
// zstd-compressed updates and pulls trains the synthetic set as well as plain floats, with fewer
// bytes each way (the trainers' own counts, in the summary).
TEST_F(AdamRun, FilteredHalfPrecisionCompressedUpdatesTrainAsPlainOnesDo) {
  const auto run = [&](const std::string& communication) {
    const std::string job = Manifest(
        dir_, "epochs: 3, learningRate: 0.02, pushEvery: 50, denseUpdates: weights" + communication,
        "parameterServer: {replicas: 2, shardBytes: 1024}, trainer: {replicas: 2, threads: 1}");
    Result r = Adam(dir_, "run " + job + " --output json -q");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  };
  const nlohmann::json plain = run("");
  const nlohmann::json packed =
      run(", communication: {filter: 0.002, values: float16, compress: zstd}");
  ASSERT_TRUE(plain.contains("push_bytes_per_image")) << plain;
  ASSERT_TRUE(packed.contains("push_bytes_per_image")) << packed;
  std::printf(
      "push/pull bytes per image: plain %.0f/%.0f, packed %.0f/%.0f\n",
      plain["push_bytes_per_image"].get<double>(), plain["pull_bytes_per_image"].get<double>(),
      packed["push_bytes_per_image"].get<double>(), packed["pull_bytes_per_image"].get<double>());
  EXPECT_GT(packed["test_accuracy"].get<double>(), 0.9) << packed;
  EXPECT_GT(plain["test_accuracy"].get<double>(), 0.9) << plain;
  // Half precision alone halves both; the filter and zstd take pushes further. A pull carries
  // the whole model, half as many bytes in float16, but how many pulls an image costs moves with
  // how well the syncs keep up with training (a sync starts once pushEvery images are in, and a
  // slower one lets more in first), so the pulls' ratio has a margin: 0.48-0.54 in eight runs on
  // an idle 2-core machine, 0.62 in one beside a compile; float32 with zstd alone 1.03-1.08.
  EXPECT_LT(packed["push_bytes_per_image"].get<double>(),
            0.4 * plain["push_bytes_per_image"].get<double>())
      << plain << packed;
  EXPECT_LT(packed["pull_bytes_per_image"].get<double>(),
            0.7 * plain["pull_bytes_per_image"].get<double>())
      << plain << packed;
}

// spec.roles.trainer.modelWorkers: each replica's model split across two processes (two lanes
// each) trains the synthetic set as the whole model does; the model worker runs as its own role
// instance, pushes and pulls its slice to the shards' primaries itself (the controller's map
// routes it, as it routes the trainer) and stops when its trainer is done.
TEST_F(AdamRun, ASplitReplicaTrainsAsAWholeOneDoes) {
  const auto run = [&](const std::string& trainer) {
    const std::string job = Manifest(dir_, "epochs: 3, learningRate: 0.02, pushEvery: 50",
                                     "controller: {replicas: 1}, parameterServer: {replicas: 2, "
                                     "shardBytes: 1024, copies: 2}, trainer: " +
                                         trainer);
    return Adam(dir_, "run " + job + " --output json");
  };
  const Result whole = run("{replicas: 1, threads: 2}");
  const Result split = run("{replicas: 1, threads: 2, modelWorkers: 2}");
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  ASSERT_EQ(split.exit_code, 0) << split.err;
  const auto w = nlohmann::json::parse(whole.out), s = nlohmann::json::parse(split.out);
  EXPECT_GT(w["test_accuracy"].get<double>(), 0.9) << whole.out;
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.9) << split.out;
  EXPECT_EQ(s["epochs"].get<int>(), 3);
  EXPECT_THAT(split.err, HasSubstr("[trainer-0-w1]"));
  EXPECT_THAT(whole.err, Not(HasSubstr("-w1]")));
  // Both sent their updates: the split replica's bytes are its workers' pushes.
  EXPECT_GT(s["push_bytes_per_image"].get<double>(), 0) << split.out;
}

// A split replica is one unit: a model worker killed for good fails its lead, and adam run
// starts the whole replica again (as the operator replaces its pods), which rejoins where the
// job is and trains it to the end. 12 epochs took 25 s beside the other tests, 78 s under ASan:
// there half as many still outlast the kill at 1 s by half a minute.
TEST_F(AdamRun, ASplitReplicaWhoseWorkerIsKilledStartsAgainWhole) {
  constexpr int kEpochs = kSanitizerBuild ? 6 : 12;
  const std::string job = Manifest(
      dir_, KillJobTraining(kEpochs),
      "parameterServer: {replicas: 2, shardBytes: 1024}, trainer: {replicas: 1, threads: 2, "
      "modelWorkers: 2}");
  const Result r = Adam(dir_, "run " + job + " --output json --kill trainer-0-w1@1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("epochs").get<int>(), kEpochs) << r.out;
  EXPECT_GT(j.at("test_accuracy").get<double>(), 0.9) << r.out;
  EXPECT_THAT(r.err, HasSubstr("kill -9 trainer-0-w1"));
  EXPECT_THAT(r.err, HasSubstr("; restarting split replica trainer-0 whole (1 of 3 times)"));
  EXPECT_THAT(r.err, HasSubstr("adam run: restarting trainer-0-w1"));
  EXPECT_THAT(r.err, HasSubstr("adam run: restarting trainer-0 at"));
}

TEST_F(AdamRun, TargetAccuracyEndsTheJobEarly) {
  const std::string job = Manifest(dir_, "epochs: 50, learningRate: 0.02, targetAccuracy: 0.6",
                                   "trainer: {replicas: 1, threads: 2}");
  Result r = Adam(dir_, "run " + job + " --output json -q");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GE(j["test_accuracy"].get<double>(), 0.6);
  EXPECT_LT(j["epochs"].get<int>(), 50);
}

// A request rate too small to time (its interval would overflow the clock) or over the bound is a
// usage error naming the flag; 0 (no limit) and the bounds themselves pass the check. (Flags are
// checked before --help is answered.)
TEST_F(AdamRun, TheOperatorsRequestRateIsBounded) {
  for (const char* bad : {"1e-12", "0.001", "20000", "fast"}) {
    Result r = Adam(dir_, std::string("operator --kube-api-qps ") + bad + " --help");
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_THAT(r.err, HasSubstr("is not 0 (no limit) or from 0.01 to 10000")) << bad;
  }
  for (const char* good : {"0", "0.01", "10000"}) {
    Result r = Adam(dir_, std::string("operator --kube-api-qps ") + good + " --help");
    EXPECT_EQ(r.exit_code, 0) << good << ": " << r.err;
  }
}

TEST_F(AdamRun, ValidateNamesEveryBadFieldAndExits2) {
  std::string job = Manifest(dir_, "epochs: 0", "trainer: {threads: -1}");
  Result r = Adam(dir_, "validate " + job);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("spec.training.epochs: must be > 0, got 0"));
  EXPECT_THAT(r.err, HasSubstr("spec.roles.trainer.threads: must be > 0, got -1"));
  Result run = Adam(dir_, "run " + job);
  EXPECT_EQ(run.exit_code, 2);
  Result ok = Adam(dir_, "validate " + Manifest(dir_, "epochs: 1", "trainer: {replicas: 1}"));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// `adam render -o json` (what make multihost runs as containers) is the YAML render's objects
// as one JSON list: every object's kind and name in the YAML, one YAML document per object.
TEST_F(AdamRun, RenderAsJsonListsTheObjectsTheYamlHolds) {
  const std::string job = Manifest(dir_, "epochs: 1", "trainer: {replicas: 2}");
  Result json = Adam(dir_, "render -o json " + job);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto list = nlohmann::json::parse(json.out);
  ASSERT_TRUE(list.is_array());
  Result yaml = Adam(dir_, "render " + job);
  ASSERT_EQ(yaml.exit_code, 0) << yaml.err;
  std::string names;
  for (const auto& o : list) {
    const std::string name = o["metadata"]["name"].get<std::string>();
    EXPECT_THAT(yaml.out, HasSubstr("kind: " + o["kind"].get<std::string>()));
    EXPECT_THAT(yaml.out, HasSubstr("name: " + name));
    names += o["kind"].get<std::string>() + "/" + name + " ";
  }
  // One document per object: a top-level `kind:` line each.
  size_t documents = 0;
  std::istringstream lines(yaml.out);
  for (std::string line; std::getline(lines, line);) documents += line.rfind("kind: ", 0) == 0;
  EXPECT_EQ(documents, list.size());
  EXPECT_THAT(names, HasSubstr("Pod/"));
  EXPECT_THAT(names, HasSubstr("-trainer-1 "));
  Result bad = Adam(dir_, "render -o xml " + job);
  EXPECT_EQ(bad.exit_code, 2);
}

TEST_F(AdamRun, CorruptDataFileStopsTheRunNamingFileAndOffset) {
  // Truncate the training images: the data server must name the file and the byte.
  auto bytes = data::ReadMaybeGzip(dir_.File("train-images.gz"));
  ASSERT_TRUE(bytes.ok());
  std::ofstream(dir_.File("train-images.gz"), std::ios::binary) << bytes->substr(0, 1000);
  const std::string job = Manifest(dir_, "epochs: 1", "trainer: {replicas: 1}");
  Result r = Adam(dir_, "run " + job, 60);
  EXPECT_EQ(r.exit_code, 2) << "refused input, as a bad manifest field";
  EXPECT_THAT(r.err, HasSubstr("data-server-0 exited with code 2"));
  EXPECT_THAT(r.err, HasSubstr(dir_.File("train-images.gz") +
                               ": byte 16: expected 172800 data bytes, file has 984 (truncated)"));
}

// A file that cannot be opened may yet appear (a volume still mounting): exit 1, not 2.
TEST_F(AdamRun, MissingDataFileIsNamed) {
  std::remove(dir_.File("test-labels").c_str());
  const std::string job = Manifest(dir_, "epochs: 1", "trainer: {replicas: 1}");
  Result r = Adam(dir_, "run " + job, 60);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(dir_.File("test-labels") + ": cannot open"));
}

// Starts `adam run` in the background, stderr to a file (and $TMPDIR, when given); returns its pid.
pid_t StartRun(const std::string& job, const std::string& err_path,
               const std::string& tmpdir = "") {
  const pid_t pid = fork();
  if (pid == 0) {
    if (!tmpdir.empty()) setenv("TMPDIR", tmpdir.c_str(), 1);
    freopen(err_path.c_str(), "w", stderr);
    freopen("/dev/null", "w", stdout);
    execl(ADAM_BINARY, ADAM_BINARY, "run", job.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Pids of processes whose command line contains `needle` (no regex characters in it).
std::vector<pid_t> Pgrep(const std::string& needle) {
  std::vector<pid_t> pids;
  // "[x]yz" matches "xyz" but not the shell running this pgrep, whose command line has "[x]yz".
  const std::string pattern = "[" + needle.substr(0, 1) + "]" + needle.substr(1);
  FILE* p = popen(("pgrep -f -- '" + pattern + "'").c_str(), "r");
  for (int pid; p && fscanf(p, "%d", &pid) == 1;) pids.push_back(pid);
  if (p) pclose(p);
  return pids;
}

int WaitExit(pid_t pid, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -2;
}

TEST_F(AdamRun, KilledParameterServerStopsEveryRoleWithAClearError) {
  const std::string job = Manifest(dir_, "epochs: 1000, learningRate: 0.01",
                                   "parameterServer: {replicas: 2}, trainer: {replicas: 1}");
  const std::string err = dir_.File("run.err");
  const pid_t run = StartRun(job, err);
  ASSERT_TRUE(testing::WaitForText(err, "epoch   1/1000", std::chrono::seconds(120)))
      << testing::ReadText(err);
  auto ps = Pgrep("ps --job " + job + " --name ps-1");
  ASSERT_EQ(ps.size(), 1u);
  // As if it crashed: it says so with its stack (core/crash.h), and the run shows the end of it.
  // (A sanitizer reports a SIGSEGV its own way and exits 1: there, a SIGKILL.)
  kill(ps[0], kSanitizerBuild ? SIGKILL : SIGSEGV);
  EXPECT_EQ(WaitExit(run, 60), 1);
  const std::string said = testing::ReadText(err);
  if (kSanitizerBuild) {
    EXPECT_THAT(said, HasSubstr("ps-1 was killed by signal Killed"));
  } else {
    EXPECT_THAT(said, HasSubstr("ps-1 was killed by signal Segmentation fault"));
    EXPECT_THAT(said, ::testing::ContainsRegex(
                          "fatal signal 11 \\(SIGSEGV\\) in thread [0-9]+ \\(its stack above\\)"));
  }
  EXPECT_TRUE(Pgrep("--job " + job).empty()) << "children left behind";
}

// The files a run made in $TMPDIR (its state directory holds the TLS key and a Raft log).
std::vector<std::string> Leftovers(const std::string& tmpdir) {
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(tmpdir))
    left.push_back(e.path().filename());
  return left;
}

// A learning rate at which SGD diverges: the trainer sees the loss explode, the run stops with a
// message naming the epoch, the loss and the rate, exits 3, and leaves nothing behind.
TEST_F(AdamRun, ADivergingRunStopsNamingTheEpochTheLossAndTheRate) {
  const std::string tmp = dir_.File("tmp");
  std::filesystem::create_directories(tmp);
  const std::string job =
      Manifest(dir_, "epochs: 30, learningRate: 10", "trainer: {replicas: 2, threads: 1}");
  Result r = Adam(dir_, "run " + job, 240, "TMPDIR=" + tmp);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("training diverged in epoch"));
  EXPECT_THAT(r.err,
              HasSubstr("at learning rate 10 with batch size 1; lower spec.training.learningRate"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("epoch  30/30")));
  EXPECT_THAT(Leftovers(tmp), ::testing::IsEmpty());
  EXPECT_TRUE(Pgrep("--job " + job).empty()) << "children left behind";
}

// Outputs are checked before anything runs.
TEST_F(AdamRun, AReportThatCannotBeWrittenIsRefusedBeforeTraining) {
  const std::string job = Manifest(dir_, "epochs: 2", "trainer: {replicas: 1}");
  Result r = Adam(dir_, "run " + job + " --report /proc/self/adam-report", 30);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--report /proc/self/adam-report: cannot write there"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("epoch   1/")));
}

// One run per --state-dir: a second is refused at once, naming the holder.
TEST_F(AdamRun, ASecondRunOnTheSameStateDirIsRefusedNamingTheFirst) {
  const std::string state = dir_.File("state");
  std::filesystem::create_directories(state);
  const int fd = open((state + "/.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);  // the first run, as far as the second can tell
  const std::string holder = "pid 4242, job first\n";
  ASSERT_EQ(write(fd, holder.data(), holder.size()), ssize_t(holder.size()));
  const std::string job = Manifest(dir_, "epochs: 1", "trainer: {replicas: 1}");
  Result r = Adam(dir_, "run " + job + " --state-dir " + state, 30);
  close(fd);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--state-dir " + state +
                               " is in use by another adam run (pid 4242, job first)"));
  EXPECT_FALSE(std::filesystem::exists(state + "/tls"))
      << "the second run touched the first's files";
}

// A terminal that hangs up, and a reader that closes the pipe: the roles stop and the run's
// temporary directory (with its TLS key) goes.
TEST_F(AdamRun, AHangUpOrAClosedPipeLeavesNothingBehind) {
  const std::string tmp = dir_.File("tmp");
  std::filesystem::create_directories(tmp);
  const std::string job = Manifest(dir_, "epochs: 1000", "trainer: {replicas: 1}");
  const std::string err = dir_.File("run.err");
  const pid_t run = StartRun(job, err, tmp);
  ASSERT_TRUE(testing::WaitForText(err, "epoch   1/1000", std::chrono::seconds(120)))
      << testing::ReadText(err);
  kill(run, SIGHUP);
  EXPECT_EQ(WaitExit(run, 30), 128 + SIGHUP);
  EXPECT_THAT(Leftovers(tmp), ::testing::IsEmpty());
  EXPECT_TRUE(Pgrep("--job " + job).empty()) << "children left behind";
  // `adam run ... 2>&1 | head -c 1`: the reader goes after one byte.
  const std::string cmd =
      "cd " + dir_.path() + " && TMPDIR=" + tmp + " timeout 120 " ADAM_BINARY " run " + job +
      " 2>&1 | head -c 1 > /dev/null; echo ${PIPESTATUS[0]} > " + dir_.File("pipe.rc");
  ASSERT_EQ(std::system(("bash -c '" + cmd + "'").c_str()), 0);
  EXPECT_EQ(testing::ReadText(dir_.File("pipe.rc")), std::to_string(128 + SIGPIPE) + "\n");
  EXPECT_THAT(Leftovers(tmp), ::testing::IsEmpty());
  EXPECT_TRUE(Pgrep("--job " + job).empty()) << "children left behind";
}

// A usage error is exit 2, as an invalid manifest is; --help is not an error.
TEST_F(AdamRun, UsageErrorsExit2) {
  EXPECT_EQ(Adam(dir_, "run --no-such-flag", 10).exit_code, 2);
  EXPECT_EQ(Adam(dir_, "no-such-command", 10).exit_code, 2);
  EXPECT_EQ(Adam(dir_, "--help", 10).exit_code, 0);
}

TEST_F(AdamRun, InterruptStopsEveryRole) {
  const std::string job = Manifest(dir_, "epochs: 1000", "trainer: {replicas: 2}");
  const std::string err = dir_.File("run.err");
  const pid_t run = StartRun(job, err);
  // Any epoch's progress line: with two trainers, trainer 0 (whose lines are shown) starts
  // where the job is, at epoch 2 or later when trainer 1 finished epoch 1 before it joined.
  ASSERT_TRUE(testing::WaitForText(err, "/1000  loss", std::chrono::seconds(120)))
      << testing::ReadText(err);
  kill(run, SIGINT);
  EXPECT_EQ(WaitExit(run, 30), 130);
  EXPECT_THAT(testing::ReadText(err), HasSubstr("interrupted"));
  EXPECT_TRUE(Pgrep("--job " + job).empty()) << "children left behind";
}

}  // namespace
}  // namespace adam

namespace adam {
namespace {

// With three copies of every shard and a controller group, the job survives kill -9 of a
// parameter server (its shards fail over to their freshest copies) and of the controller leader.
constexpr const char* kCopiesRoles =
    "controller: {replicas: 3}, parameterServer: {replicas: 3, shardBytes: 1024, copies: 3}, "
    "trainer: {replicas: 2, threads: 1}";

// The model a folder job wrote, used as a user would: its metadata (read by ONNX's own library,
// after OpenCV's runtime loaded it) names the classes and the fit; `adam predict` names the class
// of images of other sizes and kinds, fitted as the test set was; `adam evaluate --folder` scores
// the folder by class.
void ExpectTheFolderModelSpeaksItsClasses(const testing::TmpDir& dir, const std::string& root,
                                          const std::string& model) {
  const std::string meta = dir.File("meta.json");
  const std::string cmd = "/usr/bin/python3 " ADAM_SOURCE_DIR
                          "/tests/libs/model/onnx_runtime.py metadata " +
                          model + " > " + meta;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto m = nlohmann::json::parse(testing::ReadText(meta));
  EXPECT_EQ(m.value("classes", ""), R"(["class-0","class-1","class-2","class-3"])") << m;
  EXPECT_EQ(m.value("fit", ""), "crop");
  EXPECT_EQ(m.value("crop_margin", ""), "1");
  EXPECT_EQ(m.value("input_channels", ""), "grey");
  // The first 10 images of each class as colour PNG files scaled up 3 times (36x36) and as JPEG
  // files of 30x24 (stretched), in a folder of their own: most are named right.
  auto images = data::ReadIdx(dir.File("train-images.gz"));
  auto labels = data::ReadIdx(dir.File("train-labels"));
  ASSERT_TRUE(images.ok() && labels.ok());
  const std::string other = dir.File("other-sizes");
  std::filesystem::create_directories(other);
  std::map<int, int> taken;
  for (size_t i = 0; i < labels->data.size(); ++i) {
    const int c = labels->data[i];
    if (taken[c]++ >= 10) continue;
    std::vector<uint8_t> big, wide;
    for (int y = 0; y < 36; ++y)
      for (int x = 0; x < 36; ++x)
        big.insert(big.end(), 3, images->data[i * 144 + (y / 3) * 12 + x / 3]);
    for (int y = 0; y < 24; ++y)
      for (int x = 0; x < 30; ++x) wide.push_back(images->data[i * 144 + (y / 2) * 12 + x * 2 / 5]);
    const std::string name = other + "/" + std::to_string(i) + "-class-" + std::to_string(c);
    testing::WritePng(name + ".png", 36, 36, 3, big);
    testing::WriteJpeg(name + ".JPG", 30, 24, 1, wide);
  }
  Result p = Adam(dir, "predict " + model + " " + other + " --top 3 -o json");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto rows = nlohmann::json::parse(p.out);
  ASSERT_EQ(rows.size(), 80u);
  int right = 0;
  for (const auto& r : rows) {
    const std::string file = r["file"];
    right += file.find("-" + r["class"].get<std::string>() + ".") != std::string::npos;
    EXPECT_EQ(r["top"].size(), 3u);
    EXPECT_GE(r["top"][0]["probability"].get<double>(), r["top"][1]["probability"].get<double>());
  }
  EXPECT_GE(right, 68) << p.out;  // 85%
  const std::string one = other + "/" + rows[0]["file"].get<std::string>().substr(other.size() + 1);
  Result text = Adam(dir, "predict " + model + " " + one);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, ::testing::StartsWith(one + ": class-"));
  EXPECT_THAT(text.out, ::testing::ContainsRegex("\\), then class-[0-3] \\(0\\.[0-9]+\\)\n$"));
  // The whole folder, by class: as well as training scored its held-out part.
  Result e = Adam(dir, "evaluate " + model + " --folder " + root + " -o json");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto ej = nlohmann::json::parse(e.out);
  EXPECT_EQ(ej["images"].get<int>(), 1200);
  EXPECT_GT(ej["accuracy"].get<double>(), 0.9);
  ASSERT_EQ(ej["classes"].size(), 4u);
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(ej["classes"][c]["class"], "class-" + std::to_string(c));
    EXPECT_GT(ej["classes"][c]["recall"].get<double>(), 0.8) << e.out;
    EXPECT_GT(ej["classes"][c]["precision"].get<double>(), 0.8) << e.out;
  }
  Result et = Adam(dir, "evaluate " + model + " --folder " + root);
  ASSERT_EQ(et.exit_code, 0) << et.err;
  EXPECT_THAT(et.out, HasSubstr("precision   recall\nclass-0 "));
  EXPECT_THAT(et.err, HasSubstr("skipped " + root + "/class-1/broken.png"));
  // A class the model does not know is named.
  std::filesystem::create_directories(dir.File("zoo/zebra"));
  std::filesystem::copy_file(rows[0]["file"].get<std::string>(), dir.File("zoo/zebra/a.jpg"));
  Result zoo = Adam(dir, "evaluate " + model + " --folder " + dir.File("zoo"));
  EXPECT_EQ(zoo.exit_code, 2);
  EXPECT_THAT(zoo.err, HasSubstr("class folder \"zebra\" is not one of the model's 4 classes"));
}

// The synthetic set as an image folder (under class-0 .. class-3) in the kinds a user's folder
// holds (PNG of 8 and 16 bits and with a palette, JPEG baseline, progressive, CMYK and turned by
// EXIF, upper-case extensions, nested folders: image_kinds.py vary), with two broken files and
// a text file: the data server skips and names the broken ones only, holds out a fifth of each
// class as the test set, trains on random crops, and the job trains far above chance, naming its
// classes; over maxCorrupt it refuses the folder naming the count.
TEST_F(AdamRun, AnImageFolderTrainsAndItsBrokenFilesAreSkipped) {
  const std::string root = dir_.File("folder");
  testing::WriteFolderFromIdx(dir_.File("train"), root);
  const std::string vary =
      "/usr/bin/python3 " ADAM_SOURCE_DIR "/tests/libs/data/image_kinds.py vary " + root;
  ASSERT_EQ(std::system(vary.c_str()), 0) << vary;
  std::ofstream(root + "/class-1/broken.png") << "\x89PNG not really";
  std::ofstream(root + "/class-2/cut.jpg") << "\xff\xd8\xff\xe0 cut short";
  std::ofstream(root + "/README.txt") << "not a class folder: a file";
  std::ofstream(root + "/class-0/notes.txt") << "ignored";
  auto manifest = [&](const std::string& extra) {
    std::string text =
        testing::ReadText(Manifest(dir_, "epochs: 30, learningRate: 0.02, pushEvery: 50",
                                   "trainer: {replicas: 2, threads: 1}"));
    const size_t from = text.find("    train:"), to = text.find("    augment:");
    text.replace(
        from, to - from,
        "    format: folder\n    train: {folder: " + root + "}\n" + "    heldOut: 0.2\n" + extra);
    // Random 12x12 windows of the images fitted to 14x14 (and the test set's centre windows).
    text.replace(text.find("variants: 2}"), 12, "variants: 2, crop: 1}");
    const std::string path = dir_.File("folder.yaml");
    std::ofstream(path) << text;
    return path;
  };
  const std::string model = dir_.File("folder.onnx");
  Result r = Adam(dir_, "run " + manifest("") + " --output json --model-out " + model, 240);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["epochs"].get<int>(), 30) << r.out;
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << r.out;
  ASSERT_EQ(j["classes"].size(), 4u) << r.out;
  int held = 0;
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(j["classes"][c]["name"], "class-" + std::to_string(c));
    held += j["classes"][c]["images"].get<int>();
  }
  EXPECT_EQ(held, 240);
  EXPECT_THAT(r.err,
              HasSubstr("skipped " + root + "/class-1/broken.png: not a PNG libpng can read"));
  EXPECT_THAT(r.err, HasSubstr("skipped " + root + "/class-2/cut.jpg: JPEG"));
  EXPECT_THAT(r.err,
              HasSubstr("skipped 2 files that could not be decoded (spec.dataset.maxCorrupt 100)"));
  EXPECT_THAT(r.err, HasSubstr("ignored 1 files that are not .png, .jpg or .jpeg"));
  EXPECT_THAT(r.err, HasSubstr("classes: class-0, class-1, class-2, class-3"));
  EXPECT_THAT(r.err, HasSubstr("held out 240 of 1200 images as the test set"));
  EXPECT_THAT(r.err, HasSubstr("decoding: 100% of 1202 images"));
  ExpectTheFolderModelSpeaksItsClasses(dir_, root, model);

  Result strict = Adam(dir_, "run " + manifest("    maxCorrupt: 1\n") + " -q", 60);
  EXPECT_EQ(strict.exit_code, 2) << "refused input, as a bad manifest field\n" << strict.err;
  EXPECT_THAT(strict.err,
              HasSubstr("2 of 1202 images could not be decoded, more than maxCorrupt (1)"));
}

// A job goes on where its checkpoints are: 20 epochs with --state-dir, then the manifest raised
// to 40 epochs and --resume: the second run trains epochs 21-40 only, at the learning rate the
// schedule gives epoch 21; a third finds nothing left to train and scores the model it holds.
// With copies every server of the second run is a new process: each shard waits for its copies
// to come back with their checkpoints instead of being failed over to nobody.
class ResumedRun : public AdamRun, public ::testing::WithParamInterface<const char*> {};

TEST_P(ResumedRun, GoesOnAtTheEpochsItsCheckpointsHold) {
  const std::string state = dir_.File("state");
  const std::string training =
      "learningRate: 0.02, learningRateDecay: 0.95, pushEvery: 50, epochs: ";
  const std::string roles = GetParam();
  Result empty =
      Adam(dir_, "run " + Manifest(dir_, training + "20", roles) + " --resume " + state, 60);
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_THAT(empty.err,
              HasSubstr("--resume " + state + ": no checkpoint of parameter server ps-0 in " +
                        state + "/ps-0"));
  Result first = Adam(
      dir_, "run " + Manifest(dir_, training + "20", roles) + " --output json --state-dir " + state,
      240);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto j1 = nlohmann::json::parse(first.out);
  ASSERT_EQ(j1.at("epochs").get<int>(), 20);
  EXPECT_FALSE(j1.contains("resumed_after_epoch"));

  Result second = Adam(
      dir_, "run " + Manifest(dir_, training + "40", roles) + " --output json --resume " + state,
      240);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const auto j2 = nlohmann::json::parse(second.out);
  EXPECT_EQ(j2.at("epochs").get<int>(), 40) << second.out;
  // value(), not at(): a missing key fails with both outputs shown (it did once in CI-like load,
  // where at() threw and hid them).
  EXPECT_EQ(j2.value("resumed_after_epoch", -1), 20) << second.out << second.err;
  EXPECT_GT(j2.at("test_accuracy").get<double>(), 0.9) << second.out;
  EXPECT_THAT(second.err, HasSubstr("adam run: resuming: the checkpoints in " + state +
                                    " hold 20 of 40 epochs"));
  char rate[64];
  std::snprintf(rate, sizeof rate, "going on at epoch 21 of 40 (learning rate %g)",
                0.02 * std::pow(0.95, 20));
  EXPECT_THAT(second.err, HasSubstr(rate));
  // The progress lines are trainer 0's: its first is epoch 21's, or a later one's where trainer
  // 0 started after trainer 1 had ended epoch 21 and so joined where the job was.
  // The epoch a trainer said it went on at, or -1 where it said nothing of it.
  const auto went_on_at = [](const std::string& err, const std::string& trainer) {
    std::smatch m;
    const std::regex joined("\\[" + trainer + "\\] .*going on at epoch ([0-9]+) of");
    return std::regex_search(err, m, joined) ? std::stoi(m[1].str()) : -1;
  };
  const int said = went_on_at(second.err, "trainer-0");
  const int t0_from = said < 0 ? 21 : said;
  EXPECT_GE(t0_from, 21) << second.err;
  EXPECT_THAT(second.err, HasSubstr("epoch  " + std::to_string(t0_from) + "/40"));
  EXPECT_THAT(second.err, Not(HasSubstr("epoch  20/40")));
  // Each run trained 20 epochs, each trainer its whole share (600 images) of every epoch from
  // the one it started at (a trainer that starts after the job finished an epoch joins where the
  // job is, saying so) to the last (with two trainers the quorum is both, so no epoch closes
  // early): trainer 0 waits at the last epoch for trainer 1 (before it did, one first run under
  // ASan counted 17,312: trainer 1 eleven epochs behind). Only when that wait ran out (a
  // warning) may trainer 1 have done less. A resume that trained the whole schedule again would
  // count up to 40 epochs' images.
  const auto expected = [&went_on_at](const std::string& err, int first, int last) {
    int64_t images = 0;
    for (const std::string t : {"trainer-0", "trainer-1"}) {
      const int said = went_on_at(err, t);
      const int from = said < 0 ? first : said - 1;
      images += int64_t(last - from) * 600;
    }
    return images;
  };
  for (const auto& [j, r, start] : {std::tuple{&j1, &first, 0}, std::tuple{&j2, &second, 20}}) {
    const int64_t images = j->at("images").get<int64_t>();
    if (r->err.find("trainers had finished it after") == std::string::npos) {
      EXPECT_EQ(images, expected(r->err, start, start + 20)) << r->out << r->err;
    } else {
      EXPECT_GE(images, 20 * 1200 / 2) << r->out;
      EXPECT_LE(images, 20 * 1200) << r->out;
    }
  }

  Result third = Adam(
      dir_, "run " + Manifest(dir_, training + "40", roles) + " --output json --resume " + state,
      120);
  ASSERT_EQ(third.exit_code, 0) << third.err;
  const auto j3 = nlohmann::json::parse(third.out);
  EXPECT_EQ(j3.at("epochs").get<int>(), 40) << third.out;
  EXPECT_EQ(j3.at("images").get<int>(), 0) << third.out;
  EXPECT_GT(j3.at("test_accuracy").get<double>(), 0.9) << third.out;
  EXPECT_THAT(third.err, HasSubstr("hold 40 of 40 epochs (nothing left to train)"));
}

INSTANTIATE_TEST_SUITE_P(Copies, ResumedRun,
                         ::testing::Values("trainer: {replicas: 2, threads: 1}", kCopiesRoles),
                         [](const auto& info) { return info.index == 0 ? "One" : "Three"; });

// With copies a failover loses only updates never acknowledged, at most the one push each
// trainer has in flight: no pull reads a shard more updates under a version its trainer read
// before than there are trainers (the summary's "pulls_fell_back").
void ExpectNoAcknowledgedUpdateMissing(const nlohmann::json& summary, int trainers) {
  if (!summary.contains("pulls_fell_back")) return;
  EXPECT_LE(summary["pulls_fell_back"].value("largest", int64_t{0}), trainers) << summary;
}

TEST_F(AdamRun, KilledPrimaryParameterServerFailsOverAndTrainingGoesOn) {
  const std::string job = Manifest(dir_, kFailoverTraining, kCopiesRoles);
  Result r = Adam(dir_, "run " + job + " --output json -q --kill ps-0@1", 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << r.out;
  EXPECT_EQ(j["epochs"].get<int>(), kFailoverEpochs);
  ASSERT_TRUE(j.contains("failover_ms")) << r.out << r.err;
  EXPECT_GE(j["shards_promoted"].get<int>(), 1);
  // Detection takes the controller's 500 ms server timeout; the rest is routing.
  EXPECT_GT(j["failover_first_ms"].get<int64_t>(), 400);
  EXPECT_LT(j["failover_ms"].get<int64_t>(), 5000) << "(target < 1 s; loose here for shared CI)";
  EXPECT_THAT(r.err, HasSubstr("kill -9 ps-0"));
  // One failover, named once, whose moved shards are counted once each.
  EXPECT_THAT(r.err, HasSubstr("adam run: failover: ps-0 lost; "));
  EXPECT_EQ(j.value("failovers", 0), 1) << r.out;
  EXPECT_EQ(r.err.find("adam run: failover: ps-0 lost; "),
            r.err.rfind("adam run: failover: ps-0 lost; "));
  ExpectNoAcknowledgedUpdateMissing(j, 2);
}

TEST_F(AdamRun, KilledControllerLeaderIsReplacedAndChaosEndsWithACompletedJob) {
  const std::string job = Manifest(dir_, kFailoverTraining, kCopiesRoles);
  // The leader dies and comes back; then a parameter server dies and comes back; then another.
  Result r = Adam(dir_,
                  "run " + job +
                      " --output json -q --kill controller-leader@1+1 "
                      "--kill ps-1@2+1 --kill ps-2@4+1",
                  300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << r.out;
  ASSERT_TRUE(j.contains("controller")) << r.out;
  EXPECT_THAT(r.err, HasSubstr("restarting ps-1"));
  EXPECT_THAT(r.err, HasSubstr("restarting controller-"));
  // Every shard ends with all three copies in sync again.
  ASSERT_TRUE(j.contains("shard_map")) << r.out;
  EXPECT_EQ(j["shard_map"]["under_replicated"].get<int>(), 0) << r.out;
  EXPECT_GT(j["shard_map"]["version"].get<int>(), 6) << r.out;
  ExpectNoAcknowledgedUpdateMissing(j, 2);
}

// --chaos 15: a kill every 1-2 s for 15 s. The job completes with every copy in sync, and its
// report has a row per parameter-server failover and fault labels Chromium draws readably.
TEST_F(AdamRun, ChaosKillingRandomControllersAndServersEndsWithEveryCopyInSync) {
  // 200 epochs take 26 s on a quiet 2-core machine and 85 s on a slow one: the chaos must end
  // well inside the faster (a server killed 0.3 s before the end of 40 s of chaos left 7 shards
  // under-replicated in the summary). Under a sanitizer every
  // kill's restart is slow enough that even 80 epochs did not end within 400 s. The run of kills
  // and restarts above (KilledControllerLeaderIsReplacedAndChaosEndsWithACompletedJob) covers
  // failover and restart under the sanitizers; this one runs in `make test`.
  if (kSanitizerBuild) GTEST_SKIP() << "15 s of chaos and its report: too slow under a sanitizer";
  WriteSynthetic(dir_.File("train"), 12000, 1);  // epochs long enough to outlast the chaos
  const std::string job =
      Manifest(dir_, "epochs: 200, learningRate: 0.02, pushEvery: 50", kCopiesRoles);
  const std::string report = dir_.File("report");
  Result r = Adam(dir_, "run " + job + " --output json -q --chaos 15:3 --report " + report, 400);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << r.out;
  EXPECT_GE(j["chaos_faults"].get<int>(), 7) << r.out;
  ASSERT_TRUE(j.contains("shard_map")) << r.out;
  EXPECT_EQ(j["shard_map"]["under_replicated"].get<int>(), 0) << r.out << r.err;
  ExpectNoAcknowledgedUpdateMissing(j, 2);

  const std::string html = testing::ReadText(report + "/index.html");
  const auto count = [](const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
  };
  const size_t failovers = count(r.err, "adam run: failover: ps-");
  ASSERT_GE(failovers, 3u) << r.err;
  EXPECT_EQ(j.value("failovers", 0), int(failovers)) << r.out;
  EXPECT_EQ(count(html, "</td><td>failover: ps-"), failovers) << html;
  EXPECT_EQ(count(html, "</td><td>kill -9 "), size_t(j["chaos_faults"].get<int>())) << html;
  EXPECT_GE(count(html, "</td><td>under-replicated: "), 1u) << html;
  EXPECT_THAT(html, HasSubstr("<th>parameter-server failovers</th><td>" +
                              std::to_string(failovers) + "</td>"));
  const std::string chromium = testing::Chromium();
  if (chromium.empty())
    GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh installs it)";
  std::string error;
  const std::string layout = testing::BadgeLayout(chromium, html, dir_, &error);
  ASSERT_TRUE(error.empty()) << error;
  EXPECT_EQ(count(layout, "\n"), 2u) << layout;  // a line per chart, no problem named
}

// Trainer 0 evaluates after every epoch; killed while trainer 1 trains on, the job's result is
// the final model's accuracy, measured by an evaluator, not trainer 0's last evaluation.
// The model file `--model-out` names holds the model whose accuracy the summary reports: Adam's
// own `adam evaluate` and OpenCV's ONNX runtime (after ONNX's checker) get it right to the image.
void ExpectTheModelScores(const testing::TmpDir& dir, const nlohmann::json& summary) {
  const std::string model = dir.File("out/model.onnx");
  EXPECT_EQ(summary.value("model", ""), model);
  const int expected = int(std::lround(summary["test_accuracy"].get<double>() * 300));
  Result e = Adam(dir, "evaluate " + model + " --images " + dir.File("test-images.gz") +
                           " --labels " + dir.File("test-labels") + " -o json");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  auto ej = nlohmann::json::parse(e.out);
  EXPECT_EQ(ej["images"].get<int>(), 300);
  EXPECT_EQ(ej["correct"].get<int>(), expected) << e.out;
  const std::string cmd = "/usr/bin/python3 " ADAM_SOURCE_DIR
                          "/tests/libs/model/onnx_runtime.py accuracy " +
                          model + " " + dir.File("test-images.gz") + " " + dir.File("test-labels") +
                          " > " + dir.File("opencv.json");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto oj = nlohmann::json::parse(testing::ReadText(dir.File("opencv.json")));
  EXPECT_EQ(oj["correct"].get<int>(), expected);
  Result p = Adam(dir, "predict " + model + " " + dir.File("test-images.gz") + " --first 3");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr(dir.File("test-images.gz") + "[2]: "));  // classes named 0-3
  // The first two test images as PNG files (one grey, one colour with equal channels, which
  // libpng turns back into the same grey) get the IDX images' probabilities.
  auto images = data::ReadIdx(dir.File("test-images.gz"));
  ASSERT_TRUE(images.ok());
  const size_t side = images->dims[1];
  std::vector<uint8_t> grey(images->data.begin(), images->data.begin() + long(side * side));
  std::vector<uint8_t> rgb;
  for (size_t k = 0; k < side * side; ++k) rgb.insert(rgb.end(), 3, images->data[side * side + k]);
  for (int i = 0; i < 2; ++i) {
    png_image png{};
    png.version = PNG_IMAGE_VERSION;
    png.width = png.height = uint32_t(side);
    png.format = i == 0 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    ASSERT_TRUE(png_image_write_to_file(&png, dir.File(std::to_string(i) + ".png").c_str(), 0,
                                        i == 0 ? grey.data() : rgb.data(), 0, nullptr))
        << png.message;
  }
  Result idx =
      Adam(dir, "predict " + model + " " + dir.File("test-images.gz") + " --first 2 -o json");
  ASSERT_EQ(idx.exit_code, 0) << idx.err;
  Result pngs = Adam(
      dir, "predict " + model + " " + dir.File("0.png") + " " + dir.File("1.png") + " -o json");
  ASSERT_EQ(pngs.exit_code, 0) << pngs.err;
  auto from_png = nlohmann::json::parse(pngs.out), from_idx = nlohmann::json::parse(idx.out);
  ASSERT_EQ(from_png.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(from_png[i]["file"], dir.File(std::to_string(i) + ".png"));
    EXPECT_EQ(from_idx[i]["file"], dir.File("test-images.gz") + "[" + std::to_string(i) + "]");
    from_png[i].erase("file");
    from_idx[i].erase("file");
  }
  EXPECT_EQ(from_png, from_idx);
  // A PNG of another size (the first image scaled up twice) is fitted, and classified alike; a
  // file that is no image is named, and the others are classified still.
  std::vector<uint8_t> twice;
  for (size_t y = 0; y < 2 * side; ++y)
    for (size_t x = 0; x < 2 * side; ++x) twice.push_back(grey[(y / 2) * side + x / 2]);
  testing::WritePng(dir.File("twice.png"), int(2 * side), int(2 * side), 1, twice);
  std::ofstream(dir.File("notes.txt")) << "not an image";
  Result other = Adam(dir, "predict " + model + " " + dir.File("twice.png") + " " +
                               dir.File("notes.txt") + " -o json");
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_THAT(other.err, HasSubstr(dir.File("notes.txt") + ": "));
  const auto fitted = nlohmann::json::parse(other.out);
  ASSERT_EQ(fitted.size(), 1u) << other.out;
  EXPECT_EQ(fitted[0]["class"], from_idx[0]["class"]);
}

// With spec.output.everyEpochs: 2 the model is also written after epochs 2 and 4 (over the same
// file); the last write is the final model. One trainer: with two, trainer 0 started late on a
// loaded machine (after the other had finished epochs of this job, a fraction of a second each)
// joins at the servers' epoch, as it should, and its history then starts there.
TEST_F(AdamRun, TheModelOutIsTheModelTheSummaryScores) {
  const std::string job = Manifest(dir_, "epochs: 5, learningRate: 0.02, pushEvery: 50",
                                   "trainer: {replicas: 1, threads: 1}");
  std::ofstream(job, std::ios::app) << "  output: {everyEpochs: 2}\n";
  const std::string model = dir_.File("out/model.onnx");
  Result r = Adam(dir_, "run " + job + " --output json --model-out " + model);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto summary = nlohmann::json::parse(r.out);
  ExpectTheModelScores(dir_, summary);
  // The summary's history: trainer 0's evaluation after each epoch, the last the job's result.
  const auto& history = summary["history"];
  ASSERT_EQ(history.size(), 5u) << r.out << r.err;
  for (size_t i = 0; i < history.size(); ++i) {
    EXPECT_EQ(history[i]["epoch"].get<int>(), int(i) + 1) << r.out;
    EXPECT_GT(history[i]["test_accuracy"].get<double>(), 0.3) << r.out;
    if (i > 0) {
      EXPECT_GE(history[i]["seconds"].get<double>(), history[i - 1]["seconds"].get<double>());
    }
  }
  EXPECT_EQ(history.back()["test_accuracy"].get<double>(), summary["test_accuracy"].get<double>());
  int writes = 0;
  for (size_t at = 0; (at = r.err.find("is in " + model, at)) != std::string::npos; ++at) ++writes;
  EXPECT_EQ(writes, 3) << r.err;
  // A model for other input is refused by name.
  Result e = Adam(dir_, "evaluate " + dir_.File("out/model.onnx") + " --images " +
                            dir_.File("test-labels") + " --labels " + dir_.File("test-labels"));
  EXPECT_EQ(e.exit_code, 2);
  EXPECT_THAT(e.err, HasSubstr(dir_.File("test-labels")));
  Result bad = Adam(dir_, "evaluate " + job + " --images x --labels y");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("not a serialised ModelProto"));
}

TEST_F(AdamRun, WithoutTrainer0TheFinalModelIsEvaluated) {
  const std::string job = Manifest(dir_, kRestartTraining, "trainer: {replicas: 2, threads: 1}");
  Result r = Adam(dir_,
                  "run " + job + " --output json -q --kill trainer-0@0.5 --model-out " +
                      dir_.File("out/model.onnx"),
                  240);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["epochs"].get<int>(), kRestartEpochs) << r.out;
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << r.out;
  EXPECT_THAT(r.err, HasSubstr("adam run: trainer-0 did not finish"));
  EXPECT_THAT(r.err, HasSubstr("evaluating the final model (epoch " +
                               std::to_string(kRestartEpochs) + ") with an evaluator"));
  EXPECT_THAT(r.err, HasSubstr("adam run: the final model: test accuracy "));
  // The evaluator wrote the final model, the one scored.
  ExpectTheModelScores(dir_, j);
}

// Whether the launcher's `kill` line came after the first progress line in `err` and before
// the last one (of `epochs`): the trainers were connected and still training when the role was
// killed. The first line need not be epoch 1: trainer 0 starts where the job is.
bool KilledMidTraining(const std::string& err, const std::string& kill, int epochs) {
  char last[32];
  char any[32];
  std::snprintf(last, sizeof last, "epoch %3d/%-3d", epochs, epochs);
  std::snprintf(any, sizeof any, "/%-3d  loss", epochs);
  const size_t first = err.find(any);
  const size_t killed = err.find(kill);
  const size_t end = err.find(last);
  return first != std::string::npos && killed != std::string::npos && first < killed &&
         (end == std::string::npos || killed < end);
}

// A trainer killed and restarted gets the data server's and the parameter servers' addresses
// the first one had, and the job completes.
TEST_F(AdamRun, ARestartedTrainerRejoinsTheJob) {
  const std::string job = Manifest(dir_, kRestartTraining, "trainer: {replicas: 2, threads: 1}");
  Result r = Adam(dir_, "run " + job + " --output json --kill trainer-1@0.5+0.5", 240);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["epochs"].get<int>(), kRestartEpochs) << r.out;
  if (KilledMidTraining(r.err, "kill -9 trainer-1",
                        kRestartEpochs)) {  // it starts where the job is
    EXPECT_THAT(r.err, ::testing::ContainsRegex("trainer-1\\] .* going on at epoch [0-9]+ of " +
                                                std::to_string(kRestartEpochs)));
  }
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << r.out;
  EXPECT_THAT(r.err, HasSubstr("adam run: restarting trainer-1"));
}

// Trainer 0 restarted mid-run starts where the job is, and evaluates from there on: that is no
// resume from checkpoints, and the summary counts the run's own epochs.
TEST_F(AdamRun, ARestartedTrainer0IsNotAResume) {
  const std::string job = Manifest(dir_, kRestartTraining, "trainer: {replicas: 2, threads: 1}");
  Result r = Adam(dir_, "run " + job + " --output json -q --kill trainer-0@0.5+0.5", 240);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["epochs"].get<int>(), kRestartEpochs) << r.out;
  EXPECT_FALSE(j.contains("resumed_after_epoch")) << r.out;
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << r.out;
  EXPECT_THAT(r.err, Not(HasSubstr("adam run: resuming")));
}

// Without copies, a parameter server that crashes and comes back does not end the job: the
// trainers wait for it, it restores its last checkpoint under the same name, and training goes on.
TEST_F(AdamRun, AParameterServerThatRestartsWithoutCopiesDoesNotEndTheJob) {
  const std::string job = Manifest(dir_, kRestartTraining,
                                   "trainer: {replicas: 2, threads: 1}, parameterServer: "
                                   "{replicas: 2, copies: 1, persistence: {interval: 200ms}}");
  Result r = Adam(dir_, "run " + job + " --output json --kill ps-0@0.5+0.5", 240);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["epochs"].get<int>(), kRestartEpochs) << r.out;
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << r.out;
  EXPECT_THAT(r.err, HasSubstr("adam run: restarting ps-0"));
  EXPECT_THAT(r.err, HasSubstr("restored 1 shards from checkpoint"));
  // When the kill came mid-training (always, but in a slow sanitizer build whose trainers may
  // not have connected yet), the trainers waited for it (their log lines, shown without -q).
  if (KilledMidTraining(r.err, "kill -9 ps-0", kRestartEpochs)) {
    EXPECT_THAT(r.err, HasSubstr("waiting for parameter server ps-0"));
    EXPECT_THAT(r.err, HasSubstr("is back after"));
  }
}

// A data server that crashes and comes back: the trainers wait for it and go on with the batches
// of the epoch they were in (its shuffles are seeded, so it serves them again).
TEST_F(AdamRun, ADataServerThatRestartsDoesNotEndTheJob) {
  const std::string job = Manifest(dir_, kRestartTraining, "trainer: {replicas: 2, threads: 1}");
  Result r = Adam(dir_, "run " + job + " --output json --kill data-server-0@0.5+0.5", 240);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["epochs"].get<int>(), kRestartEpochs) << r.out;
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << r.out;
  EXPECT_THAT(r.err, HasSubstr("adam run: restarting data-server-0"));
  if (KilledMidTraining(r.err, "kill -9 data-server-0", kRestartEpochs)) {
    EXPECT_THAT(r.err, HasSubstr("waiting for the data server at 127.0.0.1:"));
    EXPECT_THAT(
        r.err, ::testing::ContainsRegex("the data server at 127\\.0\\.0\\.1:[0-9]+ is back after"));
  }
}

// With two data-server replicas one may be lost for good: its trainer goes on with the other,
// which serves the same seeded batches.
TEST_F(AdamRun, ADataServerReplicaLostForGoodDoesNotEndTheJob) {
  const std::string job = Manifest(dir_, kRestartTraining,
                                   "dataServer: {replicas: 2}, trainer: {replicas: 2, threads: 1}");
  Result r = Adam(dir_, "run " + job + " --output json --kill data-server-0@0.5", 240);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["epochs"].get<int>(), kRestartEpochs) << r.out;
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << r.out;
  EXPECT_THAT(r.err, Not(HasSubstr("restarting data-server-0")));
  if (KilledMidTraining(r.err, "kill -9 data-server-0", kRestartEpochs)) {
    EXPECT_THAT(r.err, ::testing::ContainsRegex(
                           "the data server at 127\\.0\\.0\\.1:[0-9]+ cannot be reached \\(.*\\): "
                           "going on with the data server at 127\\.0\\.0\\.1:[0-9]+"));
  }
}

// A controller member that cannot start (its state directory is a file) is one the job goes on
// without: the next stage does not wait for it to listen (it used to, for the 300 s of
// --ready-timeout), and its last lines say why it ended.
TEST_F(AdamRun, AControllerMemberThatCannotStartIsOneTheJobGoesOnWithout) {
  const std::string state = dir_.File("state");
  std::filesystem::create_directories(state);
  std::ofstream(state + "/controller-0") << "not a directory\n";
  const std::string job =
      Manifest(dir_, "epochs: 3, learningRate: 0.02, pushEvery: 50", kCopiesRoles);
  Result r = Adam(dir_, "run " + job + " --output json --state-dir " + state, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, ::testing::ContainsRegex(
                         "adam run: controller-0 exited with code [0-9]+; the job goes on without "
                         "it\nadam run: last lines of controller-0:\n"));
  EXPECT_GT(nlohmann::json::parse(r.out)["test_accuracy"].get<double>(), 0.9) << r.out;
}

TEST_F(AdamRun, KillNamesAnUnknownRoleInstance) {
  const std::string job = Manifest(dir_, "epochs: 1", "trainer: {replicas: 1}");
  Result r = Adam(dir_, "run " + job + " --kill ps-7@1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("no role instance 'ps-7'"));
  r = Adam(dir_, "run " + job + " --kill ps-0@soon");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("'soon' is not a number of seconds"));
  r = Adam(dir_, "run " + job + " --kill ps-0@nan");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("'nan' is not a number of seconds"));
  r = Adam(dir_, "run " + job + " --chaos 5:x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("seed 'x' is not a number"));
}

// A controller whose failure timeout a primary's lease could outlive would let two primaries of
// one shard take writes: refused before it starts, naming the flag and the least it takes.
TEST_F(AdamRun, AControllerTimeoutShorterThanThePrimaryLeaseIsRefused) {
  const std::string job = Manifest(dir_, "epochs: 1", "trainer: {replicas: 1}");
  Result r = Adam(dir_, "controller --job " + job +
                            " --id 1 --members 1=127.0.0.1:1 --plaintext --state-dir " +
                            dir_.File("ctl") + " --server-timeout-ms 300");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--server-timeout-ms 300 would let a parameter server's primary "
                               "lease (300 ms) outlive"));
  EXPECT_THAT(r.err, HasSubstr("give at least 400"));
}

}  // namespace
}  // namespace adam
