// `adam render`: golden files of the example manifests, and the placement they must carry.
// Regenerate the golden files after an intended change with ADAM_UPDATE_GOLDEN=1.
#include "reconcile/render.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

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
      secret |= v.contains("secret") && v["secret"]["secretName"] == "fashion-mnist-ha-tls";
    EXPECT_TRUE(secret);
  }
  // Trainers route through the controller.
  const std::string targs = Pods(objects, "trainer")[0]->at("spec")["containers"][0]["args"].dump();
  EXPECT_NE(targs.find("--controller"), std::string::npos);
  EXPECT_EQ(targs.find("--ps\""), std::string::npos);
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
