// What the operator writes for Kueue and the coscheduling plugin, and reads back from Kueue.
#include "reconcile/kueue.h"

#include <gtest/gtest.h>

#include "spec/adamjob.h"
#include "testing/wait.h"

namespace adam::op {
namespace {

spec::AdamJob Parse(const std::string& example, const std::string& extra_run_policy = "") {
  std::string text =
      testing::ReadText(std::string(ADAM_SOURCE_DIR) + "/examples/" + example + ".yaml");
  if (!extra_run_policy.empty()) text += "  runPolicy: " + extra_run_policy + "\n";
  auto job = spec::ParseAdamJob(text);
  EXPECT_TRUE(job.ok()) << job.status().message();
  return *job;
}

std::vector<Json> RenderOf(const spec::AdamJob& job) {
  RenderOptions o;
  o.manifest = "{}";
  o.owner_uid = "0123456789";
  return Render(job, o);
}

TEST(Kueue, AWorkloadHasAPodSetPerRoleWithItsCountAndRequests) {
  const spec::AdamJob job = Parse("fashion-mnist-ha");
  const Json wl = WorkloadFor(job, RenderOf(job), "team", "0123456789", 4);
  EXPECT_EQ(wl["metadata"]["name"], "adamjob-fashion-mnist-ha-01234");
  EXPECT_EQ(wl["spec"]["queueName"], "team");
  EXPECT_EQ(wl["metadata"]["ownerReferences"][0]["uid"], "0123456789");
  EXPECT_EQ(wl["metadata"]["labels"][kKueueJobUidLabel], "0123456789");
  const Json& sets = wl["spec"]["podSets"];
  ASSERT_EQ(sets.size(), 4u);
  const std::pair<const char*, int> want[] = {
      {"controller", 3}, {"ps", 3}, {"data-server", 1}, {"trainer", 2}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(sets[i]["name"], want[i].first);
    EXPECT_EQ(sets[i]["count"], want[i].second);
    // The requests Kueue counts against the quota are the pods' own.
    const Json& c = sets[i]["template"]["spec"]["containers"][0];
    EXPECT_TRUE(c["resources"].contains("requests")) << sets[i].dump(2);
  }
  // A Workload for three trainers is another shape; the same one is not.
  spec::AdamJob more = job;
  more.roles.trainer.replicas = 3;
  EXPECT_TRUE(SamePodSets(wl, WorkloadFor(job, RenderOf(job), "team", "0123456789", 5)));
  EXPECT_FALSE(SamePodSets(wl, WorkloadFor(more, RenderOf(more), "team", "0123456789", 5)));
}

Json Admitted() {
  return Json::parse(R"({
    "metadata": {"name": "w", "generation": 1},
    "status": {
      "admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "ps", "flavors": {"cpu": "on-demand", "memory": "on-demand"}},
        {"name": "trainer", "flavors": {"cpu": "spot", "memory": "on-demand"}}]},
      "conditions": [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": ""},
        {"type": "Admitted", "status": "True", "reason": "Admitted", "message": ""}]}})");
}

