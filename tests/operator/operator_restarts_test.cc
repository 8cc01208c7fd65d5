// The operator replacing what fails (operator_fixture.h): deleted and failed pods, back-off and
// the backoff limit, lost nodes, a split replica replaced whole, a diverged trainer (which fails
// the job instead), what is never adopted or deleted.
#include "operator/operator_fixture.h"

namespace adam::op {
namespace {

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
  OnFakeTime();
  node_loss_timeout = std::chrono::seconds(60);
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
  api->Put("v1/nodes", {{"metadata", {{"name", "lost"}}},
                        {"status",
                         {{"conditions",
                           {{{"type", "Ready"},
                             {"status", "Unknown"},
                             {"lastTransitionTime", kube::FormatTime(fake->WallNow())}}}}}}});
  const auto replaced = [&](const std::string& name) {
    const Json p = api->Get(kPods, "ml", name);
    return !p.is_null() && p["metadata"]["uid"] != uids[name];
  };
  // 100 ms short of the timeout, nothing is replaced; at it, the look asked for replaces both.
  Advance(std::chrono::milliseconds(59900));
  ASSERT_TRUE(Passes([&] { Touch(kPods, "fashion-mnist-trainer-1"); }));
  EXPECT_FALSE(replaced("fashion-mnist-trainer-1"));
  EXPECT_FALSE(replaced("fashion-mnist-data-server-0"));
  Advance(std::chrono::milliseconds(100));
  ASSERT_TRUE(Eventually([&] {
    return replaced("fashion-mnist-trainer-1") && replaced("fashion-mnist-data-server-0");
  })) << Job("fashion-mnist").dump(2);
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
  OnFakeTime();
  restart_backoff = std::chrono::seconds(10);
  restart_backoff_max = std::chrono::seconds(20);
  StartOperator();
  Json j = Example("fashion-mnist");
  j["spec"]["roles"]["trainer"]["failureRules"] =
      Json::parse(R"([{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [137]}}])");
  api->Put(kJobs, j);
  BringUp("fashion-mnist", false);
  const auto trainer = [&] { return api->Get(kPods, "ml", "fashion-mnist-trainer-1"); };
  const auto role = [&] { return Job("fashion-mnist")["status"]["roles"]["trainer"]; };
  // The `n`th failure in a row: the pod is not made again `wait` less 100 ms later, and is at
  // `wait` (at once when 0).
  const auto fail = [&](int n, std::chrono::milliseconds wait) {
    const std::string uid = trainer()["metadata"]["uid"];
    api->SetPodPhase("ml", "fashion-mnist-trainer-1", "Failed", false, 137);
    const auto back = [&] {
      const Json p = trainer();
      return !p.is_null() && p["metadata"]["uid"] != uid;
    };
    if (wait.count() > 0) {
      ASSERT_TRUE(Eventually([&] { return role().value("recentFailures", 0) == n; }));
      Advance(wait - std::chrono::milliseconds(100));
      ASSERT_TRUE(Passes([&] { Touch(kJobs, "fashion-mnist"); }));
      EXPECT_FALSE(back()) << "made again before its back-off ended";
      Advance(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(Eventually(back)) << Job("fashion-mnist").dump(2);
    EXPECT_EQ(role().value("recentFailures", 0), n);
  };
  // The first failure: replaced at once.
  fail(1, std::chrono::milliseconds(0));
  EXPECT_FALSE(role().contains("createAfter"));
  RunAll("trainer");
  // The second: the pod waits out the first step (10 s).
  fail(2, std::chrono::seconds(10));
  Json r = role();
  auto from = kube::ParseTime(r.value("lastFailureTime", ""));
  auto until = kube::ParseTime(r.value("createAfter", ""));
  ASSERT_TRUE(from && until) << r.dump();
  EXPECT_EQ(*until - *from, std::chrono::seconds(10));
  EXPECT_EQ(EventsOf(*api, "BackOff", "role trainer failed 2 times in a row"), 1);
  RunAll("trainer");
  // The third: doubled, and so at the bound (20 s).
  fail(3, std::chrono::seconds(20));
  r = role();
  from = kube::ParseTime(r.value("lastFailureTime", ""));
  until = kube::ParseTime(r.value("createAfter", ""));
  ASSERT_TRUE(from && until) << r.dump();
  EXPECT_EQ(*until - *from, std::chrono::seconds(20));
  RunAll("trainer");
  // The fourth: held at the bound.
  fail(4, std::chrono::seconds(20));
  EXPECT_EQ(role().value("recentFailures", 0), 4);
  // Ignored failures count no restart; the other roles are untouched.
  EXPECT_EQ(Job("fashion-mnist")["status"].value("restarts", 0), 0);
  EXPECT_FALSE(Job("fashion-mnist")["status"]["roles"]["ps"].contains("recentFailures"));
  // The four failures, said alike, are one Event in a series of 4, not four Events.
  std::vector<Json> ignored;
  for (const Json& e : api->List(kEvents, "ml"))
    if (e["reason"] == "PodFailureIgnored") ignored.push_back(e);
  ASSERT_EQ(ignored.size(), 1u);
  EXPECT_EQ(ignored[0]["series"].value("count", 0), 4) << ignored[0].dump(2);
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

// On fake time: 100 ms short of spec.runPolicy.flushTimeoutSeconds after the deletion, the job is
// still held; at the timeout it goes, without the flush.
TEST_F(OperatorTest, AStuckParameterServerHoldsTheDeletionOnlyUntilTheFlushTimeout) {
  OnFakeTime();
  StartOperator();
  Json j = Example("fashion-mnist");
  j["spec"]["runPolicy"] = {{"flushTimeoutSeconds", 20}};
  api->Put(kJobs, j);
  BringUp("fashion-mnist", false);
  Json ps = api->Get(kPods, "ml", "fashion-mnist-ps-0");
  ps["metadata"]["finalizers"] = {"test/stuck"};  // its node is gone: it never finishes
  api->Put(kPods, ps);
  api->Remove(kJobs, "ml", "fashion-mnist");
  ASSERT_TRUE(Eventually([&] {
    return api->Get(kPods, "ml", "fashion-mnist-ps-0")["metadata"].contains("deletionTimestamp");
  }));
  Advance(std::chrono::milliseconds(19900));
  ASSERT_TRUE(Passes([&] { Touch(kPods, "fashion-mnist-ps-0"); }));
  EXPECT_FALSE(Job("fashion-mnist").is_null());
  Advance(std::chrono::milliseconds(110));
  ASSERT_TRUE(Eventually([&] { return Job("fashion-mnist").is_null(); }));
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

}  // namespace
}  // namespace adam::op
