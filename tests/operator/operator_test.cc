// The operator end to end against the in-process API server: the tests play kubectl (writing
// AdamJobs), the kubelet (pod phases) and the StatefulSet controller (ready replicas).
#include "operator.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "core/clock.h"
#include "kube/client.h"
#include "kube/workqueue.h"
#include "net/access.h"
#include "net/tls.h"
#include "operator/fake_api_server.h"
#include "reconcile/drift.h"
#include "reconcile/kueue.h"
#include "reconcile/reconciler.h"
#include "reconcile/render.h"
#include "reconcile/start_failures.h"
#include "spec/yaml_json.h"
#include "testing/wait.h"

namespace adam::op {
namespace {

using testing::FakeApiServer;
constexpr const char* kJobs = "adam.dev/v1alpha1/adamjobs";
constexpr const char* kPods = "v1/pods";
constexpr const char* kSets = "apps/v1/statefulsets";
constexpr const char* kEvents = "events.k8s.io/v1/events";  // the operator's own

using testing::Eventually;

Json Example(const std::string& name) {
  const std::string yaml =
      testing::ReadText(std::string(ADAM_SOURCE_DIR) + "/examples/" + name + ".yaml");
  Json j = Json::parse(spec::YamlToJson(yaml).dump());
  j["metadata"]["namespace"] = "ml";
  return j;
}

kube::Config Plain(const std::string& url) {
  kube::Config c;
  c.server = url;
  return c;
}

// Trainers' /metrics as the operator would read them, keyed by pod address.
class FakeMetrics : public kube::MetricsSource {
 public:
  void Set(const std::string& host, std::map<std::string, double> m) {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_[host] = std::move(m);
  }
  StatusOr<std::map<std::string, double>> Scrape(const std::string& host, int port) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (port != kMetricsPort || !metrics_.count(host))
      return UnavailableError(host + " not serving");
    auto& m = metrics_[host];
    if (m.count("adam_trainer_images_total")) m["adam_trainer_images_total"] += step_;  // training
    return m;
  }
  void SetStep(double images_per_scrape) {
    std::lock_guard<std::mutex> lock(mu_);
    step_ = images_per_scrape;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::map<std::string, double>> metrics_;
  double step_ = 0;
};

struct OperatorTest : ::testing::Test {
  std::unique_ptr<FakeApiServer> api = FakeApiServer::Start();
  std::unique_ptr<kube::Client> client = kube::NewHttpClient(Plain(api->url()));
  std::unique_ptr<Operator> op;

  std::shared_ptr<FakeMetrics> metrics = std::make_shared<FakeMetrics>();

  void StartOperator(std::chrono::seconds certificate_validity = net::kCertificateValidity,
                     bool kueue = false) {
    OperatorOptions o;
    o.kueue = kueue;
    o.certificate_validity = certificate_validity;
    o.leader_elect = false;
    o.metrics = metrics;
    o.status_period = std::chrono::milliseconds(200);
    o.metrics_address = "127.0.0.1:0";
    // These tests change pods one step at a time and wait for each reconcile: at once rather
    // than a batch later (QueueOwner's test covers the batching).
    o.child_event_batch = std::chrono::milliseconds(0);
    o.restart_backoff = restart_backoff;
    o.restart_backoff_max = restart_backoff_max;
    o.default_image = default_image;
    o.node_loss_timeout = node_loss_timeout;
    auto started = Operator::Start(client.get(), o);
    ASSERT_TRUE(started.ok()) << started.status().message();
    op = std::move(*started);
  }
  void TearDown() override {
    if (op) op->Stop();
  }
  // No back-off unless a test asks for one: most tests fail one pod after another.
  std::chrono::milliseconds restart_backoff{0}, restart_backoff_max{0};
  std::string default_image;
  std::chrono::milliseconds node_loss_timeout{120000};

  // Waits until the operator has finished two reconciles since the call, each brought about by
  // `touch` when given (a change to an object it watches), else by its own look at every job
  // each status period (200 ms). The second began after the call, so a check after it sees
  // what the operator did with the cluster as it is now: what a test expects not to happen, it
  // checks after these passes rather than after a sleep.
  bool Passes(const std::function<void()>& touch = {}) {
    for (int i = 0; i < 2; ++i) {
      const uint64_t from = op->reconciles();
      if (touch) touch();
      if (!Eventually([&] { return op->reconciles() > from; })) return false;
    }
    return true;
  }
  // An annotation changed on an object: a new resourceVersion the operator's watch sees.
  void Touch(const std::string& collection, const std::string& name) {
    Json o = api->Get(collection, "ml", name);
    o["metadata"]["annotations"]["test/touched"] = std::to_string(++touches_);
    api->Put(collection, o);
  }
  int touches_ = 0;