TEST(Kueue, ReadsAdmissionEvictionAndTheFlavorsOfEachPodSet) {
  Json wl = Admitted();
  WorkloadState st = ReadWorkload(wl);
  EXPECT_TRUE(st.admitted);
  EXPECT_TRUE(st.quota_reserved);
  EXPECT_FALSE(st.evicted);
  EXPECT_EQ(st.cluster_queue, "cq");
  EXPECT_EQ(st.flavors["ps"], std::vector<std::string>({"on-demand"}));
  EXPECT_EQ(st.flavors["trainer"].size(), 2u);  // spot for cpu, on-demand for memory

  wl["status"]["conditions"].push_back(
      {{"type", "Evicted"}, {"status", "True"}, {"reason", "Deactivated"}, {"message", "off"}});
  st = ReadWorkload(wl);
  EXPECT_TRUE(st.evicted);
  EXPECT_EQ(st.evicted_reason, "Deactivated");
  // Given back: no admission, not admitted, and (not a preemption) not queued again at once.
  const Json cleared = WithReservationCleared(wl, "2026-01-01T00:00:00Z");
  const WorkloadState after = ReadWorkload(cleared);
  EXPECT_FALSE(after.quota_reserved);
  EXPECT_FALSE(after.admitted);
  EXPECT_EQ(after.pending_message, "off");
  bool requeued_false = false;
  for (const Json& c : cleared["status"]["conditions"])
    requeued_false |= c["type"] == "Requeued" && c["status"] == "False";
  EXPECT_TRUE(requeued_false) << cleared.dump(2);

  const Json done = WithFinished(Admitted(), false, "the job failed", "2026-01-01T00:00:00Z");
  EXPECT_TRUE(ReadWorkload(done).finished);
  EXPECT_EQ(done["status"]["conditions"].back()["reason"], "Failed");
  EXPECT_EQ(done["status"]["conditions"].back()["observedGeneration"], 1);
}

TEST(Kueue, FlavorsPlaceEachRolesPodsAndAContradictionIsNamed) {
  const spec::AdamJob job = Parse("fashion-mnist");
  std::vector<Json> objects = RenderOf(job);
  const WorkloadState st = ReadWorkload(Admitted());
  std::map<std::string, FlavorPlacement> flavors;
  flavors["on-demand"].node_labels = {{"pool", "on-demand"}};
  flavors["spot"].node_labels = {{"pool", "spot"}};
  flavors["spot"].tolerations = Json::array({{{"key", "spot"}, {"operator", "Exists"}}});
  // A trainer asked for both spot and on-demand nodes: refused, naming both.
  Status s = ApplyFlavors(st, flavors, &objects);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("pool=on-demand"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("pool=spot"), std::string::npos) << s.message();

  flavors["on-demand"].node_labels = {{"tier", "standard"}};
  objects = RenderOf(job);
  ASSERT_TRUE(ApplyFlavors(st, flavors, &objects).ok());
  for (const Json& o : objects) {
    if (o["kind"] != "Pod") continue;
    const std::string role = o["metadata"]["labels"][kRoleLabel];
    const Json sel = o["spec"].value("nodeSelector", Json::object());
    if (role == "ps") {
      EXPECT_EQ(sel.value("tier", ""), "standard");
      EXPECT_FALSE(sel.contains("pool"));
    } else if (role == "trainer") {
      EXPECT_EQ(sel.value("pool", ""), "spot");
      const Json tolerations = o["spec"].value("tolerations", Json::array());
      EXPECT_TRUE(!tolerations.empty() && tolerations.back().value("key", "") == "spot");
    } else {
      EXPECT_FALSE(sel.contains("tier") || sel.contains("pool")) << role;  // not assigned
    }
  }
}

