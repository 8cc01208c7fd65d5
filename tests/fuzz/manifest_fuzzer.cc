// libFuzzer target: text -> AdamJob parsing and validation -> the plan.
#include <cstdint>
#include <string>

#include "spec/adamjob.h"
#include "spec/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto job = adam::spec::ParseAdamJob(std::string(reinterpret_cast<const char*>(data), size));
  if (job.ok()) {
    // A valid job must have inferable shapes and a plan with every role.
    if (!adam::spec::InferShapes(job->model).ok()) __builtin_trap();
    auto plan = adam::spec::MakePlan(*job);
    if (plan.instances.empty()) __builtin_trap();
  }
  return 0;
}
