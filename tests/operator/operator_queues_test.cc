// The operator beside other jobs and other controllers (operator_fixture.h): jobs reconciled at
// once, scaling, another client's change put back, suspension, Kueue's queues and admission
// checks, a job another controller manages, gangs.
#include "operator/operator_fixture.h"

namespace adam::op {
namespace {

// A client that holds every ConfigMap create for a while and records how many were held at once.
class SlowCreates : public kube::Client {
 public:
  explicit SlowCreates(kube::Client* inner) : inner_(inner) {}
  int peak() const { return peak_.load(); }
  StatusOr<Json> Get(const kube::Resource& r, const std::string& ns,
                     const std::string& n) override {
    return inner_->Get(r, ns, n);
  }
  StatusOr<Json> List(const kube::Resource& r, const std::string& ns,
                      const kube::ListOptions& o) override {
    return inner_->List(r, ns, o);
  }
  StatusOr<Json> Create(const kube::Resource& r, const std::string& ns,
                        const Json& object) override {
    if (r.plural != "configmaps") return inner_->Create(r, ns, object);
    const int now = ++held_;
    for (int p = peak_.load(); now > p && !peak_.compare_exchange_weak(p, now);) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    --held_;
    return inner_->Create(r, ns, object);
  }
  StatusOr<Json> Update(const kube::Resource& r, const std::string& ns, const Json& o) override {
    return inner_->Update(r, ns, o);
  }
  StatusOr<Json> UpdateStatus(const kube::Resource& r, const std::string& ns,
                              const Json& o) override {
    return inner_->UpdateStatus(r, ns, o);
  }
  StatusOr<Json> Apply(const kube::Resource& r, const std::string& ns, const Json& o,
                       const std::string& manager) override {
    return inner_->Apply(r, ns, o, manager);
  }
  Status Delete(const kube::Resource& r, const std::string& ns, const std::string& n) override {
    return inner_->Delete(r, ns, n);
  }
  Status ForceDelete(const kube::Resource& r, const std::string& ns,
                     const std::string& n) override {
    return inner_->ForceDelete(r, ns, n);
  }
  Status Watch(const kube::Resource& r, const std::string& ns, const kube::WatchOptions& o,
               const std::function<bool(const kube::WatchEvent&)>& f,
               const std::atomic<bool>* stop) override {
    return inner_->Watch(r, ns, o, f, stop);
  }