  Json Job(const std::string& name) { return api->Get(kJobs, "ml", name); }
  std::string Phase(const std::string& name) {
    return Job(name).value("status", Json::object()).value("phase", "");
  }
  std::vector<Json> PodsOf(const std::string& role, const std::string& job = "") {
    std::vector<Json> out;
    for (Json& p : api->List(kPods, "ml"))
      if (p["metadata"]["labels"].value(kRoleLabel, "") == role &&
          (job.empty() || p["metadata"]["labels"].value(kJobLabel, "") == job) &&
          !p["metadata"].contains("deletionTimestamp"))
        out.push_back(p);
    return out;
  }
  std::string Condition(const std::string& job, const std::string& type) {
    for (const Json& c :
         Job(job).value("status", Json::object()).value("conditions", Json::array()))
      if (c["type"] == type)
        return c["status"].get<std::string>() + " " + c["reason"].get<std::string>();
    return "";
  }
  // The kubelet: every pod of `role` running and ready.
  void RunAll(const std::string& role, const std::string& job = "") {
    for (const Json& p : PodsOf(role, job))
      if (p["status"].value("phase", "") != "Running")
        api->SetPodPhase("ml", p["metadata"]["name"], "Running", true);
  }
  // Brings a job to Running: every stage's pods started in order.
  void BringUp(const std::string& name, bool ha) {
    if (ha) {
      ASSERT_TRUE(
          Eventually([&] { return !api->Get(kSets, "ml", name + "-controller").is_null(); }));
      api->SetStatefulSetReady("ml", name + "-controller", 3);
    }
    ASSERT_TRUE(Eventually([&] { return PodsOf("ps", name).size() == (ha ? 3u : 2u); }));
    RunAll("ps", name);
    ASSERT_TRUE(Eventually([&] {
      return PodsOf("trainer", name).size() == 2u && PodsOf("data-server", name).size() == 1u;
    }));
    RunAll("data-server", name);
    RunAll("trainer", name);
    ASSERT_TRUE(Eventually([&] { return Phase(name) == "Running"; })) << Job(name).dump(2);
  }
  // The fashion-mnist example submitted to LocalQueue "team": the name of its Workload, once the
  // job is Queued ("" if it never is).
  std::string QueueExample() {
    Json j = Example("fashion-mnist");
    j["metadata"]["labels"] = {{kQueueLabel, "team"}};
    api->Put(kJobs, j);
    if (!Eventually([&] { return Phase("fashion-mnist") == "Queued"; })) return "";
    const std::string uid = Job("fashion-mnist")["metadata"]["uid"];
    return "adamjob-fashion-mnist-" + uid.substr(0, 5);
  }
};

// A burst of changes to a job's pods queues the job once, a batch after the first change; an
// object without a job label queues nothing; with no batch a change queues its job at once.
TEST(QueueOwner, ABurstOfChangesToAJobsPodsQueuesItOnceABatchLater) {
  using std::chrono::milliseconds;
  FakeClock clock;
  kube::WorkQueue::Options qo;
  qo.clock = &clock;
  kube::WorkQueue q(qo);
  auto pod = [](const std::string& ns, const std::string& job) {
    Json p = {{"metadata", {{"name", job + "-ps-0"}, {"namespace", ns}}}};
    if (!job.empty()) p["metadata"]["labels"][kJobLabel] = job;
    return p;
  };
  QueueOwner(&q, pod("ml", "a"), milliseconds(1000));
  clock.Advance(milliseconds(300));
  QueueOwner(&q, pod("ml", "a"), milliseconds(1000));
  QueueOwner(&q, pod("ml", ""), milliseconds(1000));
  clock.Advance(milliseconds(699));
  EXPECT_EQ(q.Depth(), 0u);  // 999 ms after the first change
  QueueOwner(&q, pod("other", "b"), milliseconds(0));
  EXPECT_EQ(*q.Get(), "other/b");
  q.Done("other/b");
  clock.Advance(milliseconds(1));
  EXPECT_EQ(*q.Get(), "ml/a");
  q.Done("ml/a");
  clock.Advance(milliseconds(2000));  // past where the second change would have been due
  q.Add("ml/c");
  EXPECT_EQ(*q.Get(), "ml/c");
  EXPECT_EQ(q.Depth(), 0u) << "a change of the burst queued the job a second time";
  q.Done("ml/c");
}

std::string CertOf(const Json& secret, const std::string& key) {
  auto pem = kube::Base64Decode(secret["data"].value(key, ""));
  return pem.ok() ? *pem : "";
}

TEST_F(OperatorTest, CreatesStageByStageAndReportsRunning) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist-ha"));
  const std::string job = "fashion-mnist-ha";
  ASSERT_TRUE(Eventually([&] { return !api->Get(kSets, "ml", job + "-controller").is_null(); }));
  EXPECT_FALSE(api->Get("v1/configmaps", "ml", job + "-job").is_null());
  EXPECT_FALSE(api->Get("v1/services", "ml", job).is_null());
  EXPECT_FALSE(api->Get("networking.k8s.io/v1/networkpolicies", "ml", job).is_null());
  // The job's certificates Secret: its CA and a certificate per role, named by the role and
  // issued by the CA, made once.
  const Json secret = api->Get("v1/secrets", "ml", job + "-certs");
  ASSERT_FALSE(secret.is_null());
  EXPECT_EQ(secret["type"], "Opaque");
  EXPECT_EQ(secret["data"].size(), 1 + 2 * net::kRoleNames.size()) << secret["data"].dump();
  for (std::string_view role : net::kRoleNames) {
    const std::string r(role);
    ASSERT_TRUE(secret["data"].contains(r + ".key")) << r;
    const std::string cert = CertOf(secret, r + ".crt");
    EXPECT_TRUE(net::CheckIssuedBy(cert, CertOf(secret, "ca.crt")).ok()) << r;
    auto names = net::CertificateNames(cert);
    ASSERT_TRUE(names.ok()) << r;
    EXPECT_EQ(*names, std::vector<std::string>{r});
  }
  EXPECT_EQ(secret["metadata"]["ownerReferences"][0]["uid"], Job(job)["metadata"]["uid"]);
  // Its CA's key in a second Secret, from which certificates are renewed.
  const Json ca = api->Get("v1/secrets", "ml", job + "-ca");
  ASSERT_FALSE(ca.is_null());
  EXPECT_EQ(ca["data"]["ca.crt"], secret["data"]["ca.crt"]);
  EXPECT_TRUE(ca["data"].contains("ca.key"));
  EXPECT_FALSE(secret["data"].contains("ca.key"));
  // Parameter servers wait for the controller group.
  ASSERT_TRUE(Passes());
  EXPECT_TRUE(PodsOf("ps").empty());
  EXPECT_EQ(Phase(job), "Pending");
  api->SetStatefulSetReady("ml", job + "-controller", 3);
  ASSERT_TRUE(Eventually([&] { return PodsOf("ps").size() == 3u; }));
  ASSERT_TRUE(Passes());
  EXPECT_TRUE(PodsOf("trainer").empty());  // trainers wait for ready parameter servers
  RunAll("ps");
  ASSERT_TRUE(Eventually([&] { return PodsOf("trainer").size() == 2u; }));
  RunAll("data-server");
  RunAll("trainer");
  ASSERT_TRUE(Eventually([&] { return Phase(job) == "Running"; }));
  // Reconciled many times since, the Secret was never replaced (pods hold its certificates).
  EXPECT_EQ(api->Get("v1/secrets", "ml", job + "-certs")["metadata"]["uid"],
            secret["metadata"]["uid"]);
  const Json st = Job(job)["status"];
  EXPECT_EQ(st["roles"]["ps"]["ready"], 3);
  EXPECT_EQ(st["roles"]["controller"]["ready"], 3);
  EXPECT_EQ(st["observedGeneration"], Job(job)["metadata"]["generation"]);
  EXPECT_EQ(Condition(job, "Running"), "True PodsRunning");
  EXPECT_EQ(Condition(job, "Created"), "True ObjectsCreated");
  // Owned, finalized, and the status is valid under the CRD's schema.
  const Json pod = PodsOf("ps")[0];
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], Job(job)["metadata"]["uid"]);
  // No pod mounts the CA's key, and each pod mounts its own role's certificate and key only.
  for (const Json& p : api->List(kPods, "ml")) {
    std::string role = p["metadata"]["labels"].value(kRoleLabel, "");
    if (role == "model-worker") role = "trainer";
    int mounted = 0;
    for (const Json& v : p["spec"].value("volumes", Json::array())) {
      const Json secret_source = v.value("secret", Json::object());
      EXPECT_NE(secret_source.value("secretName", ""), job + "-ca");
      if (secret_source.value("secretName", "") != job + "-certs") continue;
      ++mounted;
      std::map<std::string, std::string> items;
      for (const Json& i : secret_source.value("items", Json::array()))
        items[i.value("key", "")] = i.value("path", "");
      EXPECT_EQ(items,
                (std::map<std::string, std::string>{
                    {"ca.crt", "ca.crt"}, {role + ".crt", "tls.crt"}, {role + ".key", "tls.key"}}))
          << p["metadata"]["name"];
    }
    EXPECT_EQ(mounted, 1) << p["metadata"]["name"];
  }
  EXPECT_EQ(Job(job)["metadata"]["finalizers"][0], kFinalizer);
  bool event = false;
  for (const Json& e : api->List(kEvents, "ml")) event |= e["reason"] == "Running";
  EXPECT_TRUE(event);
}

TEST_F(OperatorTest, RenewsTheCertificateFromTheJobsCaBeforeItExpires) {
  // Three-second certificates: each is renewed with one second left.
  StartOperator(std::chrono::seconds(3));
  api->Put(kJobs, Example("fashion-mnist"));
  const std::string job = "fashion-mnist";
  ASSERT_TRUE(Eventually([&] { return !api->Get("v1/secrets", "ml", job + "-certs").is_null(); }));
  const Json first = api->Get("v1/secrets", "ml", job + "-certs");
  const Json ca = api->Get("v1/secrets", "ml", job + "-ca");
  auto first_end = net::CertificateNotAfter(CertOf(first, "trainer.crt"));
  ASSERT_TRUE(first_end.ok());
  ASSERT_TRUE(Eventually([&] {
    return CertOf(api->Get("v1/secrets", "ml", job + "-certs"), "trainer.crt") !=
           CertOf(first, "trainer.crt");
  }));
  const Json renewed = api->Get("v1/secrets", "ml", job + "-certs");
  // The same Secret and CA; every role a new key, a later end, its own name.
  EXPECT_EQ(renewed["metadata"]["uid"], first["metadata"]["uid"]);
  EXPECT_EQ(renewed["data"]["ca.crt"], first["data"]["ca.crt"]);
  for (std::string_view role : net::kRoleNames) {
    const std::string r(role);
    EXPECT_NE(renewed["data"][r + ".key"], first["data"][r + ".key"]) << r;
    EXPECT_GT(*net::CertificateNotAfter(CertOf(renewed, r + ".crt")), *first_end) << r;
    EXPECT_TRUE(net::CheckIssuedBy(CertOf(renewed, r + ".crt"), CertOf(ca, "ca.crt")).ok()) << r;
    EXPECT_EQ(*net::CertificateNames(CertOf(renewed, r + ".crt")), std::vector<std::string>{r});
  }
  EXPECT_EQ(api->Get("v1/secrets", "ml", job + "-ca")["data"], ca["data"]);
  auto has_event = [&](const char* reason) {
    for (const Json& e : api->List(kEvents, "ml"))
      if (e["reason"] == reason) return true;
    return false;
  };
  EXPECT_TRUE(Eventually([&] { return has_event("CertificateRenewed"); }));
  // A CA Secret whose key is garbage, then none at all: nothing to renew from. A warning names
  // the fault, and the rest of the job is still looked after (a deleted pod comes back).
  auto warned = [&](const std::string& text) {
    for (const Json& e : api->List(kEvents, "ml"))
      if (e["reason"] == "CertificateNotRenewable" &&
          e["note"].get<std::string>().find(text) != std::string::npos)
        return true;
    return false;
  };
  Json broken = api->Get("v1/secrets", "ml", job + "-ca");
  broken["data"]["ca.key"] = kube::Base64Encode("not a key");
  api->Put("v1/secrets", broken);
  EXPECT_TRUE(Eventually([&] { return warned("ca.key"); }));
  ASSERT_TRUE(Eventually([&] { return PodsOf("ps", job).size() == 2u; }));
  RunAll("ps", job);
  ASSERT_TRUE(Eventually([&] { return PodsOf("data-server", job).size() == 1u; }));
  const std::string gone = PodsOf("data-server", job)[0]["metadata"]["name"];
  ASSERT_TRUE(api->Remove(kPods, "ml", gone));
  EXPECT_TRUE(Eventually([&] { return PodsOf("data-server", job).size() == 1u; }));
  ASSERT_TRUE(api->Remove("v1/secrets", "ml", job + "-ca"));
  EXPECT_TRUE(Eventually([&] { return warned("is missing"); }));
}