// The podSetUpdates of each admission check are read per pod set, and applied to that role's
// pods and StatefulSet template: labels, annotations, nodeSelector, tolerations. A value that
// contradicts the pods' own is refused, naming the check, the field and both values.
TEST(Kueue, AdmissionChecksPodSetUpdatesAreAppliedAndAContradictionIsNamed) {
  Json wl = Admitted();
  wl["status"]["admissionChecks"] = Json::parse(R"([
    {"name": "provision", "state": "Ready", "podSetUpdates": [
      {"name": "trainer", "labels": {"pool": "spot"}, "annotations": {"req": "pr-1"},
       "nodeSelector": {"pool": "spot"}, "tolerations": [{"key": "spot", "operator": "Exists"}]},
      {"name": "controller", "annotations": {"req": "pr-2"}}]},
    {"name": "second", "state": "Ready", "podSetUpdates": [
      {"name": "trainer", "tolerations": [{"key": "spot", "operator": "Exists"}]}]}])");
  const WorkloadState st = ReadWorkload(wl);
  ASSERT_EQ(st.updates.at("trainer").size(), 2u);
  EXPECT_EQ(st.updates.at("trainer")[0].check, "provision");
  EXPECT_EQ(st.updates.at("trainer")[1].check, "second");
  EXPECT_EQ(st.updates.at("controller")[0].annotations["req"], "pr-2");

  const spec::AdamJob job = Parse("fashion-mnist-ha");
  std::vector<Json> objects = RenderOf(job);
  ASSERT_TRUE(ApplyPodSetUpdates(st, &objects).ok());
  int trainers = 0, sets = 0;
  for (const Json& o : objects) {
    const std::string role = o["metadata"]["labels"].value(kRoleLabel, "");
    if (o["kind"] == "Pod" && role == "trainer") {
      ++trainers;
      EXPECT_EQ(o["metadata"]["labels"]["pool"], "spot");
      EXPECT_EQ(o["metadata"]["annotations"]["req"], "pr-1");
      EXPECT_EQ(o["spec"]["nodeSelector"]["pool"], "spot");
      EXPECT_EQ(o["spec"]["tolerations"].dump().find("spot"),
                o["spec"]["tolerations"].dump().rfind("spot"))
          << "the same toleration twice: " << o["spec"]["tolerations"].dump();
    } else if (o["kind"] == "Pod") {
      EXPECT_FALSE(o["metadata"]["labels"].contains("pool")) << role;
      EXPECT_FALSE(o["spec"].value("nodeSelector", Json::object()).contains("pool")) << role;
    } else if (o["kind"] == "StatefulSet" && role == "controller") {
      ++sets;
      EXPECT_EQ(o["spec"]["template"]["metadata"]["annotations"]["req"], "pr-2");
    }
  }
  EXPECT_EQ(trainers, 2);
  EXPECT_EQ(sets, 1);

  // A label the pods carry with another value (their role): refused, naming both.
  wl["status"]["admissionChecks"][1]["podSetUpdates"][0]["labels"] = {{kRoleLabel, "ps"}};
  objects = RenderOf(job);
  const Status s = ApplyPodSetUpdates(ReadWorkload(wl), &objects);
  ASSERT_FALSE(s.ok());
  for (const std::string& part :
       {std::string("admission check second"), std::string(kRoleLabel) + "=ps",
        std::string(kRoleLabel) + "=trainer"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " not in " << s.message();
}

TEST(Coscheduling, OneGangOfEveryPodMadeAtOnce) {
  const spec::AdamJob job = Parse("fashion-mnist-ha",
                                  "{schedulingPolicy: {coscheduling: true, "
                                  "scheduleTimeoutSeconds: 90}}");
  const std::vector<Json> objects = RenderOf(job);
  const Json* group = nullptr;
  int pods = 0;
  for (const Json& o : objects) {
    EXPECT_EQ(StageOf(o), 0) << o["kind"] << " " << o["metadata"]["name"];
    if (o["kind"] == "PodGroup") group = &o;
    if (o["kind"] == "Pod") {
      ++pods;
      EXPECT_EQ(o["metadata"]["labels"].value(kPodGroupLabel, ""), "fashion-mnist-ha");
    }
    if (o["kind"] == "StatefulSet")
      EXPECT_EQ(o["spec"]["template"]["metadata"]["labels"].value(kPodGroupLabel, ""),
                "fashion-mnist-ha");
  }
  ASSERT_NE(group, nullptr);
  EXPECT_EQ((*group)["spec"]["minMember"], pods + 3);  // the 3 controllers too
  EXPECT_EQ((*group)["spec"]["scheduleTimeoutSeconds"], 90);
  EXPECT_EQ((*group)["metadata"]["ownerReferences"][0]["uid"], "0123456789");
  // Without it: stages, and no group label.
  for (const Json& o : RenderOf(Parse("fashion-mnist-ha"))) {
    EXPECT_NE(o["kind"], "PodGroup");
    if (o["kind"] == "Pod") EXPECT_FALSE(o["metadata"]["labels"].contains(kPodGroupLabel));
  }
}

}  // namespace
}  // namespace adam::op