 private:
  kube::Client* inner_;
  std::atomic<int> held_{0}, peak_{0};
};

// --workers N: different jobs are reconciled at once, so one slow job does not hold the others.
TEST_F(OperatorTest, DifferentJobsAreReconciledAtOnce) {
  SlowCreates slow(client.get());
  // The operator uses `slow` until it stops: stopped here, before `slow` goes, however the test
  // ends (TearDown would stop it after; a worker then used a destroyed client: a segfault seen
  // in CI).
  struct StopFirst {
    std::unique_ptr<Operator>& op;
    ~StopFirst() {
      if (op) op->Stop();
    }
  } stop_first{op};
  OperatorOptions o;
  o.leader_elect = false;
  o.workers = 3;
  o.metrics_address = "127.0.0.1:0";
  auto started = Operator::Start(client.get(), &slow, o);
  ASSERT_TRUE(started.ok()) << started.status().message();
  op = std::move(*started);
  for (const char* name : {"one", "two", "three"}) {
    Json j = Example("fashion-mnist");
    j["metadata"]["name"] = name;
    api->Put(kJobs, j);
  }
  ASSERT_TRUE(Eventually([&] { return PodsOf("ps").size() == 6u; }));
  EXPECT_GE(slow.peak(), 2);  // one at a time (a reconcile lock) would be 1
}

TEST_F(OperatorTest, ScalesTrainersBothWays) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  BringUp("fashion-mnist", false);
  Json j = Job("fashion-mnist");
  j["spec"]["roles"]["trainer"]["replicas"] = 3;
  api->Put(kJobs, j);
  ASSERT_TRUE(Eventually([&] { return PodsOf("trainer").size() == 3u; }));
  j = Job("fashion-mnist");
  j["spec"]["roles"]["trainer"]["replicas"] = 1;
  api->Put(kJobs, j);
  ASSERT_TRUE(Eventually([&] { return PodsOf("trainer").size() == 1u; }));
  EXPECT_EQ(PodsOf("trainer")[0]["metadata"]["name"], "fashion-mnist-trainer-0");
  ASSERT_TRUE(Eventually(
      [&] { return Job("fashion-mnist")["status"]["roles"]["trainer"].value("desired", 0) == 1; }));
}

// Another client's change to what the operator owns is put back by server-side apply and said
// (event Repaired naming the field, as manager adam-operator); a spec change reaches the same
// objects without an event; an object left alone is never written again.
TEST_F(OperatorTest, AnotherClientsChangeIsPutBackAndSaid) {
  StartOperator();
  const std::string job = "fashion-mnist-ha";
  api->Put(kJobs, Example(job));
  BringUp(job, true);
  ASSERT_TRUE(Passes());
  EXPECT_EQ(api->applies_served(), 0);  // nothing differed: nothing applied
  const char* kServices = "v1/services";
  const char* kMaps = "v1/configmaps";
  const char* kPolicies = "networking.k8s.io/v1/networkpolicies";
  const Json service = api->Get(kServices, "ml", job);
  const Json map = api->Get(kMaps, "ml", job + "-job");
  const Json set = api->Get(kSets, "ml", job + "-controller");
  const Json policy = api->Get(kPolicies, "ml", job);
  const Json trainer = api->Get(kPods, "ml", job + "-trainer-0");
  EXPECT_EQ(set["spec"]["updateStrategy"]["type"], "OnDelete");

  Json o = service;
  o["spec"]["ports"][0]["port"] = 1;
  api->Put(kServices, o);
  o = map;
  o["data"]["job.yaml"] = "kind: Nonsense";
  api->Put(kMaps, o);
  o = set;
  o["spec"]["template"]["spec"]["containers"][0]["image"] = "someone-elses:1";
  o["spec"]["replicas"] = 1;
  api->Put(kSets, o);
  o = policy;
  o["spec"]["ingress"] = Json::array();
  api->Put(kPolicies, o);
  o = trainer;
  o["metadata"]["labels"]["app.kubernetes.io/component"] = "someone-else";
  o["metadata"]["labels"]["added-by-someone"] = "kept";
  api->Put(kPods, o);

  auto same = [&](const char* c, const std::string& name, const Json& before, const char* field) {
    return api->Get(c, "ml", name)[field] == before[field];
  };
  ASSERT_TRUE(Eventually([&] {
    return same(kServices, job, service, "spec") && same(kMaps, job + "-job", map, "data") &&
           same(kSets, job + "-controller", set, "spec") && same(kPolicies, job, policy, "spec") &&
           api->Get(kPods, "ml", job + "-trainer-0")["metadata"]["labels"].value(
               "app.kubernetes.io/component", "") == "trainer";
  })) << api->Get(kSets, "ml", job + "-controller").dump(2);
  // Fields the operator does not own are kept; the pod is the same pod.
  const Json pod = api->Get(kPods, "ml", job + "-trainer-0");
  EXPECT_EQ(pod["metadata"]["labels"].value("added-by-someone", ""), "kept");
  EXPECT_EQ(pod["metadata"]["uid"], trainer["metadata"]["uid"]);
  EXPECT_EQ(pod["metadata"]["managedFields"][0]["manager"], kFieldManager);
  std::set<std::string> said;
  EXPECT_TRUE(Eventually([&] {  // events are written as the pass ends
    said.clear();
    for (const Json& e : api->List(kEvents, "ml"))
      if (e["reason"] == "Repaired") said.insert(e["note"].get<std::string>());
    return said.size() == 5u;
  }));
  EXPECT_EQ(said, (std::set<std::string>{
                      "ConfigMap fashion-mnist-ha-job: data.job.yaml was changed by another "
                      "client; put back",
                      "NetworkPolicy fashion-mnist-ha: spec.ingress was changed by another "
                      "client; put back",
                      "Pod fashion-mnist-ha-trainer-0: metadata.labels.app.kubernetes.io/"
                      "component was changed by another client; put back",
                      "Service fashion-mnist-ha: spec.ports[name=grpc].port was changed by "
                      "another client; put back",
                      "StatefulSet fashion-mnist-ha-controller: spec.replicas was changed by "
                      "another client; put back"}));
  // Put back once: nothing more is applied while nothing changes.
  ASSERT_TRUE(Passes());
  const int applies = api->applies_served();
  ASSERT_TRUE(Passes());
  EXPECT_EQ(api->applies_served(), applies);

  // A spec change reaches the ConfigMap and the controllers' template, said by no event.
  Json j = Job(job);
  j["spec"]["training"]["learningRate"] = 0.02;
  j["metadata"]["generation"] = j["metadata"]["generation"].get<int>() + 1;
  api->Put(kJobs, j);
  ASSERT_TRUE(Eventually([&] {
    return api->Get(kMaps, "ml", job + "-job")["data"]["job.yaml"].get<std::string>().find(
               "0.02") != std::string::npos;
  }));
  ASSERT_TRUE(Passes());
  int repaired = 0;
  for (const Json& e : api->List(kEvents, "ml")) repaired += e["reason"] == "Repaired";
  EXPECT_EQ(repaired, 5);
}

TEST_F(OperatorTest, SuspendsAndResumes) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  BringUp("fashion-mnist", false);
  Json j = Job("fashion-mnist");
  j["spec"]["runPolicy"] = {{"suspend", true}};
  api->Put(kJobs, j);
  ASSERT_TRUE(Eventually([&] { return Phase("fashion-mnist") == "Suspended"; }));
  EXPECT_TRUE(Eventually([&] { return api->List(kPods, "ml").empty(); }));
  EXPECT_TRUE(
      Eventually([&] { return Condition("fashion-mnist", "Suspended") == "True Suspended"; }));
  j = Job("fashion-mnist");
  j["spec"]["runPolicy"]["suspend"] = false;
  api->Put(kJobs, j);
  ASSERT_TRUE(Eventually([&] { return PodsOf("ps").size() == 2u; }));
  EXPECT_TRUE(
      Eventually([&] { return Condition("fashion-mnist", "Suspended") == "False Resumed"; }));
  BringUp("fashion-mnist", false);
}