TEST_F(OperatorTest, StatusCarriesEpochAccuracyAndThroughput) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  BringUp("fashion-mnist", false);
  metrics->Set("fashion-mnist-trainer-0", {{"adam_trainer_epoch", 3},
                                           {"adam_trainer_test_accuracy", 0.8971},
                                           {"adam_trainer_images_total", 1000}});
  metrics->Set("fashion-mnist-trainer-1",
               {{"adam_trainer_epoch", 3}, {"adam_trainer_images_total", 1000}});
  ASSERT_TRUE(Eventually([&] { return Job("fashion-mnist")["status"].value("epoch", 0) == 3; }));
  EXPECT_DOUBLE_EQ(Job("fashion-mnist")["status"]["testAccuracy"].get<double>(), 0.8971);
  // Both trainers advance: the job's rate is their sum, over windows of a status period.
  metrics->Set("fashion-mnist-trainer-0", {{"adam_trainer_epoch", 4},
                                           {"adam_trainer_test_accuracy", 0.9012},
                                           {"adam_trainer_images_total", 2000}});
  metrics->SetStep(1e6);
  ASSERT_TRUE(Eventually(
      [&] { return Job("fashion-mnist")["status"].value("imagesPerSecond", 0.0) > 1e6; }));
  EXPECT_TRUE(Eventually([&] { return Job("fashion-mnist")["status"].value("epoch", 0) == 4; }));
  EXPECT_DOUBLE_EQ(Job("fashion-mnist")["status"]["testAccuracy"].get<double>(), 0.9012);
}

// Throughput that moves with every scrape is written at most once every 6 status periods; the
// job is never written at each period for it.
TEST_F(OperatorTest, AMovingThroughputIsWrittenAtARateLimit) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  BringUp("fashion-mnist", false);
  for (const char* t : {"fashion-mnist-trainer-0", "fashion-mnist-trainer-1"})
    metrics->Set(t, {{"adam_trainer_epoch", 1}, {"adam_trainer_images_total", 1000}});
  metrics->SetStep(1000);
  ASSERT_TRUE(
      Eventually([&] { return Job("fashion-mnist")["status"].value("imagesPerSecond", 0.0) > 0; }));
  std::set<std::string> versions;
  std::set<double> rates;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(2400);
  for (int i = 0; std::chrono::steady_clock::now() < end; ++i) {
    metrics->SetStep(1000 + 100 * i);  // a new rate at every scrape
    const Json j = Job("fashion-mnist");
    versions.insert(j["metadata"].value("resourceVersion", ""));
    rates.insert(j["status"].value("imagesPerSecond", 0.0));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // 2.4 s of 200 ms periods: 12 writes without the limit; 1.2 s apart with it.
  EXPECT_GE(rates.size(), 2u) << "the throughput was never refreshed";
  EXPECT_LE(versions.size(), 4u);
}

// The watch event of the reconciler's own status write calls for no other pass; a change by
// anyone else after it does.
TEST(Reconciler, ItsOwnStatusWriteIsNoReasonForAnotherPass) {
  auto api = FakeApiServer::Start();
  auto client = kube::NewHttpClient(Plain(api->url()));
  struct None : Children {
    std::vector<Json> Owned(const kube::Resource&, const std::string&, const std::string&,
                            const std::string&) const override {
      return {};
    }
  } none;
  Reconciler r(client.get(), &none);
  Json j = Example("fashion-mnist");
  j["spec"]["training"]["epochs"] = 0;  // invalid: the pass writes a condition and stops
  api->Put(kJobs, j);
  ASSERT_TRUE(r.Reconcile("ml", "fashion-mnist").ok());
  const Json written = api->Get(kJobs, "ml", "fashion-mnist");
  ASSERT_EQ(written["status"].value("phase", ""), "Failed") << written.dump(2);
  EXPECT_TRUE(r.OwnWrite({"MODIFIED", written}));
  EXPECT_FALSE(r.OwnWrite({"ADDED", written}));
  Json touched = written;
  touched["metadata"]["labels"]["test/touched"] = "1";
  api->Put(kJobs, touched);
  EXPECT_FALSE(r.OwnWrite({"MODIFIED", api->Get(kJobs, "ml", "fashion-mnist")}));
}

TEST_F(OperatorTest, RecreatesADeletedPodAndRestartsAFailedOne) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  BringUp("fashion-mnist", false);
  const std::string uid = PodsOf("ps")[0]["metadata"]["uid"];
  api->Remove(kPods, "ml", "fashion-mnist-ps-0");
  ASSERT_TRUE(Eventually([&] {
    Json p = api->Get(kPods, "ml", "fashion-mnist-ps-0");
    return !p.is_null() && p["metadata"]["uid"] != uid;
  }));
  RunAll("ps");  // later stages go on once the recreated server is ready again
  // A crash (SIGSEGV: 139) is restarted and counted, quoting the container's last line.
  const std::string last =
      "*** fatal signal 11 (SIGSEGV) in thread 7 at address 0x0 (its stack above)";
  api->SetPodPhase("ml", "fashion-mnist-trainer-1", "Failed", false, 139,
                   "./adam(+0x1234)[0x5678]\n" + last + "\n");
  ASSERT_TRUE(Eventually([&] { return Job("fashion-mnist")["status"].value("restarts", 0) == 1; }));
  ASSERT_TRUE(Eventually([&] {
    Json p = api->Get(kPods, "ml", "fashion-mnist-trainer-1");
    return !p.is_null() && p["status"].value("phase", "") == "Pending";
  }));
  EXPECT_EQ(Job("fashion-mnist")["status"]["roles"]["trainer"]["restarts"], 1);
  bool event = false;
  for (const Json& e : api->List(kEvents, "ml"))
    event |= e["reason"] == "PodFailed" &&
             e["note"].get<std::string>().find("exit code 139): " + last + "; restarting it") !=
                 std::string::npos;
  EXPECT_TRUE(event);
  EXPECT_EQ(Phase("fashion-mnist"), "Running");
}

int EventsOf(const FakeApiServer& api, const std::string& reason, const std::string& text);

// A job that names no image runs the operator's default (the chart's image); one that names its
// own keeps it.
TEST_F(OperatorTest, AJobWithoutAnImageRunsTheOperatorsDefault) {
  default_image = "registry.example/adam:2";
  StartOperator();
  Json plain = Example("fashion-mnist");
  plain["spec"].erase("image");
  api->Put(kJobs, plain);
  Json own = Example("fashion-mnist");
  own["metadata"]["name"] = "own";
  own["spec"]["image"] = "elsewhere/adam:1";
  api->Put(kJobs, own);
  ASSERT_TRUE(Eventually(
      [&] { return !PodsOf("ps", "fashion-mnist").empty() && !PodsOf("ps", "own").empty(); }));
  EXPECT_EQ(PodsOf("ps", "fashion-mnist")[0]["spec"]["containers"][0]["image"],
            "registry.example/adam:2");
  EXPECT_EQ(PodsOf("ps", "own")[0]["spec"]["containers"][0]["image"], "elsewhere/adam:1");
}

