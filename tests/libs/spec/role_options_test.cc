// Role options: ToArgs and ParseArgs are inverses, every plan's instances parse back, and the
// rules between flags are refused by name.
#include "spec/role_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "spec/adamjob.h"
#include "spec/plan.h"

namespace adam::spec {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Text a flag's value may hold: letters, digits, separators, spaces, and sometimes nothing.
std::string RandomText(std::mt19937& rng, bool may_be_empty = true) {
  static const char kChars[] = "abcXYZ019=,:./_ $()";
  std::uniform_int_distribution<int> len(may_be_empty ? 0 : 1, 12);
  std::string s;
  for (int n = len(rng); n > 0; --n) s += kChars[rng() % (sizeof kChars - 1)];
  if (!s.empty() && s[0] == '-') s[0] = 'a';
  return s;
}

int RandomInt(std::mt19937& rng) { return std::uniform_int_distribution<int>(-5, 100000)(rng); }

// A list flag's items: none of them empty or holding the comma that separates them.
std::vector<std::string> RandomList(std::mt19937& rng, bool may_be_empty = true) {
  std::vector<std::string> out(std::uniform_int_distribution<size_t>(may_be_empty ? 0 : 1, 4)(rng));
  for (std::string& item : out) {
    item = RandomText(rng, /*may_be_empty=*/false);
    std::replace(item.begin(), item.end(), ',', ';');
  }
  return out;
}

// Members with distinct ids >= 1, in any order.
ControllerMembers RandomMembers(std::mt19937& rng, bool may_be_empty = true) {
  ControllerMembers out;
  uint64_t id = 0;
  for (const std::string& address : RandomList(rng, may_be_empty))
    out.push_back({id += 1 + rng() % 3, address});
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

CommonRoleOptions RandomCommon(std::mt19937& rng) {
  CommonRoleOptions c;
  c.job = RandomText(rng);
  c.name = RandomText(rng);
  c.metrics_port = RandomInt(rng);
  c.plaintext = rng() % 2;
  if (!c.plaintext) c.tls_dir = RandomText(rng, /*may_be_empty=*/false);
  return c;
}

RoleOptions RandomOptions(std::mt19937& rng) {
  switch (rng() % 4) {
    case 0: {
      DataServerOptions o;
      o.common = RandomCommon(rng);
      o.listen = RandomText(rng);
      return o;
    }
    case 1: {
      ParamServerOptions o;
      o.common = RandomCommon(rng);
      o.index = RandomInt(rng);
      o.listen = RandomText(rng);
      o.state_dir = RandomText(rng);
      o.replication_listen = RandomText(rng);
      o.replication_network = RandomText(rng);
      o.pod_annotations = RandomText(rng);
      o.network_wait_ms = RandomInt(rng);
      o.restore_from = RandomText(rng);
      o.checkpoint_peer = RandomText(rng);
      o.controller = RandomMembers(rng);
      o.forward_interval_ms = RandomInt(rng);
      o.threads = RandomInt(rng);
      o.no_bind = rng() % 2;
      o.debug_flush_pause_ms = RandomInt(rng);
      return o;
    }
    case 2: {
      ControllerOptions o;
      o.common = RandomCommon(rng);
      o.id = rng() % 3 ? std::to_string(1 + rng() % 9) : "hostname";
      o.members = RandomMembers(rng, /*may_be_empty=*/false);
      o.state_dir = RandomText(rng);
      o.cluster_id = RandomText(rng);
      o.server_timeout_ms = 400 + rng() % 5000;
      o.tick_ms = RandomInt(rng);
      o.election_ticks = RandomInt(rng);
      return o;
    }
    default: {
      TrainerOptions o;
      o.common = RandomCommon(rng);
      o.index = RandomInt(rng);
      o.threads = RandomInt(rng);
      o.data_server = RandomList(rng, /*may_be_empty=*/false);
      if (rng() % 2)
        o.ps = RandomList(rng, /*may_be_empty=*/false);
      else
        o.controller = RandomMembers(rng, /*may_be_empty=*/false);
      o.no_bind = rng() % 2;
      o.evaluate_only = rng() % 2;
      o.model_out = RandomText(rng);
      o.check_pushes = RandomInt(rng);
      o.check_round = RandomInt(rng);
      o.check_every_ms = RandomInt(rng);
      o.metrics_host = RandomText(rng);
      if (rng() % 2) {
        o.model_workers = {"a:1", "b:2", "c:3"};
        o.model_worker = int(rng() % 3);
      }
      return o;
    }
  }
}

TEST(RoleOptions, ParseArgsReadsBackWhatToArgsWrites) {
  std::mt19937 rng(7);
  int roles[4] = {};
  for (int i = 0; i < 2000; ++i) {
    const RoleOptions options = RandomOptions(rng);
    ++roles[static_cast<int>(RoleOf(options))];
    const std::vector<std::string> args = ToArgs(options);
    ASSERT_EQ(args[0], RoleSubcommand(RoleOf(options)));
    auto back = ParseArgs(args);
    ASSERT_TRUE(back.ok()) << "case " << i << ": " << back.status().message();
    ASSERT_TRUE(*back == options) << "case " << i;
  }
  for (int n : roles) EXPECT_GT(n, 400);
}

TEST(RoleOptions, OnlyRequiredFlagsAndChangedOnesAreWritten) {
  TrainerOptions t;
  t.common.job = "job.yaml";
  t.common.plaintext = true;
  t.data_server = {"ds:1"};
  t.ps = {"ps:2"};
  const std::vector<std::string> want = {"trainer", "--job", "job.yaml",      "--plaintext",
                                         "--index", "0",     "--data-server", "ds:1",
                                         "--ps",    "ps:2"};
  EXPECT_EQ(ToArgs(t), want);
}

TEST(RoleOptions, UnknownAndMissingFlagsAreRefusedByName) {
  auto unknown = ParseArgs({"ps", "--job", "j", "--index", "0", "--plaintext", "--bogus", "1"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("--bogus"));
  auto missing = ParseArgs({"trainer", "--job", "j", "--plaintext", "--ps", "a:1", "--index", "0"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("--data-server"));
  auto not_a_number = ParseArgs({"ps", "--job", "j", "--plaintext", "--index", "two"});
  ASSERT_FALSE(not_a_number.ok());
  EXPECT_THAT(not_a_number.status().message(), HasSubstr("--index"));
  EXPECT_FALSE(ParseArgs({"operator"}).ok());
  // A member list is ID=HOST:PORT,... with distinct ids >= 1; the error names the flag and entry.
  for (const auto& [members, why] : std::vector<std::pair<std::string, std::string>>{
           {"a:1", "'a:1' is not ID=HOST:PORT"},
           {"0=a:1", "'0=a:1' is not ID=HOST:PORT"},
           {"1=a:1,,2=b:2", "'' is not ID=HOST:PORT"},
           {"1=", "'1=' is not ID=HOST:PORT"},
           {"1=a:1,1=b:2", "id 1 appears twice"},
           {"-1=a:1", "'-1=a:1' is not ID=HOST:PORT"},
           {" 1=a:1", "' 1=a:1' is not ID=HOST:PORT"},
           {"+1=a:1", "'+1=a:1' is not ID=HOST:PORT"},
           {"18446744073709551616=a:1", "is not ID=HOST:PORT"}}) {
    auto bad = ParseArgs({"controller", "--job", "j", "--plaintext", "--id", "1", "--members",
                          members, "--state-dir", "/s"});
    ASSERT_FALSE(bad.ok()) << members;
    EXPECT_THAT(bad.status().message(), AllOf(HasSubstr("--members"), HasSubstr(why))) << members;
  }
  auto members = ParseArgs({"controller", "--job", "j", "--plaintext", "--id", "2", "--members",
                            "2=b:2,1=a:1,3=c=3:3", "--state-dir", "/s"});
  ASSERT_TRUE(members.ok()) << members.status().message();
  EXPECT_EQ(std::get<ControllerOptions>(*members).members,
            (ControllerMembers{{2, "b:2"}, {1, "a:1"}, {3, "c=3:3"}}));
  auto lists = ParseArgs({"trainer", "--job", "j", "--plaintext", "--index", "0", "--data-server",
                          "d:1,,e:2", "--ps", "a:1"});
  ASSERT_TRUE(lists.ok()) << lists.status().message();
  EXPECT_EQ(std::get<TrainerOptions>(*lists).data_server, (std::vector<std::string>{"d:1", "e:2"}));
}

TEST(RoleOptions, CheckRefusesFlagsThatContradictEachOther) {
  DataServerOptions d;
  d.common.job = "j";
  EXPECT_THAT(Check(d).message(), HasSubstr("exactly one of --tls-dir DIR"));
  d.common.tls_dir = "/tls";
  d.common.plaintext = true;
  EXPECT_THAT(Check(d).message(), HasSubstr("exactly one of --tls-dir DIR"));
  d.common.plaintext = false;
  EXPECT_TRUE(Check(d).ok());

  TrainerOptions t;
  t.common.plaintext = true;
  EXPECT_THAT(Check(t).message(), HasSubstr("exactly one of --ps and --controller"));
  t.ps = {"a:1"};
  t.controller = {{1, "b:2"}};
  EXPECT_THAT(Check(t).message(), HasSubstr("exactly one of --ps and --controller"));
  t.ps.clear();
  EXPECT_TRUE(Check(t).ok());
  t.model_worker = 1;
  EXPECT_THAT(Check(t).message(),
              HasSubstr("--model-worker 1: --model-workers lists 0 workers (the trainer is 0)"));
  t.model_workers = {"a:1"};
  EXPECT_THAT(Check(t).message(), HasSubstr("--model-worker 1: --model-workers lists 1 workers"));
  t.model_worker = 0;
  EXPECT_THAT(Check(t).message(), HasSubstr("--model-workers: a split replica has at least 2"));
  t.model_workers = {"a:1", "b:2"};
  t.model_worker = 1;
  EXPECT_TRUE(Check(t).ok());

  ControllerOptions c;
  c.common.plaintext = true;
  for (const char* bad : {"0", "x", "", "-1", "1234567890"}) {
    c.id = bad;
    EXPECT_THAT(Check(c).message(), HasSubstr("--id " + std::string(bad) + ": expected"));
  }
  c.id = "hostname";
  EXPECT_TRUE(Check(c).ok());
}

// The safety rule between two processes' defaults, held in one place: the controller must not
// fail a server over while that server's primary lease may still be running.
TEST(RoleOptions, AControllerTimeoutWithinThePrimaryLeaseIsRefused) {
  ControllerOptions c;
  c.common.plaintext = true;
  const int least = static_cast<int>((kPrimaryLease + kLeaseMargin).count());
  c.server_timeout_ms = least - 1;
  EXPECT_THAT(Check(c).message(),
              HasSubstr("--server-timeout-ms " + std::to_string(least - 1) + " would let"));
  c.server_timeout_ms = least;
  EXPECT_TRUE(Check(c).ok());
  EXPECT_GE(ControllerOptions{}.server_timeout_ms, least) << "the default must pass";
}

TEST(RoleOptions, MemberIdsComeFromTheTextOrTheHostName) {
  EXPECT_EQ(ResolveMemberId("3", "any"), 3u);
  EXPECT_EQ(ResolveMemberId("hostname", "job-controller-0"), 1u);
  EXPECT_EQ(ResolveMemberId("hostname", "job-controller-12"), 13u);
  EXPECT_EQ(ResolveMemberId("hostname", "laptop"), std::nullopt);
  EXPECT_EQ(ResolveMemberId("hostname", "job-controller-"), std::nullopt);
  EXPECT_EQ(ResolveMemberId("0", ""), std::nullopt);
  EXPECT_EQ(ResolveMemberId("3a", ""), std::nullopt);
}

const char kJob[] = R"(
apiVersion: adam.dev/v1alpha1
kind: AdamJob
metadata: {name: tiny}
spec:
  dataset:
    train: {images: a.idx, labels: b.idx}
    test: {images: c.idx, labels: d.idx}
  model:
    input: {channels: 1, height: 28, width: 28}
    layers:
      - {type: dense, units: 10}
      - {type: softmax, classes: 10}
  roles:
    controller: {replicas: 3}
    parameterServer: {replicas: 3, copies: 3}
    trainer: {replicas: 2, threads: 3}
)";

// Every instance of a plan, local or on a cluster, with or without a controller group, starts
// from arguments the CLI parses back to the same options.
TEST(RoleOptions, EveryPlannedInstanceParsesBack) {
  for (const bool copies : {false, true}) {
    std::string text = kJob;
    if (!copies) text.replace(text.find("copies: 3"), 9, "copies: 1");
    auto job = ParseAdamJob(text);
    ASSERT_TRUE(job.ok()) << job.status().message();
    for (const bool local : {true, false}) {
      PlanOptions po;
      po.local = local;
      const Plan plan = MakePlan(*job, po);
      Endpoints endpoints{{"ds:1"},
                          {"ps0:2", "ps1:2", "ps2:2"},
                          copies ? ControllerMembersOf(plan) : ControllerMembers{},
                          {}};
      int seen = 0;
      for (const RoleInstance& in : plan.instances) {
        SCOPED_TRACE(in.name);
        RoleOptions options = OptionsFor(in, "job.yaml", endpoints);
        Common(options).plaintext = true;
        if (auto* c = std::get_if<ControllerOptions>(&options)) c->state_dir = "/state";
        auto back = ParseArgs(ToArgs(options));
        ASSERT_TRUE(back.ok()) << back.status().message();
        EXPECT_TRUE(*back == options);
        EXPECT_EQ(RoleOf(*back), in.role);
        EXPECT_EQ(Common(*back).name, in.name);
        ++seen;
      }
      EXPECT_EQ(seen, copies ? 9 : 6);
    }
  }
}

}  // namespace
}  // namespace adam::spec