constexpr const char* kWorkloads = "kueue.x-k8s.io/v1beta2/workloads";

// Kueue's part, played: a quota reservation and admission of a job's Workload on one flavor,
// with the states its admission checks' controllers wrote (`checks`).
void Admit(FakeApiServer& api, const std::string& name, const std::string& flavor,
           const Json& checks = Json::array()) {
  Json wl = api.Get(kWorkloads, "ml", name);
  Json assignments = Json::array();
  for (const Json& ps : wl["spec"]["podSets"])
    assignments.push_back({{"name", ps["name"]},
                           {"flavors", {{"cpu", flavor}, {"memory", flavor}}},
                           {"count", ps["count"]}});
  wl["status"]["admission"] = {{"clusterQueue", "team-cq"}, {"podSetAssignments", assignments}};
  wl["status"]["conditions"] = {
      {{"type", "QuotaReserved"}, {"status", "True"}, {"reason", "QuotaReserved"}},
      {{"type", "Admitted"}, {"status", "True"}, {"reason", "Admitted"}}};
  if (!checks.empty()) wl["status"]["admissionChecks"] = checks;
  api.Put(kWorkloads, wl);
}

// An admitted HA job's controllers' template carries its flavor's tolerations (a list an apply
// would replace whole): the passes after its start, which compare that template for drift, find
// nothing to put back and apply nothing.
TEST_F(OperatorTest, AnAdmittedJobsFlavorIsNoDriftInTheControllersTemplate) {
  StartOperator(net::kCertificateValidity, /*kueue=*/true);
  api->Put("kueue.x-k8s.io/v1beta2/resourceflavors", Json::parse(R"({
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
    "metadata": {"name": "zone-b"},
    "spec": {"nodeLabels": {"topology.kubernetes.io/zone": "zone-b"},
             "tolerations": [{"key": "team", "operator": "Exists"}]}})"));
  Json j = Example("fashion-mnist-ha");
  j["metadata"]["labels"] = {{kQueueLabel, "team"}};
  // The job's own toleration: the flavor's comes on top of it, in the same list.
  j["spec"]["podTemplate"]["tolerations"] = {{{"key", "own"}, {"operator", "Exists"}}};
  api->Put(kJobs, j);
  ASSERT_TRUE(Eventually([&] { return Phase("fashion-mnist-ha") == "Queued"; }));
  const std::string uid = Job("fashion-mnist-ha")["metadata"]["uid"];
  Admit(*api, "adamjob-fashion-mnist-ha-" + uid.substr(0, 5), "zone-b");
  BringUp("fashion-mnist-ha", true);
  ASSERT_TRUE(Passes());
  ASSERT_TRUE(Passes());
  const Json tolerations =
      api->Get(kSets, "ml", "fashion-mnist-ha-controller")["spec"]["template"]["spec"].value(
          "tolerations", Json::array());
  EXPECT_NE(tolerations.dump().find("\"team\""), std::string::npos) << tolerations;
  EXPECT_EQ(api->applies_served(), 0);
}

