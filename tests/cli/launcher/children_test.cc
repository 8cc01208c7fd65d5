// The launcher's parts without `adam`: Children runs real processes (sh, sleep), Faults kills and
// restarts them on its schedule, RunLog turns events into the summary.
#include "launcher/children.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <map>

#include "launcher/faults.h"
#include "launcher/run_log.h"

namespace adam::launcher {
namespace {

spec::RoleInstance Instance(const std::string& name, spec::Role role = spec::Role::kParamServer) {
  spec::RoleInstance in;
  in.role = role;
  in.name = name;
  return in;
}

// Polls until every child has exited (or 10 s pass); returns whether they did.
bool AllExited(Children& children) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < end) {
    children.Poll(-1);
    bool all = true;
    for (const auto& c : children.all()) all = all && c.exited;
    if (all) return true;
  }
  return false;
}

TEST(Children, HandsOnEveryLineAndReapsWithTheExitStatus) {
  std::map<std::string, std::vector<std::string>> lines;
  Children children([&](Child& c, const std::string& l) { lines[c.inst.name].push_back(l); });
  ASSERT_TRUE(
      children.Start(Instance("a"), {"/bin/sh", "-c", "echo one; echo two >&2; exit 3"}, {}).ok());
  // A last line without a newline is still a line.
  ASSERT_TRUE(children.Start(Instance("b"), {"/bin/sh", "-c", "printf 'no newline'"}, {}).ok());
  ASSERT_TRUE(AllExited(children));
  EXPECT_EQ(lines["a"], (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(lines["b"], (std::vector<std::string>{"no newline"}));
  EXPECT_EQ(ExitText(children.all()[0].wait_status), "exited with code 3");
  EXPECT_EQ(children.all()[0].fd, -1);  // its pipe read to the end and closed
}

TEST(Children, AnExecutableThatCannotRunExitsWith127AndSaysWhy) {
  std::vector<std::string> lines;
  Children children([&](Child&, const std::string& l) { lines.push_back(l); });
  ASSERT_TRUE(children.Start(Instance("x"), {"/nonexistent/adam"}, {}).ok());
  ASSERT_TRUE(AllExited(children));
  EXPECT_EQ(ExitText(children.all()[0].wait_status), "exited with code 127");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("/nonexistent/adam"), std::string::npos) << lines[0];
}

TEST(Children, StopAllKillsWhatIgnoresSigtermAfterTheGrace) {
  bool up = false;  // the stubborn one has set its trap
  Children children([&](Child&, const std::string& l) { up = up || l == "up"; });
  ASSERT_TRUE(children.Start(Instance("polite"), {"/bin/sleep", "30"}, {}).ok());
  ASSERT_TRUE(
      children.Start(Instance("stubborn"), {"/bin/sh", "-c", "trap '' TERM; echo up; sleep 30"}, {})
          .ok());
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!up && std::chrono::steady_clock::now() < end) children.Poll(-1);
  ASSERT_TRUE(up);
  const auto t0 = std::chrono::steady_clock::now();
  children.StopAll(std::chrono::seconds(1), *Clock::Real());
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(children.all()[0].exited && children.all()[1].exited);
  EXPECT_TRUE(WIFSIGNALED(children.all()[0].wait_status));
  EXPECT_EQ(WTERMSIG(children.all()[0].wait_status), SIGTERM);
  EXPECT_TRUE(WIFSIGNALED(children.all()[1].wait_status));
  EXPECT_EQ(WTERMSIG(children.all()[1].wait_status), SIGKILL);
  EXPECT_GE(took, std::chrono::milliseconds(900));  // the grace was given
  EXPECT_TRUE(children.all()[0].expected_exit);
}

spec::AdamJob Job() {
  spec::AdamJob job;
  job.name = "j";
  job.training.epochs = 3;
  return job;
}

TEST(Faults, KillsWhenDueAndRestartsWhenAsked) {
  Children children([](Child&, const std::string&) {});
  ASSERT_TRUE(children.Start(Instance("ps-0"), {"/bin/sleep", "30"}, {}).ok());
  ASSERT_TRUE(children.Start(Instance("ps-1"), {"/bin/sleep", "30"}, {}).ok());
  RunOptions o;
  o.kills = {{"ps-0", 1.0, 2.0}};
  const spec::AdamJob job = Job();
  RunLog log(job, o);
  Faults faults(o, /*ha=*/false);
  std::vector<spec::RoleInstance> spawned;
  const auto spawn = [&](const spec::RoleInstance& in) { spawned.push_back(in); };
  faults.Tick(0.9, children.all(), log, spawn);
  EXPECT_FALSE(children.all()[0].expected_exit);
  faults.Tick(1.0, children.all(), log, spawn);
  EXPECT_TRUE(children.all()[0].expected_exit);
  EXPECT_FALSE(children.all()[1].expected_exit);
  faults.Tick(2.9, children.all(), log, spawn);
  EXPECT_TRUE(spawned.empty());
  faults.Tick(3.0, children.all(), log, spawn);
  ASSERT_EQ(spawned.size(), 1u);
  EXPECT_EQ(spawned[0].name, "ps-0");
  faults.Tick(10, children.all(), log, spawn);  // once
  EXPECT_EQ(spawned.size(), 1u);
  // ps-0 died of SIGKILL; ps-1 still runs.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!children.all()[0].exited && std::chrono::steady_clock::now() < end) children.Poll(-1);
  ASSERT_TRUE(children.all()[0].exited);
  EXPECT_TRUE(WIFSIGNALED(children.all()[0].wait_status));
  EXPECT_EQ(WTERMSIG(children.all()[0].wait_status), SIGKILL);
  EXPECT_FALSE(children.all()[1].exited);
  children.StopAll(std::chrono::seconds(1), *Clock::Real());
}

