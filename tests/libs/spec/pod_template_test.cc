// Pod templates: what a manifest may add to its pods, what it may not take from Adam, and how a
// role's template merges over the job-wide one.
#include "spec/pod_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "spec/adamjob.h"
#include "spec/yaml_json.h"
#include "testing/wait.h"

namespace adam::spec {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// The HA example (3 copies, a controller group), as JSON.
Json Example() {
  return YamlToJson(
      testing::ReadText(std::string(ADAM_SOURCE_DIR) + "/examples/fashion-mnist-ha.yaml"));
}

// The HA example with `pointer` set to `value` (YAML), parsed.
StatusOr<AdamJob> ExampleWith(const std::string& pointer, const std::string& value) {
  Json job = Example();
  job[Json::json_pointer(pointer)] = YamlToJson(value);
  return ParseAdamJob(job.dump());
}

std::string ErrorOf(const std::string& pointer, const std::string& value) {
  auto job = ExampleWith(pointer, value);
  EXPECT_FALSE(job.ok()) << pointer << " = " << value;
  return job.ok() ? "" : job.status().message();
}

TEST(PodTemplate, EveryFieldACleanClusterAsksForIsKept) {
  auto job = ExampleWith("/spec/podTemplate", R"(
labels: {team: vision}
annotations: {example.com/cost-center: "42"}
nodeSelector: {pool: training}
tolerations: [{key: dedicated, operator: Equal, value: training, effect: NoSchedule}]
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: []}}}
priorityClassName: batch-high
schedulerName: default-scheduler
serviceAccountName: trainer-sa
imagePullSecrets: [{name: registry-key}]
env: [{name: TZ, value: UTC}]
volumes: [{name: cache, emptyDir: {}}]
volumeMounts: [{name: cache, mountPath: /cache}]
securityContext: {runAsUser: 2000, supplementalGroups: [3000]}
)");
  ASSERT_TRUE(job.ok()) << job.status().message();
  const Json t = Json::parse(job->pod_template);
  EXPECT_EQ(t["labels"]["team"], "vision");
  EXPECT_EQ(t["securityContext"]["runAsUser"], 2000);
  EXPECT_EQ(t["volumeMounts"][0]["mountPath"], "/cache");
  EXPECT_TRUE(job->roles.trainer.pod_template.empty());
}

TEST(PodTemplate, ConflictsWithAdamsOwnSettingsAreRefusedNamingBoth) {
  EXPECT_THAT(ErrorOf("/spec/podTemplate", "{labels: {app.kubernetes.io/component: web}}"),
              HasSubstr("spec.podTemplate.labels.app.kubernetes.io/component: is Adam's own "
                        "label"));
  EXPECT_THAT(ErrorOf("/spec/roles/trainer/podTemplate", "{annotations: {adam.dev/stage: '9'}}"),
              HasSubstr("spec.roles.trainer.podTemplate.annotations.adam.dev/stage: is Adam's "
                        "own annotation"));
  EXPECT_THAT(ErrorOf("/spec/podTemplate", "{env: [{name: ADAM_CPU_LIMIT_MILLIS, value: '1'}]}"),
              HasSubstr("spec.podTemplate.env[0].name: 'ADAM_CPU_LIMIT_MILLIS': ADAM_* "
                        "variables are Adam's own"));
  EXPECT_THAT(ErrorOf("/spec/podTemplate", "{volumes: [{name: state, emptyDir: {}}]}"),
              HasSubstr("spec.podTemplate.volumes[0].name: 'state' is the name of one of "
                        "Adam's own volumes"));
  EXPECT_THAT(
      ErrorOf("/spec/podTemplate",
              "{volumes: [{name: c, emptyDir: {}}], volumeMounts: [{name: c, mountPath: /tmp}]}"),
      HasSubstr("spec.podTemplate.volumeMounts[0].mountPath: '/tmp' would overlap /tmp"));
  EXPECT_THAT(ErrorOf("/spec/podTemplate", "{securityContext: {runAsNonRoot: false}}"),
              HasSubstr("spec.podTemplate.securityContext.runAsNonRoot: Adam's pods run as a "
                        "non-root user"));
}