// A node stops answering (the node lifecycle controller marks it Ready Unknown and its pods not
// ready; a delete only marks them, as no kubelet confirms): its trainer and data server are
// deleted at once after the node-loss timeout and made again, uncounted; its parameter server
// stays, since its volume is on that node.
TEST_F(OperatorTest, TrainersAndDataServersOfALostNodeAreReplacedAfterTheTimeout) {
  node_loss_timeout = std::chrono::milliseconds(1500);
  StartOperator();
  api->HoldPodDeletions(true);
  api->Put(kJobs, Example("fashion-mnist"));
  BringUp("fashion-mnist", false);
  std::map<std::string, std::string> uids;
  for (const char* name :
       {"fashion-mnist-trainer-1", "fashion-mnist-data-server-0", "fashion-mnist-ps-1"}) {
    Json p = api->Get(kPods, "ml", name);
    p["spec"]["nodeName"] = "lost";
    for (Json& c : p["status"]["conditions"])
      if (c["type"] == "Ready") c["status"] = "False";
    uids[name] = api->Put(kPods, p)["metadata"]["uid"];
  }
  const auto t0 = std::chrono::steady_clock::now();
  api->Put("v1/nodes",
           {{"metadata", {{"name", "lost"}}},
            {"status",
             {{"conditions",
               {{{"type", "Ready"},
                 {"status", "Unknown"},
                 {"lastTransitionTime", kube::FormatTime(std::chrono::system_clock::now())}}}}}}});
  const auto replaced = [&](const std::string& name) {
    const Json p = api->Get(kPods, "ml", name);
    return !p.is_null() && p["metadata"]["uid"] != uids[name];
  };
  ASSERT_TRUE(Eventually([&] {
    return replaced("fashion-mnist-trainer-1") && replaced("fashion-mnist-data-server-0");
  })) << Job("fashion-mnist").dump(2);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(400));
  EXPECT_EQ(EventsOf(*api, "NodeLost", "pod fashion-mnist-trainer-1: node lost"), 1);
  EXPECT_EQ(EventsOf(*api, "NodeLost", "pod fashion-mnist-data-server-0: node lost"), 1);
  ASSERT_TRUE(Passes());
  EXPECT_FALSE(replaced("fashion-mnist-ps-1"));
  EXPECT_FALSE(
      api->Get(kPods, "ml", "fashion-mnist-ps-1")["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(Job("fashion-mnist")["status"].value("restarts", 0), 0);
}

// A role whose pods keep failing waits before each new pod, doubling up to the bound, however its
// failures are judged (here an Ignore rule for exit 137, which counts no restart): no hot
// delete-and-create loop.
TEST_F(OperatorTest, ARoleThatKeepsFailingIsMadeAgainAfterADoublingBackoff) {
  restart_backoff = std::chrono::milliseconds(1000);
  restart_backoff_max = std::chrono::milliseconds(2000);
  StartOperator();
  Json j = Example("fashion-mnist");
  j["spec"]["roles"]["trainer"]["failureRules"] =
      Json::parse(R"([{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [137]}}])");
  api->Put(kJobs, j);
  BringUp("fashion-mnist", false);
  const auto trainer = [&] { return api->Get(kPods, "ml", "fashion-mnist-trainer-1"); };
  const auto role = [&] { return Job("fashion-mnist")["status"]["roles"]["trainer"]; };
  // Fails, and is back as a new pod after `wait`; returns how long that took.
  const auto fail = [&] {
    const std::string uid = trainer()["metadata"]["uid"];
    const auto t0 = std::chrono::steady_clock::now();
    api->SetPodPhase("ml", "fashion-mnist-trainer-1", "Failed", false, 137);
    EXPECT_TRUE(Eventually([&] {
      const Json p = trainer();
      return !p.is_null() && p["metadata"]["uid"] != uid;
    })) << Job("fashion-mnist").dump(2);
    return std::chrono::steady_clock::now() - t0;
  };
  // The first failure: replaced at once.
  EXPECT_LT(fail(), std::chrono::milliseconds(900));
  EXPECT_EQ(role().value("recentFailures", 0), 1);
  EXPECT_FALSE(role().contains("createAfter"));
  RunAll("trainer");
  // The second: the pod waits out the first step (1 s, to the next whole second).
  const auto second = fail();
  EXPECT_GE(second, std::chrono::milliseconds(1000));
  EXPECT_LT(second, std::chrono::milliseconds(4000));
  Json r = role();
  EXPECT_EQ(r.value("recentFailures", 0), 2);
  auto from = kube::ParseTime(r.value("lastFailureTime", ""));
  auto until = kube::ParseTime(r.value("createAfter", ""));
  ASSERT_TRUE(from && until) << r.dump();
  EXPECT_GE(*until - *from, std::chrono::seconds(1));
  EXPECT_EQ(EventsOf(*api, "BackOff", "role trainer failed 2 times in a row"), 1);
  RunAll("trainer");
  // The third: doubled, then held at the bound (2 s).
  EXPECT_GE(fail(), std::chrono::milliseconds(2000));
  r = role();
  from = kube::ParseTime(r.value("lastFailureTime", ""));
  until = kube::ParseTime(r.value("createAfter", ""));
  ASSERT_TRUE(from && until) << r.dump();
  EXPECT_GE(*until - *from, std::chrono::seconds(2));
  EXPECT_LE(*until - *from, std::chrono::seconds(3));
  EXPECT_EQ(r.value("recentFailures", 0), 3);
  // Ignored failures count no restart; the other roles are untouched.
  EXPECT_EQ(Job("fashion-mnist")["status"].value("restarts", 0), 0);
  EXPECT_FALSE(Job("fashion-mnist")["status"]["roles"]["ps"].contains("recentFailures"));
  // The three failures, said alike, are one Event in a series of 3, not three Events.
  std::vector<Json> ignored;
  for (const Json& e : api->List(kEvents, "ml"))
    if (e["reason"] == "PodFailureIgnored") ignored.push_back(e);
  ASSERT_EQ(ignored.size(), 1u);
  EXPECT_EQ(ignored[0]["series"].value("count", 0), 3) << ignored[0].dump(2);
  EXPECT_TRUE(kube::ParseTime(ignored[0]["series"].value("lastObservedTime", "")).has_value());
  EXPECT_EQ(ignored[0]["reportingController"], "adam.dev/operator");
  EXPECT_EQ(ignored[0]["regarding"]["name"], "fashion-mnist");
  EXPECT_EQ(ignored[0]["type"], "Normal");
}

TEST_F(OperatorTest, ExitCodeTwoFailsAtOnceAndBackoffLimitBounds) {
  StartOperator();
  Json j = Example("fashion-mnist");
  j["spec"]["runPolicy"] = {{"backoffLimit", 1}};
  api->Put(kJobs, j);
  BringUp("fashion-mnist", false);
  api->SetPodPhase("ml", "fashion-mnist-trainer-0", "Failed", false, 139);
  ASSERT_TRUE(Eventually([&] { return Job("fashion-mnist")["status"].value("restarts", 0) == 1; }));
  ASSERT_TRUE(Eventually([&] {
    Json p = api->Get(kPods, "ml", "fashion-mnist-trainer-0");
    return !p.is_null() && p["status"].value("phase", "") == "Pending";
  }));
  api->SetPodPhase("ml", "fashion-mnist-trainer-0", "Failed", false, 139);
  ASSERT_TRUE(Eventually([&] { return Phase("fashion-mnist") == "Failed"; }));
  EXPECT_EQ(Condition("fashion-mnist", "Failed"), "True BackoffLimitExceeded");
  // cleanPodPolicy Running (the default): running pods go.
  EXPECT_TRUE(Eventually([&] { return PodsOf("ps").empty(); }));

  api->Put(kJobs, [&] {
    Json k = Example("fashion-mnist");
    k["metadata"]["name"] = "second";
    return k;
  }());
  BringUp("second", false);
  api->SetPodPhase("ml", "second-data-server-0", "Failed", false, 2);
  ASSERT_TRUE(Eventually([&] { return Phase("second") == "Failed"; }));
  EXPECT_EQ(Condition("second", "Failed"), "True InvalidInput");
  EXPECT_EQ(Job("second")["status"].value("restarts", 0), 0);
}

// The kubelet's report of a pod the cluster took away: Failed, with the DisruptionTarget condition.
// One write, as the kubelet makes it: the operator never sees the failure without its reason.
void Disrupt(FakeApiServer& api, const std::string& name) {
  Json p = api.Get(kPods, "ml", name);
  p["status"] = {
      {"phase", "Failed"},
      {"reason", "Evicted"},
      {"podIP", name},
      {"conditions",
       {{{"type", "Ready"}, {"status", "False"}},
        {{"type", "DisruptionTarget"}, {"status", "True"}, {"reason", "TerminationByKubelet"}}}},
      {"containerStatuses",
       {{{"name", "main"}, {"state", {{"terminated", {{"exitCode", 137}}}}}}}}};
  api.Put(kPods, p);
}

// A split replica is one unit: a failed model worker takes its running lead with it, members that
// fail together count one restart, a lead that fails with a worker the cluster took away counts
// none, and the other replica is left alone.
TEST_F(OperatorTest, ASplitReplicaIsReplacedWholeAndCountsOneRestart) {
  StartOperator();
  Json j = Example("fashion-mnist-split");
  j["spec"]["roles"]["trainer"]["replicas"] = 2;
  api->Put(kJobs, j);
  const std::string job = "fashion-mnist-split";
  ASSERT_TRUE(Eventually([&] { return PodsOf("ps", job).size() == 2u; }));
  RunAll("ps", job);
  ASSERT_TRUE(Eventually([&] {
    return PodsOf("trainer", job).size() == 2u && PodsOf("model-worker", job).size() == 2u &&
           PodsOf("data-server", job).size() == 1u;
  }));
  for (const char* role : {"data-server", "trainer", "model-worker"}) RunAll(role, job);
  ASSERT_TRUE(Eventually([&] { return Phase(job) == "Running"; })) << Job(job).dump(2);
  auto uid = [&](const std::string& pod) -> std::string {
    Json p = api->Get(kPods, "ml", job + "-" + pod);
    return p.is_null() ? "" : p["metadata"]["uid"].get<std::string>();
  };
  auto replaced = [&](const std::string& pod, const std::string& old) {
    return Eventually([&] { return !uid(pod).empty() && uid(pod) != old; });
  };
  const std::string lead0 = uid("trainer-0"), worker0 = uid("trainer-0-w1");
  const std::string lead1 = uid("trainer-1"), worker1 = uid("trainer-1-w1");

  // The worker of replica 0 is killed; its lead still runs: both go, one restart.
  api->SetPodPhase("ml", job + "-trainer-0-w1", "Failed", false, 137);
  ASSERT_TRUE(replaced("trainer-0-w1", worker0));
  ASSERT_TRUE(replaced("trainer-0", lead0));
  ASSERT_TRUE(Passes());
  EXPECT_EQ(Job(job)["status"].value("restarts", 0), 1);
  EXPECT_EQ(Job(job)["status"]["roles"]["trainer"].value("restarts", 0), 1);
  bool event = false;
  for (const Json& e : api->List(kEvents, "ml"))
    event |= e["reason"] == "ReplicaRestarting" &&
             e["note"].get<std::string>().find(job + "-trainer-0 ") != std::string::npos;
  EXPECT_TRUE(event);
  EXPECT_EQ(uid("trainer-1"), lead1);
  EXPECT_EQ(uid("trainer-1-w1"), worker1);

  // Replica r's worker ends as `end_worker` has it and its lead exits 1, while no operator runs
  // (so one pass sees both): both are replaced.
  auto fail_together = [&](const std::string& r,
                           const std::function<void(const std::string&)>& end_worker) {
    const std::string lead = uid("trainer-" + r), worker = uid("trainer-" + r + "-w1");
    op->Stop();
    end_worker(job + "-trainer-" + r + "-w1");
    api->SetPodPhase("ml", job + "-trainer-" + r, "Failed", false, 1);
    StartOperator();
    ASSERT_TRUE(replaced("trainer-" + r + "-w1", worker));
    ASSERT_TRUE(replaced("trainer-" + r, lead));
    ASSERT_TRUE(Passes());
  };
  // Replica 1's worker is killed and its lead fails with it: one more restart, not two.
  fail_together("1",
                [&](const std::string& pod) { api->SetPodPhase("ml", pod, "Failed", false, 137); });
  EXPECT_EQ(Job(job)["status"].value("restarts", 0), 2);
  // Replica 0's worker is evicted and its lead ends because of it: nothing counted.
  for (const char* role : {"trainer", "model-worker"}) RunAll(role, job);
  fail_together("0", [&](const std::string& pod) { Disrupt(*api, pod); });
  EXPECT_EQ(Job(job)["status"].value("restarts", 0), 2);
}

TEST_F(OperatorTest, AFailureCountsOnceThoughTheStatusWriteConflicts) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  BringUp("fashion-mnist", false);
  const std::string uid = api->Get(kPods, "ml", "fashion-mnist-trainer-1")["metadata"]["uid"];
  api->FailUpdates(1);  // the status write that counts the failure is refused once
  api->SetPodPhase("ml", "fashion-mnist-trainer-1", "Failed", false, 1);
  ASSERT_TRUE(Eventually([&] {
    Json p = api->Get(kPods, "ml", "fashion-mnist-trainer-1");
    return !p.is_null() && p["metadata"]["uid"] != uid;
  }));
  EXPECT_EQ(api->conflicts_served(), 1);
  EXPECT_EQ(Job("fashion-mnist")["status"].value("restarts", 0), 1);
  ASSERT_TRUE(Passes());  // no late second count
  EXPECT_EQ(Job("fashion-mnist")["status"].value("restarts", 0), 1);
}