std::string WorkloadCondition(const Json& wl, const std::string& type) {
  for (const Json& c : wl.value("status", Json::object()).value("conditions", Json::array()))
    if (c["type"] == type)
      return c["status"].get<std::string>() + " " + c["reason"].get<std::string>();
  return "";
}

// An elastic queued job (Kueue's elastic-job annotation), Kueue's part played: scaled up, it
// asks for a Workload slice replacing its admitted Workload and runs at its admitted counts until
// that slice is admitted; then the replaced Workload is finished (here by the operator: the
// played Kueue does not) and the new trainer made. Scaled down, the admitted slice's counts are
// lowered in place. No pod but the trainers added or removed is replaced.
TEST_F(OperatorTest, AnElasticJobResizesItsWorkloadWithoutStopping) {
  StartOperator(net::kCertificateValidity, /*kueue=*/true);
  api->Put("kueue.x-k8s.io/v1beta2/resourceflavors", Json::parse(R"({
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
    "metadata": {"name": "zone-b"}, "spec": {}})"));
  Json j = Example("fashion-mnist");
  j["metadata"]["labels"] = {{kQueueLabel, "team"}};
  j["metadata"]["annotations"] = {{kElasticJobAnnotation, "true"}};
  api->Put(kJobs, j);
  ASSERT_TRUE(Eventually([&] { return Phase("fashion-mnist") == "Queued"; }));
  const std::string uid = Job("fashion-mnist")["metadata"]["uid"];
  const std::string first = "adamjob-fashion-mnist-" + uid.substr(0, 5);
  ASSERT_FALSE(api->Get(kWorkloads, "ml", first).is_null());
  EXPECT_EQ(api->Get(kWorkloads, "ml", first)["metadata"]["annotations"][kElasticJobAnnotation],
            "true");
  Admit(*api, first, "zone-b");
  BringUp("fashion-mnist", false);
  ASSERT_TRUE(Eventually([&] { return Phase("fashion-mnist") == "Running"; }));
  std::map<std::string, std::string> before;
  for (const Json& p : api->List(kPods, "ml")) before[p["metadata"]["name"]] = p["metadata"]["uid"];
  const auto replaced = [&] {
    std::vector<std::string> out;
    for (const Json& p : api->List(kPods, "ml")) {
      auto it = before.find(p["metadata"]["name"]);
      if (it != before.end() && it->second != p["metadata"]["uid"]) out.push_back(it->first);
    }
    return out;
  };

  j = Job("fashion-mnist");
  j["spec"]["roles"]["trainer"]["replicas"] = 3;
  j["metadata"]["generation"] = j["metadata"]["generation"].get<int64_t>() + 1;  // a spec change
  api->Put(kJobs, j);
  const std::string slice =
      first + "-g" + std::to_string(Job("fashion-mnist")["metadata"]["generation"].get<int64_t>());
  ASSERT_TRUE(Eventually([&] { return !api->Get(kWorkloads, "ml", slice).is_null(); }));
  const Json asked = api->Get(kWorkloads, "ml", slice);
  EXPECT_EQ(asked["metadata"]["annotations"][kSliceReplacementAnnotation], "ml/" + first);
  EXPECT_EQ(PodSetCounts(asked)["trainer"], 3);
  ASSERT_TRUE(Passes());
  EXPECT_EQ(PodsOf("trainer").size(), 2u) << "a trainer made before Kueue admitted the slice";
  EXPECT_EQ(Phase("fashion-mnist"), "Running");
  EXPECT_EQ(EventsOf(*api, "Resizing", slice), 1);
  EXPECT_EQ(WorkloadCondition(api->Get(kWorkloads, "ml", first), "Finished"), "");

  // Kueue finishes the replaced Workload first and writes the slice's admission just after: in
  // between, the job runs on as it was.
  Json old = api->Get(kWorkloads, "ml", first);
  old["status"]["conditions"].push_back(
      {{"type", "Finished"},
       {"status", "True"},
       {"reason", "WorkloadSliceReplaced"},
       {"message", "replaced"},
       {"lastTransitionTime", kube::FormatTime(std::chrono::system_clock::now())}});
  api->Put(kWorkloads, old);
  ASSERT_TRUE(Passes());
  EXPECT_EQ(PodsOf("trainer").size(), 2u);
  EXPECT_TRUE(replaced().empty()) << replaced().front();
  EXPECT_EQ(Condition("fashion-mnist", "Admitted"), "True Admitted");
  Admit(*api, slice, "zone-b");
  ASSERT_TRUE(Eventually([&] { return PodsOf("trainer").size() == 3u; }));
  RunAll("trainer");
  EXPECT_TRUE(Eventually([&] { return EventsOf(*api, "Resized", "with the new counts") == 1; }));
  EXPECT_TRUE(replaced().empty()) << replaced().front();

  j = Job("fashion-mnist");
  j["spec"]["roles"]["trainer"]["replicas"] = 1;
  j["metadata"]["generation"] = j["metadata"]["generation"].get<int64_t>() + 1;  // a spec change
  api->Put(kJobs, j);
  ASSERT_TRUE(
      Eventually([&] { return PodSetCounts(api->Get(kWorkloads, "ml", slice))["trainer"] == 1; }));
  ASSERT_TRUE(Eventually([&] { return PodsOf("trainer").size() == 1u; }));
  EXPECT_TRUE(Eventually([&] { return EventsOf(*api, "Resized", "lowered the counts") == 1; }));
  EXPECT_EQ(api->List(kWorkloads, "ml").size(), 2u);  // no third Workload
  EXPECT_TRUE(replaced().empty()) << replaced().front();
  EXPECT_EQ(Phase("fashion-mnist"), "Running");

  // Up again, on a Kueue that does not finish what a slice replaces (its ElasticJobsViaWorkload
  // Slices off: the slice needed its whole quota): once the slice is admitted, the operator
  // finishes the one it replaces.
  before.clear();
  for (const Json& p : api->List(kPods, "ml")) before[p["metadata"]["name"]] = p["metadata"]["uid"];
  j = Job("fashion-mnist");
  j["spec"]["roles"]["trainer"]["replicas"] = 2;
  j["metadata"]["generation"] = j["metadata"]["generation"].get<int64_t>() + 1;  // a spec change
  api->Put(kJobs, j);
  const std::string third =
      first + "-g" + std::to_string(Job("fashion-mnist")["metadata"]["generation"].get<int64_t>());
  ASSERT_TRUE(Eventually([&] { return !api->Get(kWorkloads, "ml", third).is_null(); }));
  Admit(*api, third, "zone-b");
  ASSERT_TRUE(Eventually([&] {
    return WorkloadCondition(api->Get(kWorkloads, "ml", slice), "Finished") == "True OutOfSync";
  }));
  ASSERT_TRUE(Eventually([&] { return PodsOf("trainer").size() == 2u; }));
  EXPECT_TRUE(replaced().empty()) << replaced().front();
}