TEST(PodTemplate, AMultusAnnotationConflictsOnlyWithTheReplicationNetwork) {
  const std::string multus = "{annotations: {k8s.v1.cni.cncf.io/networks: other}}";
  // Without spec.networks.replication, a template may attach any network.
  EXPECT_TRUE(ExampleWith("/spec/podTemplate", multus).ok());
  Json job = Example();
  job["spec"]["networks"] = {{"replication", "repl"}};
  job["spec"]["roles"]["trainer"]["podTemplate"] = YamlToJson(multus);
  EXPECT_TRUE(ParseAdamJob(job.dump()).ok());  // trainers carry no replication network
  job["spec"]["podTemplate"] = YamlToJson(multus);
  auto parsed = ParseAdamJob(job.dump());
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(),
              HasSubstr("spec.podTemplate.annotations.k8s.v1.cni.cncf.io/networks: conflicts "
                        "with spec.networks.replication ('repl')"));
}

TEST(PodTemplate, MountsNameTheirOwnOrTheJobWideVolumes) {
  Json job = Example();
  job["spec"]["podTemplate"] = YamlToJson("{volumes: [{name: shared, emptyDir: {}}]}");
  job["spec"]["roles"]["trainer"]["podTemplate"] =
      YamlToJson("{volumeMounts: [{name: shared, mountPath: /shared}]}");
  EXPECT_TRUE(ParseAdamJob(job.dump()).ok());
  job["spec"]["roles"]["trainer"]["podTemplate"] =
      YamlToJson("{volumeMounts: [{name: nowhere, mountPath: /x}]}");
  auto parsed = ParseAdamJob(job.dump());
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(),
              HasSubstr("spec.roles.trainer.podTemplate.volumeMounts[0].name: 'nowhere' is not "
                        "a volume of this podTemplate"));
}

TEST(PodTemplate, MalformedFieldsAreNamed) {
  const std::string all = ErrorOf("/spec/podTemplate", R"(
nodeSelector: {gpu: true}
tolerations: {key: x}
affinity: {antiAffinity: {}}
schedulerName: My_Scheduler
env: [{name: A, value: x}, {name: A, value: y}]
volumes: [{name: v}]
volumeMounts: [{name: v, mountPath: relative}]
hostNetwork: true
)");
  EXPECT_THAT(all, HasSubstr("spec.podTemplate.nodeSelector.gpu: must be a string"));
  EXPECT_THAT(all, HasSubstr("spec.podTemplate.tolerations: must be a list"));
  EXPECT_THAT(all, HasSubstr("spec.podTemplate.affinity.antiAffinity: unknown field"));
  EXPECT_THAT(all, HasSubstr("spec.podTemplate.schedulerName: must be a DNS subdomain name"));
  EXPECT_THAT(all, HasSubstr("spec.podTemplate.env[1].name: 'A' is given twice"));
  EXPECT_THAT(all, HasSubstr("spec.podTemplate.volumes[0]: needs a volume source"));
  EXPECT_THAT(all, HasSubstr("spec.podTemplate.volumeMounts[0].mountPath: must be an absolute"));
  EXPECT_THAT(all, HasSubstr("spec.podTemplate.hostNetwork: unknown field"));
  EXPECT_THAT(ErrorOf("/spec/roles/dataServer/podTemplate", "[1, 2]"),
              HasSubstr("spec.roles.dataServer.podTemplate: must be a mapping"));
  EXPECT_THAT(ErrorOf("/spec/podTemplate", "{labels: {'-bad': x}}"),
              HasSubstr("spec.podTemplate.labels.-bad: is not a label key"));
}