// A client that changes the job's metadata between every read and write of the operator's (here:
// whenever the operator posts an Event, as it does between reading the job and writing the count)
// must not hold off the count and the replacement: a metadata-only conflict is written over.
TEST_F(OperatorTest, AFailedPodIsReplacedThoughTheJobsMetadataKeepsChanging) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  BringUp("fashion-mnist", false);
  const std::string uid = api->Get(kPods, "ml", "fashion-mnist-trainer-1")["metadata"]["uid"];
  api->TouchOnEvents(true);
  api->SetPodPhase("ml", "fashion-mnist-trainer-1", "Failed", false, 1);
  ASSERT_TRUE(Eventually([&] {
    Json p = api->Get(kPods, "ml", "fashion-mnist-trainer-1");
    return !p.is_null() && p["metadata"]["uid"] != uid;
  }));
  EXPECT_GE(api->conflicts_served(), 1);  // the touch did race the write
  EXPECT_EQ(Job("fashion-mnist")["status"].value("restarts", 0), 1);
  EXPECT_NE(Job("fashion-mnist")["metadata"]["annotations"].value("touched", ""), "");
}

TEST_F(OperatorTest, APodTheClusterTookAwayIsReplacedWithoutCounting) {
  StartOperator();
  Json j = Example("fashion-mnist");
  j["spec"]["runPolicy"] = {{"backoffLimit", 0}};  // one counted failure would fail the job
  api->Put(kJobs, j);
  BringUp("fashion-mnist", false);
  const std::string uid = api->Get(kPods, "ml", "fashion-mnist-ps-0")["metadata"]["uid"];
  Disrupt(*api, "fashion-mnist-ps-0");
  ASSERT_TRUE(Eventually([&] {
    Json p = api->Get(kPods, "ml", "fashion-mnist-ps-0");
    return !p.is_null() && p["metadata"]["uid"] != uid;
  }));
  EXPECT_EQ(Job("fashion-mnist")["status"].value("restarts", 0), 0);
  EXPECT_NE(Phase("fashion-mnist"), "Failed");
  bool event = false;
  for (const Json& e : api->List(kEvents, "ml")) event |= e["reason"] == "PodDisrupted";
  EXPECT_TRUE(event);
}

// A node lost mid-job: Kubernetes deleted its pods (a parameter server and a trainer). The
// parameter server's replacement cannot start (its volume is on that node), yet the trainer is
// made again at once: only the job's start goes stage by stage.
TEST_F(OperatorTest, AfterTheStartALostTrainerIsReplacedWhileAServerIsDown) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  BringUp("fashion-mnist", false);
  const std::string trainer_uid =
      api->Get(kPods, "ml", "fashion-mnist-trainer-1")["metadata"]["uid"];
  ASSERT_TRUE(api->Remove(kPods, "ml", "fashion-mnist-ps-0"));
  ASSERT_TRUE(api->Remove(kPods, "ml", "fashion-mnist-trainer-1"));
  ASSERT_TRUE(Eventually([&] {
    const Json t = api->Get(kPods, "ml", "fashion-mnist-trainer-1");
    return !t.is_null() && t["metadata"]["uid"] != trainer_uid;
  })) << "the lost trainer was not made again while ps-0 is down";
  const Json ps = api->Get(kPods, "ml", "fashion-mnist-ps-0");
  ASSERT_FALSE(ps.is_null());
  EXPECT_EQ(ps["status"].value("phase", ""), "Pending");
  EXPECT_EQ(Job("fashion-mnist")["status"].value("restarts", 0), 0);
}

TEST_F(OperatorTest, AnUnschedulablePodIsReportedInTheSchedulersWords) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  ASSERT_TRUE(Eventually([&] { return PodsOf("ps").size() == 2u; }));
  Json p = api->Get(kPods, "ml", "fashion-mnist-ps-1");
  p["status"] = {{"phase", "Pending"},
                 {"conditions",
                  {{{"type", "PodScheduled"},
                    {"status", "False"},
                    {"reason", "Unschedulable"},
                    {"message", "0/6 nodes are available: 6 Insufficient cpu."}}}}};
  api->Put(kPods, p);
  ASSERT_TRUE(Eventually(
      [&] { return Condition("fashion-mnist", "Unschedulable") == "True Unschedulable"; }));
  bool event = false;
  for (const Json& e : api->List(kEvents, "ml"))
    event |= e["reason"] == "Unschedulable" &&
             e["note"].get<std::string>().find(
                 "pod fashion-mnist-ps-1 cannot be scheduled: 0/6 nodes "
                 "are available: 6 Insufficient cpu.") != std::string::npos;
  EXPECT_TRUE(event);
  RunAll("ps");
  EXPECT_TRUE(Eventually(
      [&] { return Condition("fashion-mnist", "Unschedulable") == "False PodsScheduled"; }));
}