TEST_F(OperatorTest, AQueuedJobRunsNoPodUntilKueueAdmitsItAndStopsWhenEvicted) {
  StartOperator(net::kCertificateValidity, /*kueue=*/true);
  api->Put("kueue.x-k8s.io/v1beta2/resourceflavors", Json::parse(R"({
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
    "metadata": {"name": "zone-b"},
    "spec": {"nodeLabels": {"topology.kubernetes.io/zone": "zone-b"},
             "tolerations": [{"key": "team", "operator": "Exists"}]}})"));
  const std::string name = QueueExample();
  ASSERT_FALSE(name.empty());
  const std::string uid = Job("fashion-mnist")["metadata"]["uid"];
  Json wl = api->Get(kWorkloads, "ml", name);
  ASSERT_FALSE(wl.is_null());
  EXPECT_EQ(wl["spec"]["queueName"], "team");
  ASSERT_EQ(wl["spec"]["podSets"].size(), 3u);  // ps, data-server, trainer (no controllers)
  EXPECT_EQ(wl["spec"]["podSets"][0]["name"], "ps");
  EXPECT_EQ(wl["spec"]["podSets"][0]["count"], 2);
  EXPECT_EQ(wl["spec"]["podSets"][2]["name"], "trainer");
  EXPECT_EQ(wl["spec"]["podSets"][2]["count"], 2);
  EXPECT_EQ(wl["metadata"]["ownerReferences"][0]["uid"], uid);
  EXPECT_EQ(Condition("fashion-mnist", "Admitted"), "False Pending");
  ASSERT_TRUE(Passes([&] { Touch(kWorkloads, name); }));  // Kueue's own writes, say
  EXPECT_TRUE(api->List(kPods, "ml").empty()) << "a queued job made pods";

  Admit(*api, name, "zone-b");
  ASSERT_TRUE(Eventually([&] { return PodsOf("ps").size() == 2u; }));
  EXPECT_TRUE(
      Eventually([&] { return Condition("fashion-mnist", "Admitted") == "True Admitted"; }));
  for (const Json& p : PodsOf("ps")) {
    const Json spec = p.value("spec", Json::object());
    EXPECT_EQ(spec.value("nodeSelector", Json::object()).value("topology.kubernetes.io/zone", ""),
              "zone-b")
        << p.dump(2);
    const Json tolerations = spec.value("tolerations", Json::array());
    EXPECT_TRUE(!tolerations.empty() && tolerations.back().value("key", "") == "team");
  }
  // Kueue's waitForPodsReady is told when every pod is ready, and when one no longer is.
  const auto pods_ready = [&] {
    return WorkloadCondition(api->Get(kWorkloads, "ml", name), "PodsReady");
  };
  EXPECT_TRUE(Eventually([&] { return pods_ready() == "False WaitForStart"; })) << pods_ready();
  BringUp("fashion-mnist", false);
  EXPECT_TRUE(Eventually([&] { return pods_ready() == "True PodsReady"; })) << pods_ready();
  api->SetPodPhase("ml", "fashion-mnist-ps-0", "Running", false);
  EXPECT_TRUE(Eventually([&] { return pods_ready() == "False WaitForRecovery"; })) << pods_ready();
  api->SetPodPhase("ml", "fashion-mnist-ps-0", "Running", true);
  EXPECT_TRUE(Eventually([&] { return pods_ready() == "True PodsReady"; })) << pods_ready();

  // Evicted (preempted): pods deleted, then the quota given back and the job queued again.
  wl = api->Get(kWorkloads, "ml", name);
  wl["status"]["conditions"].push_back({{"type", "Evicted"},
                                        {"status", "True"},
                                        {"reason", "Preempted"},
                                        {"message", "by a higher priority job"}});
  api->Put(kWorkloads, wl);
  ASSERT_TRUE(Eventually([&] { return api->List(kPods, "ml").empty(); }));
  ASSERT_TRUE(Eventually(
      [&] { return !api->Get(kWorkloads, "ml", name)["status"].contains("admission"); }));
  wl = api->Get(kWorkloads, "ml", name);
  EXPECT_EQ(WorkloadCondition(wl, "QuotaReserved"), "False Pending");
  EXPECT_EQ(WorkloadCondition(wl, "Admitted"), "False NoReservation");
  EXPECT_EQ(WorkloadCondition(wl, "Requeued"), "True Preempted");
  EXPECT_TRUE(Eventually([&] { return Phase("fashion-mnist") == "Queued"; }));

  // Admitted again, it runs to the end, and its Workload is marked Finished (the quota freed).
  wl["status"]["conditions"] = Json::array();
  api->Put(kWorkloads, wl);
  Admit(*api, name, "zone-b");
  BringUp("fashion-mnist", false);
  for (const Json& p : PodsOf("trainer"))
    api->SetPodPhase("ml", p["metadata"]["name"], "Succeeded", false, 0);
  ASSERT_TRUE(Eventually([&] { return Phase("fashion-mnist") == "Succeeded"; }));
  ASSERT_TRUE(Eventually([&] {
    return WorkloadCondition(api->Get(kWorkloads, "ml", name), "Finished") == "True Succeeded";
  }));
}

