// An example job rendered as the operator renders it, for the tests of the reconciler's pure
// phases (observe, diff), and the kubelet's part: a pod's phase, readiness and exit code.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "reconcile/observe.h"
#include "reconcile/render.h"
#include "spec/adamjob.h"
#include "testing/wait.h"

namespace adam::op::testing_job {

struct RenderedJob {
  spec::AdamJob job;
  std::vector<Json> objects;     // all of them, in the renderer's order
  std::vector<Json> pods, sets;  // copies of its Pods and StatefulSets
};

// examples/<name>.yaml rendered for a job that has no uid yet.
inline RenderedJob RenderJob(const std::string& name) {
  const std::string text =
      testing::ReadText(std::string(ADAM_SOURCE_DIR) + "/examples/" + name + ".yaml");
  auto job = spec::ParseAdamJob(text);
  EXPECT_TRUE(job.ok()) << job.status().message();
  RenderOptions o;
  o.manifest = text;
  RenderedJob r{*job, Render(*job, o), {}, {}};
  for (const Json& obj : r.objects) {
    if (obj["kind"] == "Pod") r.pods.push_back(obj);
    if (obj["kind"] == "StatefulSet") r.sets.push_back(obj);
  }
  return r;
}

// The kubelet's part: the pod's phase and readiness, and how Adam's container ended (exit_code
// -1: it runs).
inline void SetPod(Json* pod, const std::string& phase, bool ready, int exit_code = -1) {
  Json cs = {{"name", Label(*pod, kRoleLabel)}};
  if (exit_code >= 0)
    cs["state"] = {{"terminated", {{"exitCode", exit_code}}}};
  else
    cs["state"] = {{"running", Json::object()}};
  (*pod)["status"] = {{"phase", phase},
                      {"conditions", {{{"type", "Ready"}, {"status", ready ? "True" : "False"}}}},
                      {"containerStatuses", {cs}}};
}

// The pod of `role` with index `index` among `pods` (a failure, and a dummy, if there is none).
inline Json* FindPod(std::vector<Json>& pods, PodRole role, int index) {
  for (Json& p : pods)
    if (PodRoleOf(p) == role && Label(p, kIndexLabel) == std::to_string(index)) return &p;
  ADD_FAILURE() << "no pod " << RoleName(role) << " " << index;
  static Json none;
  return &none;
}

}  // namespace adam::op::testing_job