TEST(StartFailures, OnlyARefusalNoRetryCuresIsReportedWithTheApiServersWords) {
  const Status quota = FailedPreconditionError(
      "POST /api/v1/namespaces/ml/pods: HTTP 403: pods \"j-ps-0\" is forbidden: exceeded quota: "
      "q, requested: cpu=2, used: cpu=3, limited: cpu=4");
  const auto f = RefusedCreate("Pod", "j-ps-0", quota);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->reason, "FailedCreate");
  EXPECT_EQ(f->object, "pod j-ps-0");
  EXPECT_EQ(f->message,
            "pod j-ps-0: the API server refused it: pods \"j-ps-0\" is forbidden: exceeded "
            "quota: q, requested: cpu=2, used: cpu=3, limited: cpu=4");
  EXPECT_TRUE(RefusedCreate("Pod", "p", InvalidArgumentError("POST x: HTTP 422: bad")));
  EXPECT_FALSE(RefusedCreate("Pod", "p", UnavailableError("POST x: HTTP 429: slow down")));
  EXPECT_FALSE(RefusedCreate("Pod", "p", AbortedError("PUT x: HTTP 409: conflict")));
}

TEST(StartFailures, AWaitingContainerCountsOnlyForReasonsWaitingDoesNotCure) {
  auto pod = [](const std::string& name, const std::string& reason) {
    return Json{{"metadata", {{"name", name}}},
                {"status",
                 {{"containerStatuses",
                   {{{"name", "trainer"}, {"state", {{"waiting", {{"reason", reason}}}}}}}}}}};
  };
  EXPECT_FALSE(WaitingContainer({pod("a", "ContainerCreating"), pod("b", "PodInitializing")}));
  const auto f = WaitingContainer({pod("a", "ContainerCreating"), pod("b", "ImagePullBackOff")});
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->reason, "ErrImagePull");
  EXPECT_EQ(f->message, "pod b, container trainer: ImagePullBackOff");
  EXPECT_EQ(WaitingContainer({pod("c", "CreateContainerConfigError")})->reason,
            "CreateContainerConfigError");
}

TEST(StartFailures, APodScheduledLongAgoWithNothingStartedIsExplainedByItsNewestWarning) {
  const auto now = *kube::ParseTime("2026-01-01T00:01:00Z");
  auto pod = [](const std::string& uid, const std::string& scheduled, const std::string& state) {
    return Json{
        {"metadata", {{"name", "p-" + uid}, {"uid", uid}}},
        {"status",
         {{"phase", "Pending"},
          {"conditions",
           {{{"type", "PodScheduled"}, {"status", "True"}, {"lastTransitionTime", scheduled}}}},
          {"containerStatuses", {{{"name", "ps"}, {"state", {{state, Json::object()}}}}}}}}};
  };
  const std::vector<Json> pods = {pod("old", "2026-01-01T00:00:00Z", "waiting"),
                                  pod("new", "2026-01-01T00:00:58Z", "waiting"),
                                  pod("running", "2026-01-01T00:00:00Z", "running")};
  const Json set = {
      {"metadata", {{"uid", "sts"}}}, {"spec", {{"replicas", 3}}}, {"status", {{"replicas", 1}}}};
  const std::vector<std::string> stuck = StuckObjects(pods, {set}, now);
  EXPECT_EQ(stuck, (std::vector<std::string>{"old", "sts"}));
  auto event = [](const std::string& uid, const std::string& type, const std::string& reason,
                  const std::string& at) {
    return Json{{"involvedObject", {{"kind", "Pod"}, {"name", "p-" + uid}, {"uid", uid}}},
                {"type", type},
                {"reason", reason},
                {"message", reason + " said"},
                {"lastTimestamp", at}};
  };
  const Json events = {{"items",
                        {event("old", "Warning", "FailedMount", "2026-01-01T00:00:10Z"),
                         event("old", "Warning", "FailedCreatePodSandBox", "2026-01-01T00:00:30Z"),
                         event("old", "Normal", "Pulled", "2026-01-01T00:00:50Z"),
                         event("new", "Warning", "FailedMount", "2026-01-01T00:00:59Z")}}};
  const auto f = FromEvents(events, stuck);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->reason, "FailedCreatePodSandBox");
  EXPECT_EQ(f->message, "pod p-old: FailedCreatePodSandBox said");
  EXPECT_FALSE(FromEvents(events, {"running"}));
}

// Events about the job with `reason` whose message holds `text`.
int EventsOf(const FakeApiServer& api, const std::string& reason, const std::string& text) {
  int n = 0;
  for (const Json& e : api.List(kEvents, "ml"))
    n += e["reason"] == reason && e["note"].get<std::string>().find(text) != std::string::npos;
  return n;
}

TEST_F(OperatorTest, ARefusedPodCreateIsReportedAndTriedAgain) {
  // A long refusal (over the 1 KiB an Event's note may hold), in two-byte characters.
  std::string details;
  for (int i = 0; i < 800; ++i) details += "\u00e9";
  api->RefuseCreates(kPods, 403,
                     "pods \"fashion-mnist-ps-0\" is forbidden: violates PodSecurity "
                     "\"restricted:latest\": hostPath volumes; " +
                         details);
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  ASSERT_TRUE(Eventually(
      [&] { return Condition("fashion-mnist", "StartFailure") == "True FailedCreate"; }));
  EXPECT_GE(EventsOf(*api, "FailedCreate", "violates PodSecurity"), 1);
  // Its Event holds what fits, cut at a character boundary and marked as cut.
  for (const Json& e : api->List(kEvents, "ml")) {
    if (e["reason"] != "FailedCreate") continue;
    const std::string note = e["note"];
    EXPECT_LE(note.size(), 1024u);
    ASSERT_GE(note.size(), 4u);
    EXPECT_EQ(note.substr(note.size() - 3), "...");
    EXPECT_EQ(static_cast<unsigned char>(note[note.size() - 4]), 0xA9);  // the end of an é
  }
  EXPECT_EQ(Phase("fashion-mnist"), "Pending");
  // Admission relents: the next try (within 10 s) makes the pods, and the condition clears.
  api->RefuseCreates(kPods, 0, "");
  ASSERT_TRUE(Eventually([&] { return PodsOf("ps").size() == 2u; }, std::chrono::seconds(20)));
  RunAll("ps");
  EXPECT_TRUE(Eventually(
      [&] { return Condition("fashion-mnist", "StartFailure") == "False NoStartFailure"; }));
}

TEST_F(OperatorTest, AContainerThatCannotStartIsReportedOnceInTheKubeletsWords) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  ASSERT_TRUE(Eventually([&] { return PodsOf("ps").size() == 2u; }));
  // The kubelet's tries alternate between ErrImagePull and ImagePullBackOff.
  for (const char* reason : {"ErrImagePull", "ImagePullBackOff", "ErrImagePull"}) {
    Json p = api->Get(kPods, "ml", "fashion-mnist-ps-1");
    p["status"] = {{"phase", "Pending"},
                   {"containerStatuses",
                    {{{"name", "ps"},
                      {"ready", false},
                      {"state",
                       {{"waiting",
                         {{"reason", reason},
                          {"message", std::string(reason) + ": adam:nope not found"}}}}}}}}};
    api->Put(kPods, p);
    ASSERT_TRUE(Eventually([&] {
      return Job("fashion-mnist")["status"].dump().find(std::string(reason) + ": adam:nope") !=
             std::string::npos;
    }));
  }
  EXPECT_EQ(Condition("fashion-mnist", "StartFailure"), "True ErrImagePull");
  EXPECT_EQ(EventsOf(*api, "ErrImagePull", "pod fashion-mnist-ps-1, container ps"), 1);
  RunAll("ps");
  EXPECT_TRUE(Eventually(
      [&] { return Condition("fashion-mnist", "StartFailure") == "False NoStartFailure"; }));
}

TEST_F(OperatorTest, APodStuckCreatingIsExplainedByTheKubeletsEvents) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  ASSERT_TRUE(Eventually([&] { return PodsOf("ps").size() == 2u; }));
  Json p = api->Get(kPods, "ml", "fashion-mnist-ps-0");
  p["status"] = {{"phase", "Pending"},
                 {"conditions",
                  {{{"type", "PodScheduled"},
                    {"status", "True"},
                    {"lastTransitionTime", "2026-01-01T00:00:00Z"}}}},
                 {"containerStatuses",
                  {{{"name", "ps"}, {"state", {{"waiting", {{"reason", "ContainerCreating"}}}}}}}}};
  api->Put(kPods, p);
  // The kubelet's events: an older Normal one, and the Warning that says why.
  const std::string uid = p["metadata"]["uid"];
  auto event = [&](const std::string& name, const std::string& type, const std::string& reason,
                   const std::string& message, const std::string& at) {
    api->Put("v1/events",
             {{"apiVersion", "v1"},
              {"kind", "Event"},
              {"metadata", {{"name", name}, {"namespace", "ml"}}},
              {"involvedObject", {{"kind", "Pod"}, {"name", "fashion-mnist-ps-0"}, {"uid", uid}}},
              {"type", type},
              {"reason", reason},
              {"message", message},
              {"lastTimestamp", at}});
  };
  event("a", "Normal", "Scheduled", "assigned to node-0", "2026-01-01T00:00:00Z");
  event("b", "Warning", "FailedMount",
        "MountVolume.SetUp failed for volume \"data\": mount failed: exit status 32",
        "2026-01-01T00:00:02Z");
  ASSERT_TRUE(
      Eventually([&] { return Condition("fashion-mnist", "StartFailure") == "True FailedMount"; },
                 std::chrono::seconds(20)))
      << Job("fashion-mnist")["status"].dump(2)
      << api->Get(kPods, "ml", "fashion-mnist-ps-0").dump(2);
  EXPECT_EQ(EventsOf(*api, "FailedMount", "pod fashion-mnist-ps-0: MountVolume.SetUp failed"), 1);
}

