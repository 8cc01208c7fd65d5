// The `adam run` end-to-end suites' common part: the synthetic data set each test makes, `adam`
// run as a process with its output captured, and the jobs' epochs for kills and failovers.
// adam_run_test.cc (training, the CLI, bad input, dead roles, Ctrl-C) and adam_run_faults_test.cc
// (image folders, resumes, failovers, chaos, restarts, the model written) share it.
#pragma once

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

using testing::kSanitizerBuild;

// Epochs of the kill-and-restart jobs: about 3 s of training on a quiet machine, so that a
// kill at 0.5 s finds the trainers training. A sanitizer build trains about four times slower, so
// a quarter of the epochs last as long there.
constexpr int kRestartEpochs = kSanitizerBuild ? 100 : 400;
// The training of the kill jobs: `epochs` of them.
inline std::string KillJobTraining(int epochs) {
  return "epochs: " + std::to_string(epochs) + ", learningRate: 0.02, pushEvery: 50";
}
inline const std::string kRestartTraining = KillJobTraining(kRestartEpochs);
// Epochs of the failover jobs of three copies (a kill at 1 s; the last of several at 4 s, back a
// second later): 200 take 20 to 30 s beside the other tests, time for the copies to catch up
// after the last fault. Under ASan they took 113 and 122 s; 60 take 33 and 39 s there.
constexpr int kFailoverEpochs = kSanitizerBuild ? 60 : 200;
inline const std::string kFailoverTraining = KillJobTraining(kFailoverEpochs);

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
inline Result Adam(const testing::TmpDir& dir, const std::string& args, int timeout_s = 240,
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

}  // namespace adam