// What a Ready admission check gives a pod set (a ProvisioningRequest check, say: the provisioned
// nodes' selector and taint, the request's annotation) reaches that role's pods and no other's;
// one that contradicts where the flavor puts the pods makes no pod, and the job says why.
TEST_F(OperatorTest, AnAdmissionChecksPodSetUpdatesReachThePodsAndAConflictIsNamed) {
  StartOperator(net::kCertificateValidity, /*kueue=*/true);
  api->Put("kueue.x-k8s.io/v1beta2/resourceflavors", Json::parse(R"({
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
    "metadata": {"name": "zone-b"}, "spec": {"nodeLabels": {"topology.kubernetes.io/zone": "zone-b"}}})"));
  const std::string name = QueueExample();
  ASSERT_FALSE(name.empty());
  ASSERT_TRUE(Eventually([&] { return !api->Get(kWorkloads, "ml", name).is_null(); }));
  Json checks = Json::parse(R"([{"name": "provision", "state": "Ready", "podSetUpdates": [
    {"name": "trainer", "labels": {"example.com/provisioned": "yes"},
     "annotations": {"example.com/request": "pr-1"},
     "nodeSelector": {"example.com/pool": "provisioned"},
     "tolerations": [{"key": "example.com/provisioned", "operator": "Exists"}]},
    {"name": "ps", "nodeSelector": {"topology.kubernetes.io/zone": "zone-a"}}]}])");
  Admit(*api, name, "zone-b", checks);
  ASSERT_TRUE(Eventually([&] {
    return Condition("fashion-mnist", "Created") == "False PlacementConflict";
  })) << Job("fashion-mnist").dump(2);
  const std::string said = Job("fashion-mnist")["status"]["conditions"].dump();
  for (const char* part : {"admission check provision", "topology.kubernetes.io/zone=zone-a",
                           "topology.kubernetes.io/zone=zone-b"})
    EXPECT_NE(said.find(part), std::string::npos) << part << " not in " << said;
  EXPECT_EQ(EventsOf(*api, "PlacementConflict", "admission check provision"), 1);
  EXPECT_TRUE(api->List(kPods, "ml").empty());

  // The check's controller corrects itself: the job starts, each role where it was told.
  checks[0]["podSetUpdates"].erase(1);
  Admit(*api, name, "zone-b", checks);
  ASSERT_TRUE(Eventually([&] { return PodsOf("ps").size() == 2u; }));
  RunAll("ps");
  ASSERT_TRUE(Eventually([&] { return PodsOf("trainer").size() == 2u; }));
  for (const Json& p : api->List(kPods, "ml")) {
    const bool trainer = p["metadata"]["labels"].value(kRoleLabel, "") == "trainer";
    const Json sel = p["spec"].value("nodeSelector", Json::object());
    EXPECT_EQ(sel.value("topology.kubernetes.io/zone", ""), "zone-b") << p.dump(2);
    EXPECT_EQ(sel.value("example.com/pool", ""), trainer ? "provisioned" : "") << p.dump(2);
    EXPECT_EQ(p["metadata"]["labels"].value("example.com/provisioned", ""), trainer ? "yes" : "");
    EXPECT_EQ(p["metadata"].value("annotations", Json::object()).value("example.com/request", ""),
              trainer ? "pr-1" : "");
    const std::string tolerations = p["spec"].value("tolerations", Json::array()).dump();
    EXPECT_EQ(tolerations.find("example.com/provisioned") != std::string::npos, trainer)
        << tolerations;
  }
  EXPECT_TRUE(
      Eventually([&] { return Condition("fashion-mnist", "Created") == "True ObjectsCreated"; }));
}