// An event line's JSON as the launcher hands it on: read through the typed events (a kind this
// build does not know fails the test).
void Feed(RunLog& log, const std::string& from, const nlohmann::json& ev) {
  auto typed = events::FromJson(ev);
  ASSERT_TRUE(typed.has_value()) << ev.dump();
  log.OnEvent(from, *typed);
}

TEST(RunLog, TheSummaryHoldsWhatTheEventsSaid) {
  RunOptions o;
  o.json = true;
  const spec::AdamJob job = Job();
  RunLog log(job, o);
  log.TrainingStarted();
  Feed(log, "trainer-0",
       {{"event", "epoch"},
        {"trainer", 0},
        {"epoch", 1},
        {"loss", 0.5},
        {"test_accuracy", 0.75},
        {"images_total", 100}});
  Feed(log, "trainer-1", {{"event", "progress"}, {"trainer", 1}, {"images_total", 60}});
  Feed(log, "controller-1", {{"event", "controller_leader"}, {"term", 4}});
  Feed(log, "controller-1",
       {{"event", "failover"}, {"dead", {2}}, {"shards", 3}, {"map_version", 9}});
  Feed(log, "trainer-0", {{"event", "diverged"}, {"message", "loss is NaN"}});
  EXPECT_EQ(log.controller_leader(), "controller-1");
  EXPECT_EQ(log.diverged(), "trainer-0: loss is NaN");
  log.TrainingEnded();
  ::testing::internal::CaptureStdout();
  log.PrintSummary();
  const nlohmann::json summary = nlohmann::json::parse(::testing::internal::GetCapturedStdout());
  EXPECT_EQ(summary.value("test_accuracy", 0.0), 0.75);
  EXPECT_EQ(summary.value("epochs", 0), 1);
  EXPECT_EQ(summary.value("images", 0), 160);
  EXPECT_EQ(summary.value("failovers", 0), 1);
  EXPECT_EQ(summary.value("controller", nlohmann::json()).value("term", 0), 4);
  // Trainer 0 finished: no evaluator is needed.
  Feed(log, "trainer-0", {{"event", "done"}, {"trainer", 0}, {"epochs", 1}});
  EXPECT_FALSE(log.NeedsFinalEvaluation());
}

// Trainer 0's last evaluation per class (its "done" event) is in both summaries, by name; a
// later trainer's "done" does not replace it, an evaluator's "evaluated" does.
TEST(RunLog, TheSummariesNameTheClasses) {
  const spec::AdamJob job = Job();
  const nlohmann::json classes = {{{"name", "circle"}, {"images", 40}, {"correct", 39}},
                                  {{"name", "square"}, {"images", 20}, {"correct", 15}},
                                  "not an object"};
  for (bool json : {true, false}) {
    RunOptions o;
    o.json = json;
    RunLog log(job, o);
    Feed(log, "trainer-0", {{"event", "done"}, {"trainer", 0}, {"classes", classes}});
    Feed(log, "trainer-1",
         {{"event", "done"}, {"trainer", 1}, {"classes", nlohmann::json::array()}});
    ::testing::internal::CaptureStdout();
    log.PrintSummary();
    const std::string out = ::testing::internal::GetCapturedStdout();
    if (json) {
      const auto j = nlohmann::json::parse(out)["classes"];
      ASSERT_EQ(j.size(), 2u) << out;
      EXPECT_EQ(j[0]["name"], "circle");
      EXPECT_EQ(j[1]["accuracy"].get<double>(), 0.75);
    } else {
      EXPECT_NE(out.find("per class of the test set:\n  class    images accuracy\n"
                         "  circle       40   97.50%\n  square       20   75.00%\n"),
                std::string::npos)
          << out;
    }
  }
  RunOptions o;
  o.json = true;
  RunLog log(job, o);
  Feed(log, "trainer-0", {{"event", "done"}, {"trainer", 0}, {"classes", classes}});
  Feed(log, "evaluator",
       {{"event", "evaluated"},
        {"test_accuracy", 0.5},
        {"classes", {{{"name", "circle"}, {"images", 2}, {"correct", 1}}}}});
  ::testing::internal::CaptureStdout();
  log.PrintSummary();
  const auto j = nlohmann::json::parse(::testing::internal::GetCapturedStdout());
  ASSERT_EQ(j["classes"].size(), 1u);
  EXPECT_EQ(j["classes"][0]["images"], 2);
}

