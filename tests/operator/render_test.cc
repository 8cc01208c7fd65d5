// `adam render`: golden files of the example manifests, and the placement they must carry.
// Regenerate the golden files after an intended change with ADAM_UPDATE_GOLDEN=1.
#include "reconcile/render.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "net/access.h"
#include "reconcile/state.h"
#include "spec/adamjob.h"
#include "spec/role_options.h"
#include "spec/yaml_json.h"
#include "testing/wait.h"

namespace adam::op {
namespace {

std::string Read(const std::string& path) { return testing::ReadText(path); }

std::string Source(const std::string& rel) { return std::string(ADAM_SOURCE_DIR) + "/" + rel; }

std::vector<Json> RenderExample(const std::string& name, const std::string& owner_uid = "") {
  const std::string text = Read(Source("examples/" + name + ".yaml"));
  auto job = spec::ParseAdamJob(text);
  EXPECT_TRUE(job.ok()) << job.status().message();
  RenderOptions o;
  o.manifest = text;
  o.owner_uid = owner_uid;
  return Render(*job, o);
}

RenderOptions WithManifest(const std::string& text) {
  RenderOptions o;
  o.manifest = text;
  return o;
}

std::vector<const Json*> Pods(const std::vector<Json>& objects, const std::string& role) {
  std::vector<const Json*> out;
  for (const auto& o : objects)
    if (o["kind"] == "Pod" && o["metadata"]["labels"][kRoleLabel] == role) out.push_back(&o);
  return out;
}

const Json* Find(const std::vector<Json>& objects, const std::string& kind) {
  for (const auto& o : objects)
    if (o["kind"] == kind) return &o;
  return nullptr;
}

class Golden : public ::testing::TestWithParam<const char*> {};

TEST_P(Golden, RenderMatchesTheGoldenFile) {
  const std::string name = GetParam();
  const std::string got = ToYaml(RenderExample(name));
  const std::string path = Source("tests/operator/golden/" + name + ".yaml");
  if (std::getenv("ADAM_UPDATE_GOLDEN")) {
    std::ofstream(path) << got;
    GTEST_SKIP() << "wrote " << path;
  }
  EXPECT_EQ(got, Read(path)) << "rerun with ADAM_UPDATE_GOLDEN=1 if the change is intended";
}

INSTANTIATE_TEST_SUITE_P(Examples, Golden, ::testing::Values("fashion-mnist", "fashion-mnist-ha"));

TEST(Render, YamlReadsBackToTheSameObjects) {
  for (const char* name : {"fashion-mnist", "fashion-mnist-ha"}) {
    for (const Json& o : RenderExample(name)) {
      const nlohmann::json back = spec::YamlToJson(ToYaml(o));
      EXPECT_EQ(back, nlohmann::json::parse(o.dump())) << ToYaml(o);
    }
  }
}

TEST(Render, CopiesNeverShareAHostAndControllersComeFirst) {
  const auto objects = RenderExample("fashion-mnist-ha");
  // Start order: controllers, then parameter servers, then data server and trainers.
  const Json* sts = Find(objects, "StatefulSet");
  ASSERT_NE(sts, nullptr);
  EXPECT_EQ(StageOf(*sts), 0);
  EXPECT_EQ((*sts)["spec"]["replicas"], 3);
  for (const Json* p : Pods(objects, "ps")) EXPECT_EQ(StageOf(*p), 1);
  for (const Json* p : Pods(objects, "trainer")) EXPECT_EQ(StageOf(*p), 2);
  for (const Json* p : Pods(objects, "data-server")) EXPECT_EQ(StageOf(*p), 2);
  for (size_t i = 1; i < objects.size(); ++i)
    EXPECT_LE(StageOf(objects[i - 1]), StageOf(objects[i]));

  // Required anti-affinity among the job's parameter servers (each holds a copy of every shard)
  // and among controller members, on the job's replica topology key.
  auto required = [](const Json& pod_spec, const std::string& role) {
    const Json& terms =
        pod_spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    EXPECT_EQ(terms.size(), 1u);
    EXPECT_EQ(terms[0]["topologyKey"], "kubernetes.io/hostname");
    EXPECT_EQ(terms[0]["labelSelector"]["matchLabels"][kRoleLabel], role);
    EXPECT_EQ(terms[0]["labelSelector"]["matchLabels"][kJobLabel], "fashion-mnist-ha");
  };
  const auto ps = Pods(objects, "ps");
  ASSERT_EQ(ps.size(), 3u);
  for (const Json* p : ps) {
    required((*p)["spec"], "ps");
    EXPECT_EQ((*p)["spec"]["topologySpreadConstraints"][0]["topologyKey"],
              "topology.kubernetes.io/zone");
  }
  required((*sts)["spec"]["template"]["spec"], "controller");
  // Each controller member finds its id in its host name; members are the StatefulSet's pods.
  const Json& args = (*sts)["spec"]["template"]["spec"]["containers"][0]["args"];
  const std::string joined = args.dump();
  EXPECT_NE(joined.find("\"--id\",\"hostname\""), std::string::npos);
  EXPECT_NE(joined.find("1=fashion-mnist-ha-controller-0.fashion-mnist-ha:7070,"),
            std::string::npos);
  // Every pod talks mutual TLS with the job's Secret.
  for (const Json& o : objects) {
    if (o["kind"] != "Pod") continue;
    EXPECT_NE(o["spec"]["containers"][0]["args"].dump().find("\"--tls-dir\",\"/etc/adam-tls\""),
              std::string::npos);
    bool secret = false;
    for (const Json& v : o["spec"]["volumes"])
      secret |= v.contains("secret") && v["secret"]["secretName"] == "fashion-mnist-ha-certs";
    EXPECT_TRUE(secret);
  }
  // Trainers route through the controller.
  const std::string targs = Pods(objects, "trainer")[0]->at("spec")["containers"][0]["args"].dump();
  EXPECT_NE(targs.find("--controller"), std::string::npos);
  EXPECT_EQ(targs.find("--ps\""), std::string::npos);
}

// The certificates the operator issues are exactly one per role the plan knows: each role's name
// (its subcommand) is a certificate name servers check callers by, and no certificate is for a
// role that does not exist.
TEST(Render, TheCertificateNamesAreTheRoles) {
  std::set<std::string_view> roles;
  for (spec::Role r : {spec::Role::kController, spec::Role::kParamServer, spec::Role::kTrainer,
                       spec::Role::kDataServer})
    roles.insert(spec::RoleSubcommand(r));
  EXPECT_EQ(roles, std::set<std::string_view>(net::kRoleNames.begin(), net::kRoleNames.end()));
}

// What the operator writes into a container's arguments is what `adam` reads: every pod's and
// the controllers' template's arguments parse back to their role, with the pod's TLS and state.
TEST(Render, EveryContainersArgumentsParseBackToItsRole) {
  for (const char* example : {"fashion-mnist", "fashion-mnist-ha"}) {
    SCOPED_TRACE(example);
    int parsed = 0;
    for (const Json& o : RenderExample(example, "uid-1")) {
      const Json* pod = o["kind"] == "Pod"           ? &o["spec"]
                        : o["kind"] == "StatefulSet" ? &o["spec"]["template"]["spec"]
                                                     : nullptr;
      if (!pod) continue;
      const auto args = (*pod)["containers"][0]["args"].get<std::vector<std::string>>();
      auto options = spec::ParseArgs(args);
      ASSERT_TRUE(options.ok()) << options.status().message();
      EXPECT_EQ(spec::RoleSubcommand(spec::RoleOf(*options)), args[0]);
      EXPECT_EQ(spec::Common(*options).tls_dir, "/etc/adam-tls");
      // ... where it finds its own role's certificate and key (named as servers check callers)
      // and the CA, and no other role's key.
      const std::string role = spec::RoleSubcommand(spec::RoleOf(*options));
      EXPECT_NE(std::find(net::kRoleNames.begin(), net::kRoleNames.end(), role),
                net::kRoleNames.end())
          << role;
      for (const Json& v : (*pod)["volumes"]) {
        if (v["name"] != "tls") continue;
        EXPECT_EQ(v["secret"]["items"].dump(),
                  Json::array({{{"key", "ca.crt"}, {"path", "ca.crt"}},
                               {{"key", role + ".crt"}, {"path", "tls.crt"}},
                               {{"key", role + ".key"}, {"path", "tls.key"}}})
                      .dump());
      }
      EXPECT_EQ(spec::Common(*options).job, std::string(spec::kJobMountPath) + "/job.yaml");
      if (const auto* c = std::get_if<spec::ControllerOptions>(&*options)) {
        EXPECT_EQ(c->id, "hostname");
        EXPECT_EQ(c->cluster_id, "uid-1");
      }
      if (const auto* p = std::get_if<spec::ParamServerOptions>(&*options)) {
        EXPECT_FALSE(p->state_dir.empty());
      }
      ++parsed;
    }
    EXPECT_GE(parsed, 4);
  }
}

// Data-server replicas: a pod each, preferably on different machines, and every trainer given
// them all.
TEST(Render, EveryTrainerIsGivenEveryDataServerReplica) {
  const std::string text = Read(Source("examples/fashion-mnist.yaml"));
  auto job = spec::ParseAdamJob(text);
  ASSERT_TRUE(job.ok()) << job.status().message();
  job->roles.data_server.replicas = 2;
  const auto objects = Render(*job, WithManifest(text));
  const auto servers = Pods(objects, "data-server");
  ASSERT_EQ(servers.size(), 2u);
  const std::string prefix = job->name + "-data-server-";
  for (int i = 0; i < 2; ++i) {
    const Json& pod = *servers[size_t(i)];
    EXPECT_EQ(pod["metadata"]["name"], prefix + std::to_string(i));
    const Json& term = pod["spec"]["affinity"]["podAntiAffinity"]
                          ["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"];
    EXPECT_EQ(term["labelSelector"]["matchLabels"][kRoleLabel], "data-server");
  }
  const std::vector<std::string> want = {prefix + "0." + job->name + ":7070",
                                         prefix + "1." + job->name + ":7070"};
  const auto trainers = Pods(objects, "trainer");
  ASSERT_EQ(trainers.size(), size_t(job->roles.trainer.replicas));
  for (const Json* t : trainers) {
    auto options =
        spec::ParseArgs((*t)["spec"]["containers"][0]["args"].get<std::vector<std::string>>());
    ASSERT_TRUE(options.ok()) << options.status().message();
    EXPECT_EQ(std::get<spec::TrainerOptions>(*options).data_server, want);
  }
  // One replica: as before, no anti-affinity for it.
  job->roles.data_server.replicas = 1;
  const auto one = Render(*job, WithManifest(text));
  EXPECT_FALSE(Pods(one, "data-server")[0]->at("spec").contains("affinity"));
}

// A split replica: its model worker is a pod of its own role, required where its trainer is,
// and both listen for the exchange at the addresses the other is given.
TEST(Render, AModelWorkerGoesWhereItsTrainerIs) {
  const auto objects = RenderExample("fashion-mnist-split");
  const auto trainers = Pods(objects, "trainer");
  const auto workers = Pods(objects, "model-worker");
  ASSERT_EQ(trainers.size(), 1u);
  ASSERT_EQ(workers.size(), 1u);
  const Json& w = *workers[0];
  EXPECT_EQ(w["metadata"]["name"], "fashion-mnist-split-trainer-0-w1");
  const Json& term =
      w["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
  EXPECT_EQ(term["topologyKey"], "kubernetes.io/hostname");
  EXPECT_EQ(term["labelSelector"]["matchLabels"][kRoleLabel], "trainer");
  EXPECT_EQ(term["labelSelector"]["matchLabels"][kIndexLabel], "0");
  EXPECT_EQ(StageOf(w), StageOf(*trainers[0]));
  const std::vector<std::string> addrs = {
      "fashion-mnist-split-trainer-0.fashion-mnist-split:" + std::to_string(kGrpcPort),
      "fashion-mnist-split-trainer-0-w1.fashion-mnist-split:" + std::to_string(kGrpcPort)};
  for (const Json* p : {trainers[0], workers[0]}) {
    auto o = spec::ParseArgs((*p)["spec"]["containers"][0]["args"].get<std::vector<std::string>>());
    ASSERT_TRUE(o.ok()) << o.status().message();
    const auto& t = std::get<spec::TrainerOptions>(*o);
    EXPECT_EQ(t.model_workers, addrs);
    EXPECT_EQ(t.model_worker, p == workers[0] ? 1 : 0);
    EXPECT_EQ((*p)["spec"]["containers"][0]["ports"][0]["name"], "grpc");
  }
  auto job = spec::ParseAdamJob(Read(Source("examples/fashion-mnist-split.yaml")));
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(PodCount(*job), 2 + 1 + 2);
}

// The role labels render writes are the ones the reconciler reads back (PodRoleOf): every pod and
// the controllers' pod template of the examples with copies and with a split trainer carry a
// known role, named as its label says; the status lists every role but the model worker.
TEST(Render, EveryRoleLabelReadsBackAsItsRole) {
  std::set<PodRole> seen;
  for (const char* example : {"fashion-mnist-ha", "fashion-mnist-split"}) {
    for (const Json& o : RenderExample(example)) {
      Json labelled;
      if (o["kind"] == "Pod") labelled = o;
      if (o["kind"] == "StatefulSet") labelled = o["spec"]["template"];
      if (labelled.is_null()) continue;
      const PodRole role = PodRoleOf(labelled);
      ASSERT_NE(role, PodRole::kNone) << o["metadata"]["name"];
      EXPECT_EQ(RoleName(role), labelled["metadata"]["labels"][kRoleLabel].get<std::string>());
      seen.insert(role);
    }
  }
  EXPECT_EQ(seen,
            (std::set<PodRole>{PodRole::kController, PodRole::kParamServer, PodRole::kDataServer,
                               PodRole::kTrainer, PodRole::kModelWorker}));
  EXPECT_EQ(PodRoleOf(Json{{"metadata", {{"labels", {{kRoleLabel, "sidecar"}}}}}}), PodRole::kNone);
  EXPECT_EQ(std::set<PodRole>(std::begin(kRoles), std::end(kRoles)).count(PodRole::kModelWorker),
            0u);
}

TEST(Render, WithoutCopiesServersOnlyPreferSeparateHosts) {
  const auto objects = RenderExample("fashion-mnist");
  EXPECT_EQ(Find(objects, "StatefulSet"), nullptr);  // no controller group
  for (const Json* p : Pods(objects, "ps")) {
    const Json& anti = (*p)["spec"]["affinity"]["podAntiAffinity"];
    EXPECT_FALSE(anti.contains("requiredDuringSchedulingIgnoredDuringExecution"));
    EXPECT_TRUE(anti.contains("preferredDuringSchedulingIgnoredDuringExecution"));
    EXPECT_EQ(StageOf(*p), 0);
  }
  for (const Json* p : Pods(objects, "trainer")) EXPECT_EQ(StageOf(*p), 1);
}

TEST(Render, NumaPinningMeansGuaranteedQosWithWholeCpus) {
  for (const Json& o : RenderExample("fashion-mnist")) {
    if (o["kind"] != "Pod") continue;
    const Json& res = o["spec"]["containers"][0]["resources"];
    EXPECT_EQ(res["requests"], res["limits"]) << o["metadata"]["name"];
    const std::string cpu = res["requests"]["cpu"];
    EXPECT_EQ(cpu.find_first_not_of("0123456789"), std::string::npos) << cpu;
    EXPECT_TRUE(res["requests"].contains("memory"));
  }
  // Without pinning: no limits, and the processes do not bind threads.
  auto text = Read(Source("examples/fashion-mnist.yaml")) + "  placement: {numaPinning: false}\n";
  auto job = spec::ParseAdamJob(text);
  ASSERT_TRUE(job.ok()) << job.status().message();
  for (const Json& o : Render(*job, WithManifest(text))) {
    if (o["kind"] != "Pod") continue;
    EXPECT_FALSE(o["spec"]["containers"][0]["resources"].contains("limits"));
    const std::string role = o["metadata"]["labels"][kRoleLabel];
    if (role == "ps" || role == "trainer") {
      EXPECT_NE(o["spec"]["containers"][0]["args"].dump().find("--no-bind"), std::string::npos);
    }
  }
}

TEST(Render, ReplicationNetworkGoesThroughMultusAndTheDownwardApi) {
  auto text = Read(Source("examples/fashion-mnist-ha.yaml")) +
              "  networks: {replication: adam-replication}\n";
  auto job = spec::ParseAdamJob(text);
  ASSERT_TRUE(job.ok()) << job.status().message();
  const auto objects = Render(*job, WithManifest(text));
  for (const Json* p : Pods(objects, "ps")) {
    EXPECT_EQ((*p)["metadata"]["annotations"][kMultusAnnotation], "adam-replication");
    const std::string args = (*p)["spec"]["containers"][0]["args"].dump();
    EXPECT_NE(args.find("\"--replication-network\",\"adam-replication\""), std::string::npos);
    // The file the server reads its annotations from is the one the downward-API volume holds.
    std::string volume, item_path;
    for (const Json& v : (*p)["spec"]["volumes"])
      if (v.contains("downwardAPI"))
        for (const Json& item : v["downwardAPI"]["items"])
          if (item["fieldRef"]["fieldPath"] == "metadata.annotations") {
            volume = v["name"];
            item_path = item["path"];
          }
    ASSERT_FALSE(volume.empty()) << "no downward-API volume with the pod's annotations";
    std::string mounted;
    for (const Json& m : (*p)["spec"]["containers"][0]["volumeMounts"])
      if (m["name"] == volume) mounted = m["mountPath"].get<std::string>() + "/" + item_path;
    auto options =
        spec::ParseArgs((*p)["spec"]["containers"][0]["args"].get<std::vector<std::string>>());
    ASSERT_TRUE(options.ok()) << options.status().message();
    EXPECT_EQ(std::get<spec::ParamServerOptions>(*options).pod_annotations, mounted);
  }
  for (const Json* p : Pods(objects, "trainer"))
    EXPECT_FALSE((*p)["metadata"]["annotations"].contains(kMultusAnnotation));
}

// spec.dataset.volume goes read-only into the data server's pod only; spec.output.volume
// writable into trainer 0's only, which writes the model there.
TEST(Render, TheDataSetVolumeOnlyInTheDataServerTheOutputOnlyInTrainer0) {
  std::string text = Read(Source("examples/fashion-mnist-ha.yaml"));
  const std::string from = "/usr/share/datasets/fashion-mnist/";
  for (size_t at; (at = text.find(from)) != std::string::npos;)
    text.replace(at, from.size(), "/data/");
  text.replace(text.find("    augment:"), 0,
               "    volume: {persistentVolumeClaim: {claimName: fashion-mnist, readOnly: true}}\n");
  text +=
      "  output: {volume: {nfs: {server: nfs.example, path: /models}}, mountPath: /models, "
      "everyEpochs: 2}\n";
  auto job = spec::ParseAdamJob(text);
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(ModelPath(*job), "/models/fashion-mnist-ha.onnx");
  const auto objects = Render(*job, WithManifest(text));
  auto volume = [](const Json& pod, const std::string& name) -> const Json* {
    for (const Json& v : pod["spec"]["volumes"])
      if (v["name"] == name) return &v;
    return nullptr;
  };
  auto mount = [](const Json& pod, const std::string& name) -> const Json* {
    for (const Json& m : pod["spec"]["containers"][0]["volumeMounts"])
      if (m["name"] == name) return &m;
    return nullptr;
  };
  int pods = 0;
  for (const Json& o : objects) {
    if (o["kind"] != "Pod") continue;
    ++pods;
    const std::string role = o["metadata"]["labels"][kRoleLabel];
    const bool data_server = role == "data-server";
    const bool trainer0 = o["metadata"]["name"] == "fashion-mnist-ha-trainer-0";
    SCOPED_TRACE(o["metadata"]["name"].get<std::string>());
    EXPECT_EQ(volume(o, "dataset") != nullptr, data_server);
    EXPECT_EQ(mount(o, "dataset") != nullptr, data_server);
    EXPECT_EQ(volume(o, "output") != nullptr, trainer0);
    const std::string args = o["spec"]["containers"][0]["args"].dump();
    EXPECT_EQ(args.find("\"--model-out\",\"/models/fashion-mnist-ha.onnx\"") != std::string::npos,
              trainer0);
    if (data_server) {
      EXPECT_EQ((*volume(o, "dataset"))["persistentVolumeClaim"]["claimName"], "fashion-mnist");
      EXPECT_EQ((*mount(o, "dataset"))["mountPath"], "/data");
      EXPECT_EQ((*mount(o, "dataset"))["readOnly"], true);
    }
    if (trainer0) {
      EXPECT_EQ((*volume(o, "output"))["nfs"]["path"], "/models");
      EXPECT_EQ((*mount(o, "output"))["mountPath"], "/models");
      EXPECT_FALSE(mount(o, "output")->contains("readOnly"));
    }
  }
  EXPECT_GT(pods, 3);
}

// spec.podTemplate and a role's own go into every pod (and the controllers' pod template) beside
// Adam's settings, which stay: labels, env, volumes, the non-root user, anti-affinity between
// copies. The user's anti-affinity terms join Adam's.
TEST(Render, PodTemplatesAddToAdamsSettingsWithoutReplacingThem) {
  nlohmann::json job_json = spec::YamlToJson(Read(Source("examples/fashion-mnist-ha.yaml")));
  job_json["spec"]["podTemplate"] = spec::YamlToJson(R"(
labels: {team: vision}
annotations: {example.com/owner: ml}
nodeSelector: {pool: training}
tolerations: [{key: dedicated, operator: Equal, value: training, effect: NoSchedule}]
priorityClassName: batch-high
serviceAccountName: trainer-sa
imagePullSecrets: [{name: registry-key}]
env: [{name: TZ, value: UTC}, {name: MODE, value: all}]
volumes: [{name: cache, emptyDir: {}}]
volumeMounts: [{name: cache, mountPath: /cache}]
securityContext: {runAsUser: 2000, supplementalGroups: [3000]}
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - {labelSelector: {matchLabels: {noisy: "true"}}, topologyKey: kubernetes.io/hostname}
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms: [{matchExpressions: [{key: arch, operator: In, values: [amd64]}]}]
)");
  job_json["spec"]["roles"]["trainer"]["podTemplate"] =
      spec::YamlToJson("{env: [{name: MODE, value: trainer}], schedulerName: gang}");
  const std::string text = job_json.dump();
  auto job = spec::ParseAdamJob(text);
  ASSERT_TRUE(job.ok()) << job.status().message();
  const auto objects = Render(*job, WithManifest(text));
  int pods = 0;
  for (const Json& o : objects) {
    const Json* md = nullptr;
    const Json* spec = nullptr;
    if (o["kind"] == "Pod") {
      md = &o["metadata"];
      spec = &o["spec"];
    } else if (o["kind"] == "StatefulSet") {
      md = &o["spec"]["template"]["metadata"];
      spec = &o["spec"]["template"]["spec"];
    } else {
      EXPECT_FALSE(o["metadata"]["labels"].contains("team")) << o["kind"];  // pods only
      continue;
    }
    ++pods;
    const std::string role = (*md)["labels"][kRoleLabel];
    SCOPED_TRACE(o["metadata"]["name"].get<std::string>());
    EXPECT_EQ((*md)["labels"]["team"], "vision");
    EXPECT_EQ((*md)["labels"][kJobLabel], "fashion-mnist-ha");
    EXPECT_EQ((*md)["annotations"]["example.com/owner"], "ml");
    EXPECT_TRUE((*md)["annotations"].contains(kStageAnnotation));
    EXPECT_EQ((*spec)["nodeSelector"]["pool"], "training");
    EXPECT_EQ((*spec)["tolerations"][0]["key"], "dedicated");
    EXPECT_EQ((*spec)["priorityClassName"], "batch-high");
    EXPECT_EQ((*spec)["serviceAccountName"], "trainer-sa");
    EXPECT_EQ((*spec)["imagePullSecrets"][0]["name"], "registry-key");
    EXPECT_EQ(spec->value("schedulerName", "") == "gang", role == "trainer");
    EXPECT_EQ((*spec)["securityContext"]["runAsUser"], 2000);
    EXPECT_EQ((*spec)["securityContext"]["runAsNonRoot"], true);
    EXPECT_EQ((*spec)["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    EXPECT_EQ((*spec)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                     ["nodeSelectorTerms"][0]["matchExpressions"][0]["key"],
              "arch");
    const Json& container = (*spec)["containers"][0];
    std::map<std::string, std::string> env;
    for (const Json& e : container["env"]) env[e["name"]] = e.value("value", "(from)");
    EXPECT_EQ(env["ADAM_POD_NAME"], "(from)");
    EXPECT_EQ(env["TZ"], "UTC");
    EXPECT_EQ(env["MODE"], role == "trainer" ? "trainer" : "all");
    std::set<std::string> volumes, mounts;
    for (const Json& v : (*spec)["volumes"]) volumes.insert(v["name"]);
    for (const Json& m : container["volumeMounts"]) mounts.insert(m["mountPath"]);
    EXPECT_TRUE(volumes.count("cache") && volumes.count("job") && volumes.count("tls"));
    EXPECT_TRUE(mounts.count("/cache") && mounts.count(kJobMountPath));
    // Copies of a shard (and controller members) still never share a host; the user's term
    // is added to Adam's, not put in its place.
    const Json anti = (*spec)["affinity"]["podAntiAffinity"];
    const Json required = anti.value("requiredDuringSchedulingIgnoredDuringExecution", Json());
    ASSERT_TRUE(required.is_array());
    EXPECT_EQ(required.back()["labelSelector"]["matchLabels"]["noisy"], "true");
    if (role == "ps" || role == "controller") {
      ASSERT_EQ(required.size(), 2u);
      EXPECT_EQ(required[0]["labelSelector"]["matchLabels"][kRoleLabel], role);
    } else {
      EXPECT_EQ(required.size(), 1u);
    }
  }
  EXPECT_GT(pods, 5);
}

// Only the job's own pods reach its gRPC and replication ports; /metrics stays scrapeable.
TEST(Render, NetworkPolicyAdmitsOnlyTheJobsPods) {
  const auto objects = RenderExample("fashion-mnist-ha");
  const Json* np = Find(objects, "NetworkPolicy");
  ASSERT_NE(np, nullptr);
  EXPECT_EQ(StageOf(*np), 0);
  const Json& spec = (*np)["spec"];
  EXPECT_EQ(spec["podSelector"]["matchLabels"][kJobLabel], "fashion-mnist-ha");
  EXPECT_EQ(spec["policyTypes"], Json::array({"Ingress"}));
  ASSERT_EQ(spec["ingress"].size(), 2u);
  const Json& peers = spec["ingress"][0];
  EXPECT_EQ(peers["from"][0]["podSelector"]["matchLabels"][kJobLabel], "fashion-mnist-ha");
  std::set<int> ports;
  for (const Json& p : peers["ports"]) ports.insert(p["port"].get<int>());
  EXPECT_EQ(ports, (std::set<int>{kGrpcPort, kReplicationPort}));
  const Json& metrics = spec["ingress"][1];
  EXPECT_FALSE(metrics.contains("from"));  // any scraper
  EXPECT_EQ(metrics["ports"][0]["port"], kMetricsPort);
}

// No role calls the Kubernetes API, so no pod of a job carries a service-account token, the
// controllers' StatefulSet template included.
TEST(Render, NoPodMountsAServiceAccountToken) {
  int pods = 0;
  for (const Json& o : RenderExample("fashion-mnist-ha")) {
    const Json* spec = o["kind"] == "Pod"           ? &o["spec"]
                       : o["kind"] == "StatefulSet" ? &o["spec"]["template"]["spec"]
                                                    : nullptr;
    if (!spec) continue;
    ++pods;
    EXPECT_EQ(spec->value("automountServiceAccountToken", true), false) << o["metadata"]["name"];
  }
  EXPECT_GE(pods, 4);
}

TEST(Render, OwnedObjectsHaveUniqueNamesAndOwnerReferences) {
  const auto objects = RenderExample("fashion-mnist-ha", "uid-1");
  std::set<std::string> names;
  for (const Json& o : objects) {
    EXPECT_TRUE(
        names.insert(std::string(o["kind"]) + "/" + std::string(o["metadata"]["name"])).second);
    if (o["kind"] == "PersistentVolumeClaim") {  // checkpoints outlive the job
      EXPECT_FALSE(o["metadata"].contains("ownerReferences"));
      continue;
    }
    ASSERT_EQ(o["metadata"]["ownerReferences"].size(), 1u);
    EXPECT_EQ(o["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    EXPECT_EQ(o["metadata"]["ownerReferences"][0]["controller"], true);
    EXPECT_EQ(o["metadata"]["namespace"], "default");
  }
  // Each pod's host name under the job's Service is the address its peers are given.
  for (const Json* p : Pods(objects, "ps")) {
    EXPECT_EQ((*p)["spec"]["subdomain"], "fashion-mnist-ha");
    EXPECT_EQ((*p)["spec"]["hostname"], (*p)["metadata"]["name"]);
  }
  const Json* svc = Find(objects, "Service");
  ASSERT_NE(svc, nullptr);
  EXPECT_EQ((*svc)["spec"]["clusterIP"], "None");
  EXPECT_EQ((*svc)["spec"]["publishNotReadyAddresses"], true);
}

}  // namespace
}  // namespace adam::op