// A job labelled with a WorkloadPriorityClass is submitted with that class and its value (Kueue's
// queue order and preemption); one naming a class that does not exist waits, saying so, until
// the class is made.
TEST_F(OperatorTest, AQueuedJobCarriesItsWorkloadPriority) {
  StartOperator(net::kCertificateValidity, /*kueue=*/true);
  Json j = Example("fashion-mnist");
  j["metadata"]["labels"] = {{kQueueLabel, "team"}, {kPriorityClassLabel, "urgent"}};
  api->Put(kJobs, j);
  ASSERT_TRUE(Eventually([&] {
    return Condition("fashion-mnist", "Admitted") == "False Pending" &&
           Job("fashion-mnist")["status"]["conditions"].dump().find(
               "WorkloadPriorityClass urgent does not exist") != std::string::npos;
  })) << Job("fashion-mnist").dump(2);
  EXPECT_TRUE(api->List(kWorkloads, "ml").empty());
  EXPECT_EQ(EventsOf(*api, "NoPriorityClass", "urgent"), 1);
  api->Put("kueue.x-k8s.io/v1beta2/workloadpriorityclasses",
           Json::parse(R"({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                           "metadata": {"name": "urgent"}, "value": 1000})"));
  ASSERT_TRUE(Passes([&] { Touch(kJobs, "fashion-mnist"); }));
  ASSERT_EQ(api->List(kWorkloads, "ml").size(), 1u);
  const Json wl = api->List(kWorkloads, "ml")[0];
  EXPECT_EQ(wl["spec"]["priority"], 1000);
  EXPECT_EQ(wl["spec"]["priorityClassRef"],
            Json::parse(R"({"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                            "name": "urgent"})"));
}

