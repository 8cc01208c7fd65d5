// The observe phase: a pod's role and its Adam container's phase, and each role's pods counted as
// status.roles counts them, over the objects the renderer makes for a job.
#include "reconcile/observe.h"

#include <gtest/gtest.h>

#include "testing/wait.h"

namespace adam::op {
namespace {

struct Rendered {
  spec::AdamJob job;
  std::vector<Json> pods, sets;
};

Rendered RenderExample(const std::string& name) {
  const std::string text =
      testing::ReadText(std::string(ADAM_SOURCE_DIR) + "/examples/" + name + ".yaml");
  auto job = spec::ParseAdamJob(text);
  EXPECT_TRUE(job.ok()) << job.status().message();
  RenderOptions o;
  o.manifest = text;
  Rendered r{*job, {}, {}};
  for (const Json& obj : Render(*job, o)) {
    if (obj["kind"] == "Pod") r.pods.push_back(obj);
    if (obj["kind"] == "StatefulSet") r.sets.push_back(obj);
  }
  return r;
}

// The kubelet's part: the pod's phase and readiness, and how Adam's container ended.
void SetPod(Json* pod, const std::string& phase, bool ready, int exit_code = -1) {
  Json cs = {{"name", Label(*pod, kRoleLabel)}};
  if (exit_code >= 0)
    cs["state"] = {{"terminated", {{"exitCode", exit_code}}}};
  else
    cs["state"] = {{"running", Json::object()}};
  (*pod)["status"] = {{"phase", phase},
                      {"conditions", {{{"type", "Ready"}, {"status", ready ? "True" : "False"}}}},
                      {"containerStatuses", {cs}}};
}

Json* Find(std::vector<Json>& pods, PodRole role, int index) {
  for (Json& p : pods)
    if (PodRoleOf(p) == role && Label(p, kIndexLabel) == std::to_string(index)) return &p;
  ADD_FAILURE() << "no pod " << RoleName(role) << " " << index;
  static Json none;
  return &none;
}

TEST(Observe, APodsRoleIsReadOffTheLabelTheRendererWrote) {
  Rendered r = RenderExample("fashion-mnist-ha");
  std::map<PodRole, int> seen;
  for (const Json& p : r.pods) {
    const PodRole role = PodRoleOf(p);
    ++seen[role];
    EXPECT_EQ(RoleName(role), Label(p, kRoleLabel));
  }
  EXPECT_EQ(seen,
            (std::map<PodRole, int>{
                {PodRole::kParamServer, 3}, {PodRole::kDataServer, 1}, {PodRole::kTrainer, 2}}));
  Json other = {{"metadata", {{"labels", {{kRoleLabel, "sidecar-injector"}}}}}};
  EXPECT_EQ(PodRoleOf(other), PodRole::kNone);
  EXPECT_STREQ(RoleName(PodRole::kNone), "");
  other["metadata"]["labels"][kRoleLabel] = kModelWorkerRole;
  EXPECT_EQ(PodRoleOf(other), PodRole::kModelWorker);
}

// A sidecar that runs on does not keep a role's pod running: Adam's container (named after the
// role) decides; its exit code and last line are the pod's.
TEST(Observe, AdamsContainerDecidesThePhaseNotASidecar) {
  Rendered r = RenderExample("fashion-mnist-ha");
  Json pod = *Find(r.pods, PodRole::kTrainer, 0);
  SetPod(&pod, "Running", true);
  EXPECT_EQ(RolePhase(pod), "Running");
  EXPECT_EQ(ExitCode(pod), -1);
  const Json sidecar = {{"name", "mesh-proxy"}, {"state", {{"running", Json::object()}}}};
  pod["status"]["containerStatuses"] = {
      sidecar,
      {{"name", "trainer"},
       {"state", {{"terminated", {{"exitCode", 3}, {"message", "epoch 1\ndiverged \n"}}}}}}};
  EXPECT_EQ(RolePhase(pod), "Failed");
  EXPECT_EQ(ExitCode(pod), 3);
  EXPECT_EQ(LastWords(pod), ": diverged");
  pod["status"]["containerStatuses"][1]["state"]["terminated"]["exitCode"] = 0;
  EXPECT_EQ(RolePhase(pod), "Succeeded");
  pod["status"]["containerStatuses"] = Json::array();
  EXPECT_EQ(RolePhase(pod), "Running");
  EXPECT_EQ(LastWords(pod), "");
}

TEST(Observe, EachRoleIsCountedAsTheStatusCountsIt) {
  Rendered r = RenderExample("fashion-mnist-ha");
  ASSERT_EQ(r.sets.size(), 1u);
  r.sets[0]["status"] = {{"replicas", 3}, {"readyReplicas", 2}};
  SetPod(Find(r.pods, PodRole::kParamServer, 0), "Running", true);
  SetPod(Find(r.pods, PodRole::kParamServer, 1), "Running", false);
  SetPod(Find(r.pods, PodRole::kParamServer, 2), "Pending", false);
  SetPod(Find(r.pods, PodRole::kDataServer, 0), "Failed", false, 1);
  SetPod(Find(r.pods, PodRole::kTrainer, 0), "Running", false);  // no readiness probe: ready
  SetPod(Find(r.pods, PodRole::kTrainer, 1), "Succeeded", false, 0);
  // Not counted: a pod being deleted, a model worker (its trainer's), a pod of no role.
  Json going = *Find(r.pods, PodRole::kTrainer, 0);
  going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  Json worker = going;
  worker["metadata"].erase("deletionTimestamp");
  worker["metadata"]["labels"][kRoleLabel] = kModelWorkerRole;
  r.pods.push_back(going);
  r.pods.push_back(worker);
  r.pods.push_back({{"metadata", {{"name", "x"}}}});

  auto counts = CountPods(r.job, r.pods, r.sets);
  EXPECT_EQ(counts[PodRole::kController], (RoleCount{3, 3, 2, 0, 0}));
  EXPECT_EQ(counts[PodRole::kParamServer], (RoleCount{3, 3, 1, 0, 0}));
  EXPECT_EQ(counts[PodRole::kDataServer], (RoleCount{1, 0, 0, 0, 1}));
  EXPECT_EQ(counts[PodRole::kTrainer], (RoleCount{2, 1, 1, 1, 0}));
  EXPECT_EQ(counts.size(), 4u);
  EXPECT_FALSE(AllRunning(counts));

  // Every role ready or finished: all running, however many pods are still active.
  r.sets[0]["status"]["readyReplicas"] = 3;
  for (int i : {1, 2}) SetPod(Find(r.pods, PodRole::kParamServer, i), "Running", true);
  SetPod(Find(r.pods, PodRole::kDataServer, 0), "Running", true);
  counts = CountPods(r.job, r.pods, r.sets);
  EXPECT_TRUE(AllRunning(counts));
  SetPod(Find(r.pods, PodRole::kDataServer, 0), "Running", false);
  EXPECT_FALSE(AllRunning(CountPods(r.job, r.pods, r.sets)));
}

// A job of one copy per shard has no controller group: none desired, none counted.
TEST(Observe, AJobWithoutAControllerGroupDesiresNoMember) {
  Rendered r = RenderExample("fashion-mnist");
  EXPECT_TRUE(r.sets.empty());
  const auto counts = CountPods(r.job, r.pods, r.sets);
  EXPECT_EQ(counts.at(PodRole::kController), RoleCount{});
  // Pods no kubelet has reported on yet are pending: active, not ready.
  const RoleCount ps = counts.at(PodRole::kParamServer);
  EXPECT_EQ(ps, (RoleCount{r.job.roles.parameter_server.replicas,
                           r.job.roles.parameter_server.replicas, 0, 0, 0}));
  EXPECT_FALSE(AllRunning(counts));
}

}  // namespace
}  // namespace adam::op
