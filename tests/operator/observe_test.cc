// The observe phase: a pod's role and its Adam container's phase, and each role's pods counted as
// status.roles counts them, over the objects the renderer makes for a job.
#include "reconcile/observe.h"

#include <gtest/gtest.h>

#include "rendered_job.h"

namespace adam::op {
namespace {

using testing_job::FindPod;
using testing_job::RenderJob;
using testing_job::SetPod;

TEST(Observe, APodsRoleIsReadOffTheLabelTheRendererWrote) {
  testing_job::RenderedJob r = RenderJob("fashion-mnist-ha");
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
  testing_job::RenderedJob r = RenderJob("fashion-mnist-ha");
  Json pod = *FindPod(r.pods, PodRole::kTrainer, 0);
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
  testing_job::RenderedJob r = RenderJob("fashion-mnist-ha");
  ASSERT_EQ(r.sets.size(), 1u);
  r.sets[0]["status"] = {{"replicas", 3}, {"readyReplicas", 2}};
  SetPod(FindPod(r.pods, PodRole::kParamServer, 0), "Running", true);
  SetPod(FindPod(r.pods, PodRole::kParamServer, 1), "Running", false);
  SetPod(FindPod(r.pods, PodRole::kParamServer, 2), "Pending", false);
  SetPod(FindPod(r.pods, PodRole::kDataServer, 0), "Failed", false, 1);
  SetPod(FindPod(r.pods, PodRole::kTrainer, 0), "Running", false);  // no readiness probe: ready
  SetPod(FindPod(r.pods, PodRole::kTrainer, 1), "Succeeded", false, 0);
  // Not counted: a pod being deleted, a model worker (its trainer's), a pod of no role.
  Json going = *FindPod(r.pods, PodRole::kTrainer, 0);
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
  for (int i : {1, 2}) SetPod(FindPod(r.pods, PodRole::kParamServer, i), "Running", true);
  SetPod(FindPod(r.pods, PodRole::kDataServer, 0), "Running", true);
  counts = CountPods(r.job, r.pods, r.sets);
  EXPECT_TRUE(AllRunning(counts));
  SetPod(FindPod(r.pods, PodRole::kDataServer, 0), "Running", false);
  EXPECT_FALSE(AllRunning(CountPods(r.job, r.pods, r.sets)));
}

// A job of one copy per shard has no controller group: none desired, none counted.
TEST(Observe, AJobWithoutAControllerGroupDesiresNoMember) {
  testing_job::RenderedJob r = RenderJob("fashion-mnist");
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