// A job created again under the same name does not take its predecessor's dying pod for its own.
TEST_F(OperatorTest, APredecessorsPodOfTheSameNameIsNotAdopted) {
  Json old = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", "fashion-mnist-trainer-0"},
                {"namespace", "ml"},
                {"finalizers", {"test/hold"}},
                {"deletionTimestamp", "2026-01-01T00:00:00Z"},
                {"labels",
                 {{kJobLabel, "fashion-mnist"},
                  {kRoleLabel, "trainer"},
                  {kIndexLabel, "0"},
                  {"app.kubernetes.io/managed-by", "adam-operator"}}},
                {"ownerReferences",
                 {{{"apiVersion", "adam.dev/v1alpha1"},
                   {"kind", "AdamJob"},
                   {"name", "fashion-mnist"},
                   {"uid", "the-predecessor"},
                   {"controller", true}}}}}},
              {"spec", {{"containers", Json::array()}}},
              {"status",
               {{"phase", "Running"}, {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}};
  api->Put(kPods, old);
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  ASSERT_TRUE(Eventually([&] { return PodsOf("ps").size() == 2u; }));
  RunAll("ps");
  ASSERT_TRUE(Eventually(
      [&] { return PodsOf("data-server").size() == 1u && PodsOf("trainer").size() == 1u; }));
  RunAll("data-server");
  RunAll("trainer");  // trainer-1: the only one of its own
  ASSERT_TRUE(Eventually([&] {
    return Job("fashion-mnist")
               .value("status", Json::object())
               .value("roles", Json::object())
               .value("trainer", Json::object())
               .value("ready", 0) == 1;
  }));
  ASSERT_TRUE(Passes());
  EXPECT_NE(Phase("fashion-mnist"), "Running");  // trainer-0 is not its own yet
  EXPECT_EQ(Job("fashion-mnist")["status"]["roles"]["trainer"]["ready"], 1);
  Json gone =
      api->Get(kPods, "ml", "fashion-mnist-trainer-0");  // the predecessor's pod finally goes
  gone["metadata"].erase("finalizers");
  api->Put(kPods, gone);
  api->Remove(kPods, "ml", "fashion-mnist-trainer-0");
  ASSERT_TRUE(Eventually([&] {
    Json p = api->Get(kPods, "ml", "fashion-mnist-trainer-0");
    return !p.is_null() &&
           p["metadata"]["ownerReferences"][0]["uid"] == Job("fashion-mnist")["metadata"]["uid"];
  }));
  RunAll("trainer");
  EXPECT_TRUE(Eventually([&] { return Phase("fashion-mnist") == "Running"; }));
}

TEST_F(OperatorTest, AStuckParameterServerHoldsTheDeletionOnlyUntilTheFlushTimeout) {
  StartOperator();
  Json j = Example("fashion-mnist");
  j["spec"]["runPolicy"] = {{"flushTimeoutSeconds", 2}};
  api->Put(kJobs, j);
  BringUp("fashion-mnist", false);
  Json ps = api->Get(kPods, "ml", "fashion-mnist-ps-0");
  ps["metadata"]["finalizers"] = {"test/stuck"};  // its node is gone: it never finishes
  api->Put(kPods, ps);
  const auto t0 = std::chrono::steady_clock::now();
  api->Remove(kJobs, "ml", "fashion-mnist");
  // deletionTimestamp has whole seconds: the 2 s run out 1 to 2 s from now.
  ASSERT_TRUE(Passes());
  EXPECT_FALSE(Job("fashion-mnist").is_null());
  ASSERT_TRUE(
      Eventually([&] { return Job("fashion-mnist").is_null(); }, std::chrono::milliseconds(5000)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(900));
  bool event = false;
  for (const Json& e : api->List(kEvents, "ml"))
    event |= e["reason"] == "FlushTimedOut" &&
             e["note"].get<std::string>().find("fashion-mnist-ps-0") != std::string::npos;
  EXPECT_TRUE(event);
}

TEST_F(OperatorTest, UnpinnedTrainersAreNamedInTheStatus) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  BringUp("fashion-mnist", false);
  metrics->Set("fashion-mnist-trainer-0", {{"adam_cpu_pinned", 1}});
  metrics->Set("fashion-mnist-trainer-1", {{"adam_cpu_pinned", 0}});
  ASSERT_TRUE(
      Eventually([&] { return Condition("fashion-mnist", "CpuPinned") == "False CpuSetShared"; }));
  std::string msg;
  const Json job = Job("fashion-mnist");
  for (const Json& c : job["status"]["conditions"])
    if (c["type"] == "CpuPinned") msg = c["message"];
  EXPECT_NE(msg.find("trainers fashion-mnist-trainer-1 run unpinned"), std::string::npos) << msg;
  metrics->Set("fashion-mnist-trainer-1", {{"adam_cpu_pinned", 1}});
  EXPECT_TRUE(
      Eventually([&] { return Condition("fashion-mnist", "CpuPinned") == "True ExclusiveCpus"; }));
}

// The CRD refuses a change of the shard layout; if one slips past it (an old CRD, a direct write
// to etcd), the servers that hold the weights are not deleted for it.
TEST_F(OperatorTest, AChangedShardLayoutNeverDeletesARunningParameterServer) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  BringUp("fashion-mnist", false);
  const std::string uid = api->Get(kPods, "ml", "fashion-mnist-ps-1")["metadata"]["uid"];
  Json j = Job("fashion-mnist");
  j["spec"]["roles"]["parameterServer"]["replicas"] = 1;
  api->Put(kJobs, j);
  ASSERT_TRUE(Passes());
  Json ps1 = api->Get(kPods, "ml", "fashion-mnist-ps-1");
  ASSERT_FALSE(ps1.is_null());
  EXPECT_EQ(ps1["metadata"]["uid"], uid);
  EXPECT_FALSE(ps1["metadata"].contains("deletionTimestamp"));
}

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

// A trainer that found training diverged (exit 3) fails the job at once: a restart would go on
// from the same weights. Its last log line (the kubelet's termination message) is quoted.
TEST_F(OperatorTest, ADivergedTrainerFailsTheJobQuotingIt) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  BringUp("fashion-mnist", false);
  Json p = api->Get(kPods, "ml", "fashion-mnist-trainer-1");
  p["status"] = {{"phase", "Failed"},
                 {"podIP", "fashion-mnist-trainer-1"},
                 {"conditions", {{{"type", "Ready"}, {"status", "False"}}}},
                 {"containerStatuses",
                  {{{"name", "trainer"},
                    {"state",
                     {{"terminated",
                       {{"exitCode", 3},
                        {"message",
                         "10:00:01 info epoch 1\n10:00:02 error training diverged in epoch 2: the "
                         "mean training loss is NaN\n"}}}}}}}}};
  api->Put(kPods, p);
  ASSERT_TRUE(Eventually([&] { return Phase("fashion-mnist") == "Failed"; }));
  EXPECT_EQ(Condition("fashion-mnist", "Failed"), "True Diverged");
  std::string msg;
  const Json job = Job("fashion-mnist");
  for (const Json& c : job["status"]["conditions"])
    if (c["type"] == "Failed") msg = c["message"];
  EXPECT_NE(msg.find("exit code 3"), std::string::npos) << msg;
  EXPECT_NE(
      msg.find(": 10:00:02 error training diverged in epoch 2: the mean training loss is NaN"),
      std::string::npos)
      << msg;
  EXPECT_EQ(job["status"].value("restarts", 0), 0);
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

