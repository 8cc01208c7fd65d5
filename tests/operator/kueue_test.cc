// What the operator writes for Kueue and the coscheduling plugin, and reads back from Kueue.
#include "reconcile/kueue.h"

#include <gtest/gtest.h>

#include <set>

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

// Kueue's topology-aware scheduling: a role asks with Kueue's own pod-template annotations and
// its pod set carries the topologyRequest Kueue's job framework would read from them; a pod set
// Kueue admitted by topology has its pods gated, labelled and annotated for Kueue's topology
// ungater (and no other role's); a pod set that asked for nothing but was placed by topology (a
// ClusterQueue of TAS flavors only) is marked unconstrained, as Kueue does.
TEST(Kueue, TopologyRequestsGoIntoThePodSetsAndAdmittedPodsAreGated) {
  spec::AdamJob job = Parse("fashion-mnist-ha");
  job.roles.trainer.pod_template =
      R"({"annotations": {"kueue.x-k8s.io/podset-required-topology": "example.com/rack",
                          "kueue.x-k8s.io/podset-slice-required-topology": "kubernetes.io/hostname",
                          "kueue.x-k8s.io/podset-slice-size": "1"}})";
  job.roles.parameter_server.pod_template =
      R"({"annotations": {"kueue.x-k8s.io/podset-preferred-topology": "example.com/block"}})";
  job.roles.data_server.pod_template =
      R"({"annotations": {"kueue.x-k8s.io/podset-unconstrained-topology": "true"}})";
  const Json wl = WorkloadFor(job, RenderOf(job), "team", "0123456789", 4);
  std::map<std::string, Json> requests;
  for (const Json& ps : wl["spec"]["podSets"])
    requests[ps["name"]] = ps.value("topologyRequest", Json());
  EXPECT_EQ(requests["trainer"], Json::parse(R"({"required": "example.com/rack",
                            "podSetSliceRequiredTopology": "kubernetes.io/hostname",
                            "podSetSliceSize": 1})"));
  EXPECT_EQ(requests["ps"], Json::parse(R"({"preferred": "example.com/block"})"));
  EXPECT_EQ(requests["data-server"], Json::parse(R"({"unconstrained": true})"));
  EXPECT_TRUE(requests["controller"].is_null()) << requests["controller"];

  // Admitted with topology assignments for the trainers and the controllers (which asked for
  // none) but not the parameter servers.
  Json admitted = Json::parse(R"({
    "metadata": {"name": "adamjob-fashion-mnist-ha-01234"},
    "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [
      {"name": "controller", "flavors": {"cpu": "tas"},
       "topologyAssignment": {"levels": ["example.com/rack"], "slices": []}},
      {"name": "ps", "flavors": {"cpu": "tas"}},
      {"name": "trainer", "flavors": {"cpu": "tas"},
       "topologyAssignment": {"levels": ["example.com/rack"], "slices": []}}]}}})");
  const WorkloadState st = ReadWorkload(admitted);
  EXPECT_EQ(st.name, "adamjob-fashion-mnist-ha-01234");
  EXPECT_EQ(st.topology, (std::set<std::string>{"controller", "trainer"}));
  std::vector<Json> objects = RenderOf(job);
  ApplyTopology(st, &objects);
  ApplyTopology(st, &objects);  // twice: still one gate
  int gated = 0;
  for (const Json& o : objects) {
    const std::string kind = o["kind"];
    if (kind != "Pod" && kind != "StatefulSet") continue;
    const Json& pod = kind == "Pod" ? o : o["spec"]["template"];
    const std::string role = o["metadata"]["labels"].value(kRoleLabel, "");
    const Json gates = pod["spec"].value("schedulingGates", Json::array());
    const Json annotations = pod["metadata"].value("annotations", Json::object());
    const Json labels = pod["metadata"].value("labels", Json::object());
    if (role != "controller" && role != "trainer") {
      EXPECT_TRUE(gates.empty()) << role << ": " << gates;
      EXPECT_FALSE(labels.contains(kPodSetLabel)) << role;
      EXPECT_FALSE(annotations.contains(kWorkloadAnnotation)) << role;
      continue;
    }
    ++gated;
    EXPECT_EQ(gates, Json::parse(R"([{"name": "kueue.x-k8s.io/topology"}])")) << role;
    EXPECT_EQ(labels.value(kPodSetLabel, ""), role);
    EXPECT_EQ(annotations.value(kWorkloadAnnotation, ""), "adamjob-fashion-mnist-ha-01234");
    // The controllers asked for nothing: unconstrained, as Kueue marks them; the trainers keep
    // their own request and are not marked.
    EXPECT_EQ(annotations.contains(kTasUnconstrainedAnnotation), role == "controller") << role;
  }
  EXPECT_EQ(gated, 3);  // the controllers' StatefulSet template and two trainers
}

