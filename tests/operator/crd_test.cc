// The CRD without a cluster: its schema and CEL rules accept every example and refuse the bad
// manifests docs/kubernetes.md lists, and `adam validate` refuses the same ones (one schema, two
// paths). Also pins the CEL interpreter the check runs on.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "operator/openapi.h"
#include "spec/adamjob.h"
#include "testing/wait.h"

namespace adam::testing {
namespace {

using Json = nlohmann::json;

std::string Read(const std::string& path) { return testing::ReadText(path); }

const Json& Crd() {
  static const Json crd = YamlToJson(Read(std::string(ADAM_SOURCE_DIR) + "/crds/adam.dev_adamjobs.yaml"));
  return crd;
}

const Json& Schema() { return Crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]; }

std::string Joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

// Serialises JSON as YAML (JSON is YAML) for ParseAdamJob.
std::string AsManifest(const Json& j) { return j.dump(); }

TEST(Cel, Basics) {
  const Json self = {{"a", 3}, {"s", "bounded"}, {"l", {1, 2, 3}}, {"m", {{"k", true}}}};
  EXPECT_EQ(EvalCel("self.a % 2 == 1", self), "true");
  EXPECT_EQ(EvalCel("self.a + 1 <= 3", self), "false");
  EXPECT_EQ(EvalCel("has(self.a) && !has(self.b)", self), "true");
  EXPECT_EQ(EvalCel("has(self.m.k) && self.m.k", self), "true");
  EXPECT_EQ(EvalCel("self.l[size(self.l) - 1] == 3", self), "true");
  EXPECT_EQ(EvalCel("self.s == 'bounded' ? self.a > 1 : false", self), "true");
  EXPECT_EQ(EvalCel("self.s.matches('^b.*d$')", self), "true");
  EXPECT_EQ(EvalCel("size(self.s) == 7", self), "true");
}

TEST(Cel, ErrorsAreAbsorbedByLogicAsInCel) {
  const Json self = {{"a", 1}};
  EXPECT_EQ(EvalCel("self.missing == 1 || true", self), "true");
  EXPECT_EQ(EvalCel("false && self.missing == 1", self), "false");
  EXPECT_EQ(EvalCel("self.missing == 1 || false", self).rfind("error:", 0), 0u);
  EXPECT_EQ(EvalCel("self.a == ", self).rfind("error:", 0), 0u);
  EXPECT_EQ(EvalCel("self.a", self).rfind("error:", 0), 0u);  // not a bool
  EXPECT_EQ(EvalCel("oldSelf == self", self).rfind("error:", 0), 0u);
  const Json old = {{"a", 2}};
  EXPECT_EQ(EvalCel("self == oldSelf", self, &old), "false");
}

TEST(Crd, NamesSubresourceAndColumns) {
  const Json& spec = Crd()["spec"];
  EXPECT_EQ(Crd()["metadata"]["name"], "adamjobs.adam.dev");
  EXPECT_EQ(spec["group"], "adam.dev");
  EXPECT_EQ(spec["names"]["kind"], "AdamJob");
  EXPECT_EQ(spec["names"]["plural"], "adamjobs");
  EXPECT_EQ(spec["names"]["shortNames"], Json::array({"aj"}));
  const Json& v = spec["versions"][0];
  EXPECT_EQ(v["name"], "v1alpha1");
  EXPECT_TRUE(v["subresources"].contains("status"));
  std::vector<std::string> columns;
  for (const auto& c : v["additionalPrinterColumns"]) columns.push_back(c["name"]);
  EXPECT_EQ(columns, (std::vector<std::string>{"Phase", "Epoch", "Accuracy", "Age"}));
}

// Every field the manifest parser reads has a place in the schema, and nothing more: a field
// the CRD prunes or refuses cannot reach the roles.
TEST(Crd, EveryExampleIsAcceptedByBothPaths) {
  int examples = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(ADAM_SOURCE_DIR) + "/examples")) {
    if (e.path().extension() != ".yaml") continue;
    ++examples;
    const std::string text = Read(e.path());
    const Json job = YamlToJson(text);
    EXPECT_EQ(Joined(ValidateAgainstSchema(Schema(), job)), "") << e.path();
    EXPECT_TRUE(spec::ParseAdamJob(text).ok()) << e.path();
  }
  EXPECT_GE(examples, 2);
}

struct Bad {
  const char* name;
  const char* pointer;  // JSON pointer into the example
  Json value;           // set there (null: remove)
  const char* crd_error;
  const char* validate_error;
};