TEST_F(OperatorTest, AnInvalidSpecIsAConditionNamingTheField) {
  StartOperator();
  Json j = Example("fashion-mnist-ha");
  j["spec"]["roles"]["parameterServer"]["copies"] = 4;  // more copies than servers
  api->Put(kJobs, j);
  ASSERT_TRUE(Eventually([&] { return Phase("fashion-mnist-ha") == "Failed"; }));
  const Json st = Job("fashion-mnist-ha")["status"];
  bool named = false;
  for (const Json& c : st["conditions"])
    named |= c["type"] == "InvalidSpec" && c["status"] == "True" &&
             c["message"].get<std::string>().find("spec.roles.parameterServer.copies") !=
                 std::string::npos;
  EXPECT_TRUE(named) << st.dump(2);
  EXPECT_TRUE(api->List(kPods, "ml").empty());
  // Fixed, the job starts.
  j = Job("fashion-mnist-ha");
  j["spec"]["roles"]["parameterServer"]["copies"] = 3;
  api->Put(kJobs, j);
  ASSERT_TRUE(
      Eventually([&] { return !api->Get(kSets, "ml", "fashion-mnist-ha-controller").is_null(); }));
  // (The status is written at the end of the reconcile that created it.)
  EXPECT_TRUE(Eventually(
      [&] { return Condition("fashion-mnist-ha", "InvalidSpec") == "False SpecValid"; }));
  EXPECT_TRUE(Eventually([&] { return Phase("fashion-mnist-ha") == "Pending"; }));
}

TEST_F(OperatorTest, SucceedsCleansUpAndExpires) {
  StartOperator();
  Json j = Example("fashion-mnist");
  j["spec"]["runPolicy"] = {{"ttlSecondsAfterFinished", 1}};
  api->Put(kJobs, j);
  BringUp("fashion-mnist", false);
  for (const Json& p : PodsOf("trainer"))
    api->SetPodPhase("ml", p["metadata"]["name"], "Succeeded", false, 0);
  ASSERT_TRUE(Eventually([&] { return Phase("fashion-mnist") == "Succeeded"; }));
  EXPECT_TRUE(Job("fashion-mnist")["status"].contains("completionTime"));
  EXPECT_TRUE(Eventually([&] { return PodsOf("ps").empty(); }));  // flushed and gone
  EXPECT_EQ(PodsOf("trainer").size(), 2u);                        // finished pods stay
  // ttlSecondsAfterFinished: the job, and with it everything it owns, is deleted.
  ASSERT_TRUE(Eventually([&] { return Job("fashion-mnist").is_null(); }, std::chrono::seconds(6)));
  EXPECT_TRUE(Eventually([&] { return api->List(kPods, "ml").empty(); }));
  EXPECT_TRUE(api->List("v1/configmaps", "ml").empty());
  EXPECT_EQ(api->List("v1/persistentvolumeclaims", "ml").size(), 2u);  // checkpoints stay
}

// Trainer 0's termination message (its last evaluation) is the finished job's accuracy, whatever
// the last scrape of its /metrics said.
TEST_F(OperatorTest, TheFinalAccuracyComesFromTrainerZerosTerminationMessage) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  BringUp("fashion-mnist", false);
  api->SetPodPhase("ml", "fashion-mnist-trainer-0", "Succeeded", false, 0,
                   "{\"epochs\":12,\"images\":720000,\"testAccuracy\":0.912345}\n");
  api->SetPodPhase("ml", "fashion-mnist-trainer-1", "Succeeded", false, 0);
  ASSERT_TRUE(Eventually([&] { return Phase("fashion-mnist") == "Succeeded"; }));
  EXPECT_EQ(Job("fashion-mnist")["status"].value("testAccuracy", 0.0), 0.9123);
  EXPECT_EQ(Job("fashion-mnist")["status"].value("epoch", 0), 12);
}

TEST_F(OperatorTest, ActiveDeadlineFailsTheJob) {
  StartOperator();
  Json j = Example("fashion-mnist");
  j["spec"]["runPolicy"] = {{"activeDeadlineSeconds", 1}};
  api->Put(kJobs, j);
  ASSERT_TRUE(
      Eventually([&] { return Phase("fashion-mnist") == "Failed"; }, std::chrono::seconds(6)));
  EXPECT_EQ(Condition("fashion-mnist", "Failed"), "True DeadlineExceeded");
}

// A job whose pods cannot start fails at its startup deadline, quoting why; one that ran whole
// before its deadline is never failed by it.
TEST_F(OperatorTest, AJobThatCannotStartFailsAtItsStartupDeadline) {
  StartOperator();
  api->RefuseCreates(kPods, 403, "pods is forbidden: violates PodSecurity");
  Json j = Example("fashion-mnist");
  j["spec"]["runPolicy"] = {{"startupDeadlineSeconds", 1}};
  api->Put(kJobs, j);
  ASSERT_TRUE(
      Eventually([&] { return Phase("fashion-mnist") == "Failed"; }, std::chrono::seconds(6)));
  EXPECT_EQ(Condition("fashion-mnist", "Failed"), "True StartupDeadlineExceeded");
  EXPECT_EQ(EventsOf(*api, "StartupDeadlineExceeded", "violates PodSecurity"), 1);
  api->RefuseCreates(kPods, 0, "");

  // A job running whole, given a deadline that its start has long passed: not failed by it.
  Json k = Example("fashion-mnist");
  k["metadata"]["name"] = "quick";
  api->Put(kJobs, k);
  BringUp("quick", false);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  k = Job("quick");
  k["spec"]["runPolicy"] = {{"startupDeadlineSeconds", 1}};
  api->Put(kJobs, k);
  ASSERT_TRUE(Passes([&] { Touch(kJobs, "quick"); }));
  EXPECT_EQ(Phase("quick"), "Running");
}

TEST_F(OperatorTest, RecoversALostWatchAndRetriesConflicts) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  BringUp("fashion-mnist", false);
  const int watches = api->watches_opened();
  api->Compact();
  api->BreakWatches();
  api->FailUpdates(3);  // the next writes conflict
  api->Remove(kPods, "ml", "fashion-mnist-trainer-0");
  ASSERT_TRUE(
      Eventually([&] { return !api->Get(kPods, "ml", "fashion-mnist-trainer-0").is_null(); }));
  EXPECT_GT(api->watches_opened(), watches);
  // The status write of the new count conflicts three times, then lands.
  ASSERT_TRUE(Eventually([&] { return api->conflicts_served() >= 3; }));
  ASSERT_TRUE(Eventually(
      [&] { return Job("fashion-mnist")["status"]["roles"]["trainer"].value("ready", 0) == 1; }));
  api->SetPodPhase("ml", "fashion-mnist-trainer-0", "Running", true);
  ASSERT_TRUE(Eventually(
      [&] { return Job("fashion-mnist")["status"]["roles"]["trainer"].value("ready", 0) == 2; }));
}

TEST_F(OperatorTest, DeletionWaitsForParameterServersToFlush) {
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  BringUp("fashion-mnist", false);
  api->Remove(kJobs, "ml", "fashion-mnist");  // kubectl delete: the finalizer holds it
  ASSERT_TRUE(Eventually([&] { return PodsOf("ps").empty(); }));
  ASSERT_TRUE(Eventually([&] { return Job("fashion-mnist").is_null(); }));
  EXPECT_TRUE(Eventually([&] { return api->List(kPods, "ml").empty(); }));
}

TEST_F(OperatorTest, TwoOperatorsOneLeader) {
  OperatorOptions o;
  o.metrics_address = "127.0.0.1:0";
  o.lease_duration = std::chrono::milliseconds(1000);
  o.renew_deadline = std::chrono::milliseconds(700);
  o.retry_period = std::chrono::milliseconds(50);
  o.write_timeout = std::chrono::milliseconds(200);
  o.identity = "a";
  auto c2 = kube::NewHttpClient(Plain(api->url()));
  auto a = Operator::Start(client.get(), o);
  o.identity = "b";
  auto b = Operator::Start(c2.get(), o);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(Eventually([&] { return (*a)->IsLeader() || (*b)->IsLeader(); }));
  Operator* leader = (*a)->IsLeader() ? a->get() : b->get();
  Operator* standby = (*a)->IsLeader() ? b->get() : a->get();
  api->Put(kJobs, Example("fashion-mnist"));
  ASSERT_TRUE(Eventually([&] { return PodsOf("ps").size() == 2u; }));
  EXPECT_TRUE(Eventually([&] { return leader->reconciles() > 0u; }));
  EXPECT_EQ(standby->reconciles(), 0u);
  EXPECT_FALSE(standby->IsLeader());
  leader->Stop();
  ASSERT_TRUE(Eventually([&] { return standby->IsLeader(); }));
  api->Remove(kPods, "ml", "fashion-mnist-ps-1");
  ASSERT_TRUE(Eventually([&] { return !api->Get(kPods, "ml", "fashion-mnist-ps-1").is_null(); }));
  EXPECT_TRUE(Eventually([&] { return standby->reconciles() > 0u; }));
  standby->Stop();
}

}  // namespace
}  // namespace adam::op