// Kueue's topology-aware scheduling annotations are read as Kueue reads them; what Kueue would
// refuse (or the operator writes itself) is refused here, naming the annotation.
TEST(PodTemplate, KueueTopologyAnnotationsAreChecked) {
  EXPECT_TRUE(ExampleWith("/spec/roles/trainer/podTemplate", R"(
annotations:
  kueue.x-k8s.io/podset-required-topology: example.com/rack
  kueue.x-k8s.io/podset-slice-required-topology: kubernetes.io/hostname
  kueue.x-k8s.io/podset-slice-size: "2"
)")
                  .ok());
  EXPECT_TRUE(ExampleWith("/spec/podTemplate",
                          "{annotations: {kueue.x-k8s.io/podset-unconstrained-topology: 'false'}}")
                  .ok());
  const std::string at = "spec.podTemplate.annotations.kueue.x-k8s.io/";
  const std::string all = ErrorOf("/spec/podTemplate", R"(
annotations:
  kueue.x-k8s.io/podset-required-topology: "not a level"
  kueue.x-k8s.io/podset-preferred-topology: "-rack"
  kueue.x-k8s.io/podset-unconstrained-topology: "yes"
  kueue.x-k8s.io/podset-slice-size: "0"
  kueue.x-k8s.io/workload: mine
labels: {kueue.x-k8s.io/podset: trainer}
)");
  EXPECT_THAT(all, HasSubstr(at + "podset-required-topology: is not a topology level"));
  EXPECT_THAT(all, HasSubstr(at + "podset-preferred-topology: is not a topology level"));
  EXPECT_THAT(all, HasSubstr(at + "podset-unconstrained-topology: must be \"true\" or \"false\""));
  EXPECT_THAT(all, HasSubstr(at + "podset-slice-size: must be a whole number of pods"));
  EXPECT_THAT(all, HasSubstr(at + "workload: is written by the operator"));
  EXPECT_THAT(all, HasSubstr("spec.podTemplate.labels.kueue.x-k8s.io/podset: is written by"));
  EXPECT_THAT(
      ErrorOf("/spec/podTemplate", "{annotations: {kueue.x-k8s.io/podset-slice-size: '3'}}"),
      HasSubstr(at + "podset-slice-size: needs kueue.x-k8s.io/podset-slice-required"));
  EXPECT_THAT(
      ErrorOf("/spec/podTemplate",
              "{annotations: {kueue.x-k8s.io/podset-slice-required-topology: example.com/rack}}"),
      HasSubstr(at + "podset-slice-required-topology: needs kueue.x-k8s.io/podset-slice-size"));
}

TEST(PodTemplate, TheRolesTemplateMergesOverTheJobWideOne) {
  const Json job_wide = YamlToJson(R"(
labels: {team: vision, tier: batch}
nodeSelector: {pool: training}
tolerations: [{key: a}]
env: [{name: TZ, value: UTC}, {name: MODE, value: all}]
volumes: [{name: cache, emptyDir: {}}]
affinity: {nodeAffinity: {x: 1}, podAffinity: {y: 1}}
priorityClassName: low
)");
  const Json role = YamlToJson(R"(
labels: {tier: interactive}
tolerations: [{key: b}]
env: [{name: MODE, value: trainer}, {name: EXTRA, value: '1'}]
volumes: [{name: cache, hostPath: {path: /fast}}]
affinity: {nodeAffinity: {z: 2}}
priorityClassName: high
)");
  const Json m = MergePodTemplates(job_wide, role);
  EXPECT_EQ(m["labels"], YamlToJson("{team: vision, tier: interactive}"));
  EXPECT_EQ(m["nodeSelector"]["pool"], "training");
  EXPECT_EQ(m["tolerations"], YamlToJson("[{key: a}, {key: b}]"));
  EXPECT_EQ(m["env"],
            YamlToJson("[{name: TZ, value: UTC}, {name: MODE, value: trainer}, {name: EXTRA, "
                       "value: '1'}]"));
  ASSERT_EQ(m["volumes"].size(), 1u);
  EXPECT_EQ(m["volumes"][0]["hostPath"]["path"], "/fast");
  EXPECT_EQ(m["affinity"], YamlToJson("{nodeAffinity: {z: 2}, podAffinity: {y: 1}}"));
  EXPECT_EQ(m["priorityClassName"], "high");
  EXPECT_EQ(MergePodTemplates(Json(), role), role);
  EXPECT_EQ(MergePodTemplates(job_wide, Json()), job_wide);
  EXPECT_THAT(VolumeNames(job_wide), ElementsAre("cache"));
}

}  // namespace
}  // namespace adam::spec
