// libFuzzer target: text -> AdamJob parsing and validation -> the plan and every role's merged
// pod template.
#include <cstdint>
#include <string>

#include "spec/adamjob.h"
#include "spec/plan.h"
#include "spec/pod_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto job = adam::spec::ParseAdamJob(std::string(reinterpret_cast<const char*>(data), size));
  if (job.ok()) {
    // A valid job must have inferable shapes and a plan with every role.
    if (!adam::spec::InferShapes(job->model).ok()) __builtin_trap();
    auto plan = adam::spec::MakePlan(*job);
    if (plan.instances.empty()) __builtin_trap();
    // Templates a valid job holds are JSON objects that merge.
    auto parse = [](const std::string& t) {
      return t.empty() ? nlohmann::json::object() : nlohmann::json::parse(t);
    };
    const auto& r = job->roles;
    for (const std::string* own : {&r.controller.pod_template, &r.parameter_server.pod_template,
                                   &r.data_server.pod_template, &r.trainer.pod_template})
      if (!adam::spec::MergePodTemplates(parse(job->pod_template), parse(*own)).is_object())
        __builtin_trap();
  }
  return 0;
}