// An elastic job's Workloads: how its counts compare with a Workload's, a Workload with the
// counts changed in place, and the slice that replaces an admitted Workload (named after the
// job's first Workload and the generation, naming the replaced one and the chain).
TEST(Kueue, ElasticSlicesCompareResizeAndReplace) {
  const spec::AdamJob job = Parse("fashion-mnist-ha");
  Json admitted = WorkloadFor(job, RenderOf(job), "team", "0123456789", 4);
  admitted["metadata"]["namespace"] = "ml";
  spec::AdamJob more = job, fewer = job, split = job;
  more.roles.trainer.replicas = 3;
  fewer.roles.trainer.replicas = 1;
  split.roles.trainer.model_workers = 2;  // a role appears: model workers
  const Json up = WorkloadFor(more, RenderOf(more), "team", "0123456789", 5);
  const Json down = WorkloadFor(fewer, RenderOf(fewer), "team", "0123456789", 5);
  EXPECT_EQ(CompareCounts(admitted, admitted), Resize::kSame);
  EXPECT_EQ(CompareCounts(admitted, up), Resize::kUp);
  EXPECT_EQ(CompareCounts(admitted, down), Resize::kDown);
  EXPECT_EQ(CompareCounts(admitted, WorkloadFor(split, RenderOf(split), "team", "0123456789", 5)),
            Resize::kReshaped);
  spec::AdamJob mixed = fewer;  // one count down, another up: the quota may grow
  mixed.roles.parameter_server.replicas = 4;
  EXPECT_EQ(CompareCounts(admitted, WorkloadFor(mixed, RenderOf(mixed), "team", "0123456789", 5)),
            Resize::kUp);

  const Json lowered = WithCounts(admitted, down);
  EXPECT_EQ(PodSetCounts(lowered)["trainer"], 1);
  EXPECT_EQ(PodSetCounts(lowered)["ps"], 3);
  EXPECT_EQ(lowered["metadata"], admitted["metadata"]);  // the same Workload, counts only
  EXPECT_EQ(lowered["spec"]["podSets"][3]["template"], admitted["spec"]["podSets"][3]["template"]);

  EXPECT_EQ(WorkloadGeneration(admitted), 4);
  const Json slice = SliceReplacing(admitted, up, 5);
  EXPECT_EQ(slice["metadata"]["name"], "adamjob-fashion-mnist-ha-01234-g5");
  EXPECT_EQ(WorkloadGeneration(slice), 5);
  EXPECT_EQ(PodSetCounts(slice)["trainer"], 3);
  const Json& a = slice["metadata"]["annotations"];
  EXPECT_EQ(a[kSliceReplacementAnnotation], "ml/adamjob-fashion-mnist-ha-01234");
  EXPECT_EQ(a[kSliceNameAnnotation], "adamjob-fashion-mnist-ha-01234");
  EXPECT_EQ(a[kElasticJobAnnotation], "true");
  // A slice of a slice keeps the chain's name; the state read back says so.
  Json second = slice;
  second["metadata"]["namespace"] = "ml";
  const Json third = SliceReplacing(second, down, 9);
  EXPECT_EQ(third["metadata"]["annotations"][kSliceReplacementAnnotation],
            "ml/adamjob-fashion-mnist-ha-01234-g5");
  EXPECT_EQ(third["metadata"]["annotations"][kSliceNameAnnotation],
            "adamjob-fashion-mnist-ha-01234");
  const WorkloadState st = ReadWorkload(third);
  EXPECT_TRUE(st.elastic);
  EXPECT_EQ(st.slice_name, "adamjob-fashion-mnist-ha-01234");
  EXPECT_FALSE(ReadWorkload(admitted).elastic);
  EXPECT_EQ(ReadWorkload(admitted).slice_name, "adamjob-fashion-mnist-ha-01234");
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

// Kubernetes' own gang scheduling: one scheduling.k8s.io PodGroup of every pod of the job, named
// in each pod's (and the controllers' template's) spec.schedulingGroup, every pod made at once.
TEST(Coscheduling, KubernetesOwnGangNamesItsPodGroupInEveryPod) {
  const spec::AdamJob job = Parse("fashion-mnist-ha", "{schedulingPolicy: {gang: true}}");
  const Json* group = nullptr;
  int pods = 0;
  const std::vector<Json> objects = RenderOf(job);
  for (const Json& o : objects) {
    EXPECT_EQ(StageOf(o), 0) << o["kind"] << " " << o["metadata"]["name"];
    if (o["kind"] == "PodGroup") group = &o;
    const Json* spec = o["kind"] == "Pod"           ? &o["spec"]
                       : o["kind"] == "StatefulSet" ? &o["spec"]["template"]["spec"]
                                                    : nullptr;
    if (!spec) continue;
    pods += o["kind"] == "Pod";
    EXPECT_EQ(spec->value("schedulingGroup", Json()),
              Json::parse(R"({"podGroupName": "fashion-mnist-ha"})"))
        << o["metadata"]["name"];
    EXPECT_FALSE(o["metadata"]["labels"].contains(kPodGroupLabel));  // not the plugin's
  }
  ASSERT_NE(group, nullptr);
  EXPECT_EQ((*group)["apiVersion"], kGangApiVersion);
  // The 3 controllers too; nothing else in its spec.
  EXPECT_EQ((*group)["spec"], Json({{"schedulingPolicy", {{"gang", {{"minCount", pods + 3}}}}}}));
  EXPECT_EQ((*group)["metadata"]["ownerReferences"][0]["uid"], "0123456789");
  // Both gang schedulers at once: refused, naming them.
  auto both = spec::ParseAdamJob(
      testing::ReadText(std::string(ADAM_SOURCE_DIR) + "/examples/fashion-mnist.yaml") +
      "  runPolicy: {schedulingPolicy: {gang: true, coscheduling: true}}\n");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("spec.runPolicy.schedulingPolicy.gang: and coscheduling"),
            std::string::npos)
      << both.status().message();
}

}  // namespace
}  // namespace adam::op
