// The diff phase: a job's rendered objects set against those it owns, before any write -- what is
// made, compared or waited for, stage by stage, whether the job already ran whole, and which pods
// the plan no longer has.
#include "reconcile/diff.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "rendered_job.h"

namespace adam::op {
namespace {

using testing_job::FindPod;
using testing_job::RenderJob;
using testing_job::SetPod;

// The job's objects as the informers would hold them once all were made (by ObjectKey).
std::map<std::string, Json> AllMade(const std::vector<Json>& objects) {
  std::map<std::string, Json> existing;
  for (const Json& o : objects)
    if (o["kind"] != "PodGroup") existing[ObjectKey(o)] = o;
  return existing;
}

// The changes of one kind per key, over every stage.
std::map<std::string, Change> Changes(const ObjectDiff& d) {
  std::map<std::string, Change> out;
  for (const auto& stage : d.stages)
    for (const ObjectChange& c : stage) out[ObjectKey(*c.want)] = c.change;
  return out;
}

const ObjectChange& ChangeOf(const ObjectDiff& d, const std::string& key) {
  for (const auto& stage : d.stages)
    for (const ObjectChange& c : stage)
      if (ObjectKey(*c.want) == key) return c;
  ADD_FAILURE() << "no change for " << key;
  static const ObjectChange none;
  return none;
}

TEST(Diff, NothingMadeYetMakesEveryObjectStageByStage) {
  testing_job::RenderedJob r = RenderJob("fashion-mnist-ha");
  const std::map<std::string, Json> none;
  const ObjectDiff d = DiffObjects(r.objects, none, false);
  int last = 0;
  for (const Json& o : r.objects) last = std::max(last, StageOf(o));
  ASSERT_GT(last, 0) << "the example has stages";
  ASSERT_EQ(d.stages.size(), size_t(last) + 1);
  size_t changes = 0;
  for (size_t stage = 0; stage < d.stages.size(); ++stage)
    for (const ObjectChange& c : d.stages[stage]) {
      ++changes;
      EXPECT_EQ(StageOf(*c.want), int(stage)) << ObjectKey(*c.want);
      EXPECT_EQ(c.change, Change::kMake) << ObjectKey(*c.want);
      EXPECT_EQ(c.current, nullptr);
      EXPECT_FALSE(c.ready);
      EXPECT_NE((*c.want)["kind"], "PodGroup");
    }
  size_t groups = 0;
  for (const Json& o : r.objects) groups += o["kind"] == "PodGroup";
  EXPECT_EQ(changes + groups, r.objects.size());
  EXPECT_FALSE(d.started);
  EXPECT_TRUE(d.unplanned_pods.empty());
  EXPECT_TRUE(MakesPods(r.objects, none));
  EXPECT_FALSE(HasStatefulSet(none));
}

// What exists is compared; it is ready as the next stage needs it; one going is waited for.
TEST(Diff, WhatExistsIsComparedAndReadyAsTheNextStageNeeds) {
  testing_job::RenderedJob r = RenderJob("fashion-mnist-ha");
  std::map<std::string, Json> existing = AllMade(r.objects);
  EXPECT_FALSE(MakesPods(r.objects, existing));
  EXPECT_TRUE(HasStatefulSet(existing));
  ASSERT_EQ(r.sets.size(), 1u);
  const std::string set = ObjectKey(r.sets[0]);
  const int members = r.sets[0]["spec"]["replicas"];
  existing[set]["status"] = {{"readyReplicas", members - 1}};
  Json* ps0 = &existing[ObjectKey(*FindPod(r.pods, PodRole::kParamServer, 0))];
  Json* ps1 = &existing[ObjectKey(*FindPod(r.pods, PodRole::kParamServer, 1))];
  Json* trainer = &existing[ObjectKey(*FindPod(r.pods, PodRole::kTrainer, 0))];
  SetPod(ps0, "Running", true);
  SetPod(ps1, "Running", false);
  SetPod(trainer, "Running", false);  // no readiness probe: ready once running
  Json* data = &existing[ObjectKey(*FindPod(r.pods, PodRole::kDataServer, 0))];
  (*data)["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";

  ObjectDiff d = DiffObjects(r.objects, existing, true);
  for (const auto& [key, change] : Changes(d))
    EXPECT_EQ(change, key == ObjectKey(*data) ? Change::kWait : Change::kCompare) << key;
  EXPECT_FALSE(ChangeOf(d, set).ready);
  EXPECT_TRUE(ChangeOf(d, ObjectKey(*ps0)).ready);
  EXPECT_FALSE(ChangeOf(d, ObjectKey(*ps1)).ready);
  EXPECT_TRUE(ChangeOf(d, ObjectKey(*trainer)).ready);
  EXPECT_FALSE(ChangeOf(d, ObjectKey(*data)).ready);
  EXPECT_EQ(ChangeOf(d, ObjectKey(*ps0)).current, ps0);
  for (const auto& [key, o] : existing)  // a Service, a ConfigMap: ready once they exist
    if (o["kind"] != "Pod" && o["kind"] != "StatefulSet")
      EXPECT_TRUE(ChangeOf(d, key).ready) << key;

  existing[set]["status"]["readyReplicas"] = members;
  d = DiffObjects(r.objects, existing, true);
  EXPECT_TRUE(ChangeOf(d, set).ready);
}

// A job that ran whole and still has a pod of its last stage makes a lost pod again at once; one
// whose last-stage pods all went (or that never ran whole) starts stage by stage.
TEST(Diff, AJobThatRanWholeWithPodsOfItsLastStageHasStarted) {
  testing_job::RenderedJob r = RenderJob("fashion-mnist-ha");
  int last = 0;
  for (const Json& o : r.objects) last = std::max(last, StageOf(o));
  std::map<std::string, Json> existing = AllMade(r.objects);
  EXPECT_TRUE(DiffObjects(r.objects, existing, true).started);
  EXPECT_FALSE(DiffObjects(r.objects, existing, false).started);
  std::set<std::string> last_stage;
  for (const Json& p : r.pods)
    if (StageOf(p) == last) last_stage.insert(ObjectKey(p));
  ASSERT_FALSE(last_stage.empty());
  for (const std::string& key : last_stage)
    existing[key]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  EXPECT_FALSE(DiffObjects(r.objects, existing, true).started);
  for (const std::string& key : last_stage) existing.erase(key);
  const ObjectDiff d = DiffObjects(r.objects, existing, true);
  EXPECT_FALSE(d.started);
  for (const std::string& key : last_stage) EXPECT_EQ(ChangeOf(d, key).change, Change::kMake);
  EXPECT_TRUE(MakesPods(r.objects, existing));
}

// Scaled down: the trainer the plan no longer has goes, a parameter server only once it retired
// (exited 0), nothing else; a pod already going is not deleted twice.
TEST(Diff, OnlyUnplannedTrainersAndRetiredParameterServersGo) {
  testing_job::RenderedJob r = RenderJob("fashion-mnist-ha");
  std::map<std::string, Json> existing = AllMade(r.objects);
  Json extra_trainer = *FindPod(r.pods, PodRole::kTrainer, 0);
  extra_trainer["metadata"]["name"] = "fashion-mnist-ha-trainer-7";
  Json retired = *FindPod(r.pods, PodRole::kParamServer, 0);
  retired["metadata"]["name"] = "fashion-mnist-ha-parameter-server-5";
  SetPod(&retired, "Succeeded", false, 0);
  Json serving = retired;
  serving["metadata"]["name"] = "fashion-mnist-ha-parameter-server-6";
  SetPod(&serving, "Running", true);
  Json going = extra_trainer;
  going["metadata"]["name"] = "fashion-mnist-ha-trainer-8";
  going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  Json data = *FindPod(r.pods, PodRole::kDataServer, 0);
  data["metadata"]["name"] = "fashion-mnist-ha-data-server-4";
  Json config = {{"kind", "ConfigMap"}, {"metadata", {{"name", "left-over"}}}};
  for (const Json& o : {extra_trainer, retired, serving, going, data, config})
    existing[ObjectKey(o)] = o;

  const ObjectDiff d = DiffObjects(r.objects, existing, true);
  EXPECT_EQ(
      std::set<std::string>(d.unplanned_pods.begin(), d.unplanned_pods.end()),
      (std::set<std::string>{"fashion-mnist-ha-trainer-7", "fashion-mnist-ha-parameter-server-5"}));
  // The plan's own objects are untouched by what it no longer has.
  for (const auto& [key, change] : Changes(d)) EXPECT_EQ(change, Change::kCompare) << key;
}

}  // namespace
}  // namespace adam::op
