// The AdamJob suites' common part: a valid manifest, one changed in one place, and the error a
// manifest is refused with. adamjob_test.cc (what parses and its defaults),
// adamjob_errors_test.cc (every refusal, naming its field) and plan_test.cc (the plan of roles
// a job makes) share it.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <regex>
#include <string>

#include "spec/adamjob.h"
#include "spec/plan.h"
#include "spec/role_options.h"
#include "spec/yaml_json.h"
#include "testing/wait.h"

namespace adam::spec {

using ::testing::AllOf;
using ::testing::HasSubstr;

inline const char kValid[] = R"(
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
inline std::string With(const std::string& from, const std::string& to) {
  std::string s = kValid;
  auto pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return s.replace(pos, from.size(), to);
}

inline std::string ErrorOf(const std::string& yaml) {
  auto job = ParseAdamJob(yaml);
  EXPECT_FALSE(job.ok());
  return job.ok() ? "" : job.status().message();
}

}  // namespace adam::spec