TEST(RunLog, WithoutTrainer0TheEvaluatorsAccuracyIsTheJobs) {
  RunOptions o;
  const spec::AdamJob job = Job();
  RunLog log(job, o);
  Feed(log, "trainer-1", {{"event", "done"}, {"trainer", 1}, {"epochs", 3}});
  EXPECT_TRUE(log.NeedsFinalEvaluation());
  EXPECT_FALSE(log.TakeFinalEvaluation());  // no evaluation yet
  Feed(log, "evaluator", {{"event", "evaluated"}, {"test_accuracy", 0.8}});
  EXPECT_TRUE(log.TakeFinalEvaluation());
}

// The JSON summary of a run that ends now.
nlohmann::json JsonSummary(RunLog& log) {
  log.TrainingEnded();
  ::testing::internal::CaptureStdout();
  log.PrintSummary();
  return nlohmann::json::parse(::testing::internal::GetCapturedStdout());
}

// Pulls that read a shard below a version read before: the summary counts them, names the
// largest fall and the updates one trainer found missing (both trainers miss the same ones); a
// run without any says nothing of them.
TEST(RunLog, PullsThatFellBackAreCountedOncePerTrainer) {
  RunOptions o;
  o.json = true;
  const spec::AdamJob job = Job();
  RunLog quiet(job, o);
  EXPECT_FALSE(JsonSummary(quiet).contains("pulls_fell_back"));

  RunLog log(job, o);
  auto fell = [&](const std::string& from, int shard, int64_t updates) {
    Feed(log, from,
         {{"event", "shard_fell_back"},
          {"trainer", from == "trainer-0" ? 0 : 1},
          {"shard", shard},
          {"server", 2},
          {"version", 100},
          {"before", 100 + updates},
          {"updates", updates}});
  };
  ::testing::internal::CaptureStderr();
  fell("trainer-0", 3, 2);
  fell("trainer-1", 3, 1);
  fell("trainer-0", 4, 5);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, ::testing::HasSubstr(
                       "trainer-0 read shard 3 from ps-2 at version 100, 2 updates under"));
  EXPECT_EQ(err.find("adam run: "), err.rfind("adam run: "));  // the first one only
  const nlohmann::json fallen = JsonSummary(log).value("pulls_fell_back", nlohmann::json());
  EXPECT_EQ(fallen.value("count", 0), 3);
  EXPECT_EQ(fallen.value("largest", 0), 5);
  EXPECT_EQ(fallen.value("updates", 0), 7);
}

// Trainer 0's start in a resumed run may be read after another trainer ended this run's first
// epoch (a busy machine delays trainer 0): it still names the epochs the checkpoints held; so does
// another trainer's start read first. A trainer 0 restarted later starts where the job is, which
// is no resume of the run.
TEST(RunLog, AResumeReadAfterAnotherTrainersFirstEpochIsTheRunsResume) {
  RunOptions o;
  o.json = true;
  const spec::AdamJob job = Job();
  RunLog resumed(job, o);
  resumed.TrainingStarted();
  Feed(resumed, "trainer-1", {{"event", "epoch"}, {"trainer", 1}, {"epoch", 21}, {"loss", 1}});
  Feed(resumed, "trainer-0", {{"event", "resumed"}, {"trainer", 0}, {"epochs", 20}});
  EXPECT_EQ(JsonSummary(resumed).value("resumed_after_epoch", -1), 20);

  // Trainer 0 started after trainer 1 ended epoch 21, so it goes on at epoch 22: the run is
  // still the resume trainer 1's start named.
  RunLog late(job, o);
  late.TrainingStarted();
  Feed(late, "trainer-1", {{"event", "resumed"}, {"trainer", 1}, {"epochs", 20}});
  Feed(late, "trainer-1", {{"event", "epoch"}, {"trainer", 1}, {"epoch", 21}, {"loss", 1}});
  Feed(late, "trainer-0", {{"event", "resumed"}, {"trainer", 0}, {"epochs", 21}});
  EXPECT_EQ(JsonSummary(late).value("resumed_after_epoch", -1), 20);

  RunLog restarted(job, o);
  restarted.TrainingStarted();
  Feed(restarted, "trainer-1", {{"event", "epoch"}, {"trainer", 1}, {"epoch", 1}, {"loss", 1}});
  Feed(restarted, "trainer-0", {{"event", "resumed"}, {"trainer", 0}, {"epochs", 1}});
  EXPECT_FALSE(JsonSummary(restarted).contains("resumed_after_epoch"));
}

}  // namespace
}  // namespace adam::launcher
