// The operator against the in-process API server (operator_fixture.h): a job created stage by
// stage and reported, its certificate renewed, its status and its rate-limited writes, an invalid
// spec, deadlines, success and clean-up, lost watches and conflicts, deletion, and two operators
// with one leader.
#include "operator/operator_fixture.h"

namespace adam::op {
namespace {

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
// job is never written at each period for it. On fake time, period by period.
TEST_F(OperatorTest, AMovingThroughputIsWrittenAtARateLimit) {
  OnFakeTime();
  StartOperator();
  api->Put(kJobs, Example("fashion-mnist"));
  BringUp("fashion-mnist", false);
  for (const char* t : {"fashion-mnist-trainer-0", "fashion-mnist-trainer-1"})
    metrics->Set(t, {{"adam_trainer_epoch", 1}, {"adam_trainer_images_total", 1000}});
  metrics->SetStep(1000);
  const auto rate = [&] { return Job("fashion-mnist")["status"].value("imagesPerSecond", 0.0); };
  for (int i = 0; i < 20 && rate() == 0; ++i) ASSERT_TRUE(Passes());
  ASSERT_GT(rate(), 0) << Job("fashion-mnist").dump(2);
  std::set<std::string> versions;
  std::set<double> rates;
  for (int i = 0; i < 6; ++i) {        // 12 status periods (Passes advances two)
    metrics->SetStep(1000 + 100 * i);  // a new rate at every scrape
    ASSERT_TRUE(Passes());
    const Json j = Job("fashion-mnist");
    versions.insert(j["metadata"].value("resourceVersion", ""));
    rates.insert(j["status"].value("imagesPerSecond", 0.0));
  }
  // 12 writes without the limit; with it, one every 6 periods.
  EXPECT_GE(rates.size(), 2u) << "the throughput was never refreshed";
  EXPECT_LE(versions.size(), 3u);
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

// On fake time: the finished job stays 100 ms short of its ttlSecondsAfterFinished, and goes at it.
TEST_F(OperatorTest, SucceedsCleansUpAndExpires) {
  OnFakeTime();
  StartOperator();
  Json j = Example("fashion-mnist");
  j["spec"]["runPolicy"] = {{"ttlSecondsAfterFinished", 60}};
  api->Put(kJobs, j);
  BringUp("fashion-mnist", false);
  for (const Json& p : PodsOf("trainer"))
    api->SetPodPhase("ml", p["metadata"]["name"], "Succeeded", false, 0);
  ASSERT_TRUE(Eventually([&] { return Phase("fashion-mnist") == "Succeeded"; }));
  EXPECT_TRUE(Job("fashion-mnist")["status"].contains("completionTime"));
  EXPECT_TRUE(Eventually([&] { return PodsOf("ps").empty(); }));  // flushed and gone
  EXPECT_EQ(PodsOf("trainer").size(), 2u);                        // finished pods stay
  // ttlSecondsAfterFinished: the job, and with it everything it owns, is deleted.
  Advance(std::chrono::milliseconds(59900));
  ASSERT_TRUE(Passes([&] { Touch(kJobs, "fashion-mnist"); }));
  EXPECT_FALSE(Job("fashion-mnist").is_null());
  Advance(std::chrono::milliseconds(110));
  ASSERT_TRUE(Eventually([&] { return Job("fashion-mnist").is_null(); }));
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

// On fake time: running at its activeDeadlineSeconds less 100 ms, the job runs on; at the deadline
// it fails, by the look the reconciler asked for then (nothing else changes).
TEST_F(OperatorTest, ActiveDeadlineFailsTheJob) {
  OnFakeTime();
  StartOperator();
  Json j = Example("fashion-mnist");
  j["spec"]["runPolicy"] = {{"activeDeadlineSeconds", 30}};
  api->Put(kJobs, j);
  BringUp("fashion-mnist", false);
  Advance(std::chrono::milliseconds(29900));
  ASSERT_TRUE(Passes([&] { Touch(kJobs, "fashion-mnist"); }));
  EXPECT_EQ(Phase("fashion-mnist"), "Running");
  Advance(std::chrono::milliseconds(110));
  ASSERT_TRUE(Eventually([&] { return Phase("fashion-mnist") == "Failed"; }))
      << Job("fashion-mnist").dump(2);
  EXPECT_EQ(Condition("fashion-mnist", "Failed"), "True DeadlineExceeded");
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
