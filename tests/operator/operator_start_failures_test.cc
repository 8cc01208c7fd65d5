// Pods that do not start, said on the job (operator_fixture.h): the rules that pick what to say
// (StartFailures), refused creates, unschedulable pods, containers and volumes that cannot start,
// and the startup deadline.
#include "operator/operator_fixture.h"

namespace adam::op {
namespace {

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

// A job whose pods cannot start fails at its startup deadline, quoting why, and not before; one
// that ran whole before its deadline is never failed by it. On fake time.
TEST_F(OperatorTest, AJobThatCannotStartFailsAtItsStartupDeadline) {
  OnFakeTime();
  StartOperator();
  api->RefuseCreates(kPods, 403, "pods is forbidden: violates PodSecurity");
  Json j = Example("fashion-mnist");
  j["spec"]["runPolicy"] = {{"startupDeadlineSeconds", 30}};
  api->Put(kJobs, j);
  ASSERT_TRUE(Eventually(
      [&] { return Condition("fashion-mnist", "StartFailure") == "True FailedCreate"; }));
  Advance(std::chrono::milliseconds(29900));
  ASSERT_TRUE(Passes([&] { Touch(kJobs, "fashion-mnist"); }));
  EXPECT_EQ(Phase("fashion-mnist"), "Pending");
  Advance(std::chrono::milliseconds(110));
  ASSERT_TRUE(Eventually([&] { return Phase("fashion-mnist") == "Failed"; }))
      << Job("fashion-mnist").dump(2);
  EXPECT_EQ(Condition("fashion-mnist", "Failed"), "True StartupDeadlineExceeded");
  EXPECT_EQ(EventsOf(*api, "StartupDeadlineExceeded", "violates PodSecurity"), 1);
  api->RefuseCreates(kPods, 0, "");

  // A job running whole, given a deadline that its start has long passed: not failed by it.
  Json k = Example("fashion-mnist");
  k["metadata"]["name"] = "quick";
  api->Put(kJobs, k);
  BringUp("quick", false);
  Advance(std::chrono::seconds(2));
  k = Job("quick");
  k["spec"]["runPolicy"] = {{"startupDeadlineSeconds", 1}};
  api->Put(kJobs, k);
  ASSERT_TRUE(Passes([&] { Touch(kJobs, "quick"); }));
  EXPECT_EQ(Phase("quick"), "Running");
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

}  // namespace
}  // namespace adam::op