// The catalogue of documented bad manifests (docs/kubernetes.md).
const std::vector<Bad>& BadManifests() {
  static const std::vector<Bad> bad = {
      {"misspelt field", "/spec/training/learningrate", 0.1, "spec.training.learningrate: unknown field",
       "spec.training.learningrate: unknown field"},
      {"even controller group", "/spec/roles/controller/replicas", 2, "must be odd", "must be odd"},
      {"more copies than servers", "/spec/roles/parameterServer/copies", 4,
       "copies: at most spec.roles.parameterServer.replicas", "parameter servers can hold a copy"},
      {"activations with copies", "/spec/training/denseUpdates", "activations",
       "activations cannot follow a failover", "activations cannot follow a failover"},
      {"staleness without bounded", "/spec/training/maxStaleness", 3,
       "applies only to consistency: bounded", "applies only to consistency: bounded"},
      {"private weights with held updates", "/spec/training",
       {{"threadWeights", "private"}, {"applyEvery", 8}}, "it needs applyEvery: 1",
       "it needs applyEvery: 1"},
      {"unknown thread weights", "/spec/training/threadWeights", "copies",
       "spec.training.threadWeights: must be one of", "must be one of shared, private"},
      {"no softmax at the end", "/spec/model/layers/6", {{"type", "dense"}, {"units", 10}},
       "the last layer must be softmax", "the last layer must be softmax"},
      {"conv without kernel", "/spec/model/layers/0", {{"type", "conv"}, {"maps", 10}},
       "a conv layer needs maps and kernel", "spec.model.layers[0].kernel: required"},
      {"shard not whole floats", "/spec/roles/parameterServer/shardBytes", 1001,
       "must be a multiple of 4", "must be a multiple of 4"},
      {"zero learning rate", "/spec/training/learningRate", 0, "spec.training.learningRate: must be > 0",
       "spec.training.learningRate: must be in (0, 10]"},
      {"name too long", "/metadata/name", std::string(41, 'a'), "at most 40 characters",
       "at most 40 characters"},
      {"cpu not a quantity", "/spec/roles/trainer/resources", {{"cpu", "lots"}},
       "spec.roles.trainer.resources.cpu: must match", "must be a Kubernetes quantity"},
      {"network not a DNS label", "/spec/networks", {{"replication", "Bad_Name"}},
       "spec.networks.replication: must match", "must be a DNS label"},
      {"unknown clean policy", "/spec/runPolicy", {{"cleanPodPolicy", "Sometimes"}},
       "spec.runPolicy.cleanPodPolicy: must be one of", "must be one of Running, All, None"},
      {"two data servers", "/spec/roles/dataServer/replicas", 2,
       "spec.roles.dataServer.replicas: must be <= 1", "exactly 1 data server"},
      {"no dataset", "/spec/dataset", nullptr, "spec.dataset: required", "spec.dataset: required"},
  };
  return bad;
}

Json HaExample() {
  return YamlToJson(Read(std::string(ADAM_SOURCE_DIR) + "/examples/fashion-mnist-ha.yaml"));
}

TEST(Crd, DocumentedBadManifestsAreRefusedByBothPaths) {
  for (const Bad& b : BadManifests()) {
    SCOPED_TRACE(b.name);
    Json job = HaExample();
    const Json::json_pointer ptr(b.pointer);
    if (b.value.is_null())
      job[ptr.parent_pointer()].erase(ptr.back());
    else
      job[ptr] = b.value;
    const std::string crd = Joined(ValidateAgainstSchema(Schema(), job));
    EXPECT_NE(crd.find(b.crd_error), std::string::npos) << crd;
    auto parsed = spec::ParseAdamJob(AsManifest(job));
    ASSERT_FALSE(parsed.ok());
    EXPECT_NE(parsed.status().message().find(b.validate_error), std::string::npos)
        << parsed.status().message();
  }
}

TEST(Crd, ShardLayoutAndModelAreImmutable) {
  const Json old = HaExample();
  Json job = old;
  EXPECT_EQ(Joined(ValidateAgainstSchema(Schema(), job, &old)), "");
  job["spec"]["roles"]["trainer"]["replicas"] = 4;  // scaling trainers is fine
  EXPECT_EQ(Joined(ValidateAgainstSchema(Schema(), job, &old)), "");
  job["spec"]["roles"]["parameterServer"]["replicas"] = 4;
  EXPECT_NE(Joined(ValidateAgainstSchema(Schema(), job, &old)).find("replicas: is immutable"),
            std::string::npos);
  job = old;
  job["spec"]["model"]["layers"][4]["units"] = 300;
  EXPECT_NE(Joined(ValidateAgainstSchema(Schema(), job, &old)).find("spec.model: is immutable"),
            std::string::npos);
}

TEST(Crd, StatusFieldsAreTyped) {
  Json job = HaExample();
  job["status"] = {{"phase", "Running"},
                   {"epoch", 3},
                   {"testAccuracy", 0.9},
                   {"conditions",
                    {{{"type", "Running"},
                      {"status", "True"},
                      {"reason", "PodsRunning"},
                      {"message", "all pods run"},
                      {"lastTransitionTime", "2026-01-01T00:00:00Z"}}}}};
  EXPECT_EQ(Joined(ValidateAgainstSchema(Schema(), job)), "");
  job["status"]["phase"] = "Sleeping";
  EXPECT_NE(Joined(ValidateAgainstSchema(Schema(), job)).find("status.phase: must be one of"),
            std::string::npos);
}

}  // namespace
}  // namespace adam::testing
