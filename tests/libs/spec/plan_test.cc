// The plan a job makes (adamjob_testing.h): its roles in order, their instances, endpoints and
// arguments, split replicas and controller identities.
#include "libs/spec/adamjob_testing.h"

namespace adam::spec {
namespace {

TEST(Plan, OrdersServersBeforeTrainersAndNamesInstances) {
  auto job = ParseAdamJob(With(
      "spec:\n",
      "spec:\n  roles: {parameterServer: {replicas: 3}, trainer: {replicas: 2, threads: 4}}\n"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  Plan plan = MakePlan(*job);
  ASSERT_EQ(plan.instances.size(), 6u);
  int trainers = 0;
  for (const auto& in : plan.instances) {
    if (in.role == Role::kTrainer) {
      ++trainers;
      EXPECT_EQ(in.stage, 1);
      EXPECT_EQ(in.threads, 4);
    } else {
      EXPECT_EQ(in.stage, 0);
      EXPECT_EQ(in.host, "127.0.0.1");
      EXPECT_EQ(in.port, 0);
    }
  }
  EXPECT_EQ(trainers, 2);
  EXPECT_EQ(plan.instances[0].name, "ps-0");
  EXPECT_EQ(plan.instances[2].name, "ps-2");
  EXPECT_EQ(plan.instances[2].replication_host, "127.0.0.2");
  EXPECT_EQ(plan.instances[3].name, "data-server-0");
  EXPECT_EQ(plan.instances[5].name, "trainer-1");
}

TEST(Plan, ClusterModeUsesServiceNamesAndFixedPorts) {
  auto job = ParseAdamJob(kValid);
  ASSERT_TRUE(job.ok());
  PlanOptions o;
  o.local = false;
  Plan plan = MakePlan(*job, o);
  EXPECT_EQ(plan.instances[0].host, "tiny-ps-0.tiny");
  EXPECT_EQ(plan.instances[0].replication_host, "tiny-ps-0.tiny");
  EXPECT_EQ(plan.instances[0].port, o.grpc_port);
  EXPECT_EQ(plan.instances[0].metrics_port, o.metrics_port);
}

TEST(Plan, TrainerArgsCarryEndpoints) {
  auto job = ParseAdamJob(kValid);
  ASSERT_TRUE(job.ok());
  Plan plan = MakePlan(*job);
  const RoleInstance& trainer = plan.instances.back();
  auto args = ToArgs(
      OptionsFor(trainer, "job.yaml", {{"127.0.0.1:5"}, {"127.0.0.1:6", "127.0.0.1:7"}, {}, {}}));
  const std::vector<std::string> want = {"trainer",
                                         "--job",
                                         "job.yaml",
                                         "--name",
                                         "trainer-0",
                                         "--index",
                                         "0",
                                         "--threads",
                                         "1",
                                         "--data-server",
                                         "127.0.0.1:5",
                                         "--ps",
                                         "127.0.0.1:6,127.0.0.1:7"};
  EXPECT_EQ(args, want);
}

// A split replica's workers are instances of their own, each listening for the exchange, and
// each worker is told every address of its replica, the trainer's first.
TEST(Plan, SplitReplicasListEveryModelWorker) {
  auto job =
      ParseAdamJob(With("spec:\n", "spec:\n  roles: {trainer: {replicas: 2, modelWorkers: 3}}\n"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  Plan plan = MakePlan(*job);
  std::vector<std::string> names;
  for (auto& in : plan.instances)
    if (in.role == Role::kTrainer) {
      names.push_back(in.name);
      EXPECT_EQ(in.host, "127.0.0.1") << in.name;
      in.port = 100 * (in.index + 1) + in.model_worker;
    }
  EXPECT_EQ(names, (std::vector<std::string>{"trainer-0", "trainer-0-w1", "trainer-0-w2",
                                             "trainer-1", "trainer-1-w1", "trainer-1-w2"}));
  const auto addrs = ModelWorkerAddresses(plan);
  ASSERT_EQ(addrs.size(), 2u);
  EXPECT_EQ(addrs[1],
            (std::vector<std::string>{"127.0.0.1:200", "127.0.0.1:201", "127.0.0.1:202"}));
  Endpoints e{{"127.0.0.1:5"}, {"127.0.0.1:6"}, {}, addrs};
  const RoleInstance& w = plan.instances.back();
  RoleOptions options = OptionsFor(w, "job.yaml", e);
  Common(options).plaintext = true;
  auto parsed = ParseArgs(ToArgs(options));
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  const auto& t = std::get<TrainerOptions>(*parsed);
  EXPECT_EQ(t.index, 1);
  EXPECT_EQ(t.model_worker, 2);
  EXPECT_EQ(t.model_workers, addrs[1]);
  PlanOptions o;
  o.local = false;
  EXPECT_EQ(MakePlan(*job, o).instances.back().host, "tiny-trainer-1-w2.tiny");
  EXPECT_EQ(ModelWorkerAddresses(MakePlan(*ParseAdamJob(kValid))).size(), 0u);
}

// A controller's id and name come from its instance, or as the pod template gives them.
TEST(Plan, ControllerArgsTakeTheTemplatesIdentity) {
  auto job = ParseAdamJob(With("spec:\n",
                               "spec:\n  roles: {controller: {replicas: 3}, "
                               "parameterServer: {replicas: 3, copies: 3}}\n"));
  ASSERT_TRUE(job.ok()) << job.status().message();
  Plan plan = MakePlan(*job);
  const RoleInstance* second = nullptr;
  for (const auto& in : plan.instances)
    if (in.role == Role::kController && in.index == 1) second = &in;
  ASSERT_NE(second, nullptr);
  const Endpoints endpoints{{}, {}, ControllerMembersOf(plan), {}};
  const auto value = [](const std::vector<std::string>& args, const std::string& flag) {
    auto it = std::find(args.begin(), args.end(), flag);
    return it == args.end() || it + 1 == args.end() ? std::string() : *(it + 1);
  };
  auto own = ToArgs(OptionsFor(*second, "job.yaml", endpoints));
  EXPECT_EQ(value(own, "--id"), "2");
  EXPECT_EQ(value(own, "--name"), second->name);
  auto templated =
      ToArgs(OptionsFor(*second, "job.yaml", endpoints, {"hostname", "$(ADAM_POD_NAME)"}));
  EXPECT_EQ(value(templated, "--id"), "hostname");
  EXPECT_EQ(value(templated, "--name"), "$(ADAM_POD_NAME)");
  ASSERT_EQ(endpoints.controller_members.size(), 3u);
  EXPECT_EQ(endpoints.controller_members[1].id, 2u);
  auto members = ParseMembers(value(templated, "--members"));
  ASSERT_TRUE(members.ok()) << members.status().message();
  EXPECT_EQ(*members, endpoints.controller_members);
}

}  // namespace
}  // namespace adam::spec