TEST_F(OperatorTest, ScalingAQueuedJobQueuesItAgainAndSuspendingItFreesItsQuota) {
  StartOperator(net::kCertificateValidity, /*kueue=*/true);
  Json j = Example("fashion-mnist");
  j["metadata"]["labels"] = {{kQueueLabel, "team"}};
  api->Put(kJobs, j);
  ASSERT_TRUE(Eventually([&] { return !api->List(kWorkloads, "ml").empty(); }));
  const std::string name = api->List(kWorkloads, "ml")[0]["metadata"]["name"];
  api->Put("kueue.x-k8s.io/v1beta2/resourceflavors",
           Json::parse(R"({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                           "metadata": {"name": "default"}})"));
  Admit(*api, name, "default");  // a flavor without node labels: pods placed as rendered
  ASSERT_TRUE(Eventually([&] { return PodsOf("ps").size() == 2u; }));
  // Three trainers ask for more quota: the pods go and a Workload for three waits.
  j = Job("fashion-mnist");
  j["spec"]["roles"]["trainer"]["replicas"] = 3;
  api->Put(kJobs, j);
  ASSERT_TRUE(Eventually([&] {
    const Json wl = api->Get(kWorkloads, "ml", name);
    return !wl.is_null() && wl["spec"]["podSets"].back()["count"] == 3 &&
           !wl.value("status", Json::object()).contains("admission");
  }));
  EXPECT_TRUE(Eventually([&] { return api->List(kPods, "ml").empty(); }));
  EXPECT_TRUE(Eventually([&] { return Phase("fashion-mnist") == "Queued"; }));
  // Suspended: no Workload holds quota for it.
  j = Job("fashion-mnist");
  j["spec"]["runPolicy"] = {{"suspend", true}};
  api->Put(kJobs, j);
  ASSERT_TRUE(Eventually([&] { return api->List(kWorkloads, "ml").empty(); }));
  EXPECT_TRUE(Eventually([&] { return Phase("fashion-mnist") == "Suspended"; }));
}

TEST_F(OperatorTest, AJobManagedByAnotherControllerIsLeftAlone) {
  StartOperator();
  Json j = Example("fashion-mnist");
  j["spec"]["runPolicy"] = {{"managedBy", "kueue.x-k8s.io/multikueue"}};
  api->Put(kJobs, j);
  // spec.managedBy, where MultiKueue looks, says the same.
  Json top = Example("fashion-mnist");
  top["metadata"]["name"] = "top";
  top["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue";
  api->Put(kJobs, top);
  Json mine = Example("fashion-mnist");
  mine["metadata"]["name"] = "mine";
  api->Put(kJobs, mine);
  ASSERT_TRUE(Eventually([&] { return PodsOf("ps", "mine").size() == 2u; }));
  for (const char* name : {"fashion-mnist", "top"}) {
    EXPECT_TRUE(PodsOf("ps", name).empty()) << name;
    const Json other = Job(name);
    EXPECT_FALSE(other.contains("status") && other["status"].contains("phase")) << other.dump(2);
    EXPECT_FALSE(other["metadata"].contains("finalizers")) << name;
  }
}

TEST_F(OperatorTest, AGangWaitsForThePodGroupApiThenMakesEveryPodAtOnce) {
  StartOperator();
  Json j = Example("fashion-mnist-ha");
  j["spec"]["runPolicy"] = {{"schedulingPolicy", {{"coscheduling", true}}}};
  api->Put(kJobs, j);
  // The fake server serves every collection, so a PodGroup is made: every pod follows at once,
  // with no stage waiting on another.
  ASSERT_TRUE(Eventually([&] {
    return PodsOf("ps").size() == 3u && PodsOf("trainer").size() == 2u &&
           PodsOf("data-server").size() == 1u &&
           !api->Get(kSets, "ml", "fashion-mnist-ha-controller").is_null();
  }));
  const Json group = api->Get("scheduling.x-k8s.io/v1alpha1/podgroups", "ml", "fashion-mnist-ha");
  ASSERT_FALSE(group.is_null());
  EXPECT_EQ(group["spec"]["minMember"], 9);  // 3 controllers, 3 servers, 1 data server, 2 trainers
  for (const Json& p : api->List(kPods, "ml"))
    EXPECT_EQ(p["metadata"]["labels"].value(kPodGroupLabel, ""), "fashion-mnist-ha");
  // Trainers scaled to 4: the group asks for the new count.
  api->SetStatefulSetReady("ml", "fashion-mnist-ha-controller", 3);
  RunAll("ps");
  RunAll("data-server");
  RunAll("trainer");
  ASSERT_TRUE(Eventually(
      [&] { return Condition("fashion-mnist-ha", "Created") == "True ObjectsCreated"; }));
  Json scaled = Job("fashion-mnist-ha");
  scaled["spec"]["roles"]["trainer"]["replicas"] = 4;
  api->Put(kJobs, scaled);
  EXPECT_TRUE(Eventually([&] {
    return api->Get("scheduling.x-k8s.io/v1alpha1/podgroups", "ml",
                    "fashion-mnist-ha")["spec"]["minMember"] == 11;
  }));
  EXPECT_TRUE(Eventually([&] { return PodsOf("trainer").size() == 4u; }));
}

}  // namespace
}  // namespace adam::op
