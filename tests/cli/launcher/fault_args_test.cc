// The fault-injection arguments of `adam run` (--kill, --chaos), parsed without starting a run:
// what each accepts, and the part of the argument each refusal names.
#include <gtest/gtest.h>

#include "launcher/launcher.h"

namespace adam::launcher {
namespace {

spec::AdamJob JobOfCopies(int copies) {
  spec::AdamJob job;
  job.name = "j";
  job.roles.parameter_server.replicas = 2;
  job.roles.parameter_server.copies = copies;
  job.roles.trainer.replicas = 2;
  return job;
}

TEST(ParseKill, AcceptsAnInstanceAtSecondsWithAnOptionalRestart) {
  auto k = ParseKill("ps-1@2.5", JobOfCopies(1));
  ASSERT_TRUE(k.ok()) << k.status().message();
  EXPECT_EQ(k->name, "ps-1");
  EXPECT_EQ(k->at_seconds, 2.5);
  EXPECT_EQ(k->restart_after, 0);
  k = ParseKill("trainer-0@0+1", JobOfCopies(1));
  ASSERT_TRUE(k.ok()) << k.status().message();
  EXPECT_EQ(k->name, "trainer-0");
  EXPECT_EQ(k->at_seconds, 0);
  EXPECT_EQ(k->restart_after, 1);
  // The leader of the moment, when there are controllers (copies > 1).
  EXPECT_TRUE(ParseKill("controller-leader@3", JobOfCopies(2)).ok());
  EXPECT_TRUE(ParseKill("controller-2@3", JobOfCopies(2)).ok());
}

TEST(ParseKill, RefusalsNameThePartAtFault) {
  const auto why = [](const std::string& text, int copies = 1) {
    auto k = ParseKill(text, JobOfCopies(copies));
    EXPECT_FALSE(k.ok()) << text;
    return k.ok() ? std::string() : k.status().message();
  };
  EXPECT_EQ(why("ps-1"), "--kill ps-1: expected NAME@SECONDS[+RESTART]");
  EXPECT_EQ(why("@3"), "--kill @3: expected NAME@SECONDS[+RESTART]");
  EXPECT_EQ(why("ps-0@soon"), "--kill ps-0@soon: 'soon' is not a number of seconds");
  EXPECT_EQ(why("ps-0@nan"), "--kill ps-0@nan: 'nan' is not a number of seconds");
  EXPECT_EQ(why("ps-0@-1"), "--kill ps-0@-1: '-1' is not a number of seconds");
  EXPECT_EQ(why("ps-0@"), "--kill ps-0@: '' is not a number of seconds");
  EXPECT_EQ(why("ps-0@1+0"), "--kill ps-0@1+0: restart '0' is not a positive number");
  EXPECT_EQ(why("ps-0@1+x"), "--kill ps-0@1+x: restart 'x' is not a positive number");
  EXPECT_EQ(why("ps-7@1"), "--kill ps-7@1: the job has no role instance 'ps-7' (see adam plan)");
  // No controllers without copies.
  EXPECT_EQ(why("controller-leader@1"),
            "--kill controller-leader@1: the job has no role instance 'controller-leader' (see "
            "adam plan)");
  EXPECT_EQ(why("controller-0@1"),
            "--kill controller-0@1: the job has no role instance 'controller-0' (see adam plan)");
}

TEST(ParseChaos, TakesSecondsAndASeed) {
  RunOptions o;
  const uint64_t default_seed = o.chaos_seed;
  ASSERT_TRUE(ParseChaos("15", JobOfCopies(3), &o).ok());
  EXPECT_EQ(o.chaos_seconds, 15);
  EXPECT_EQ(o.chaos_seed, default_seed);
  ASSERT_TRUE(ParseChaos("2.5:42", JobOfCopies(3), &o).ok());
  EXPECT_EQ(o.chaos_seconds, 2.5);
  EXPECT_EQ(o.chaos_seed, 42u);
}

TEST(ParseChaos, RefusalsNameThePartAtFaultAndLeaveTheOptions) {
  const auto why = [](const std::string& text, int copies = 3) {
    RunOptions o;
    o.chaos_seconds = 7;
    o.chaos_seed = 9;
    Status st = ParseChaos(text, JobOfCopies(copies), &o);
    EXPECT_FALSE(st.ok()) << text;
    EXPECT_EQ(o.chaos_seconds, 7);
    EXPECT_EQ(o.chaos_seed, 9u);
    return st.message();
  };
  EXPECT_EQ(why("0"), "--chaos 0: '0' is not a positive number of seconds");
  EXPECT_EQ(why("soon:1"), "--chaos soon:1: 'soon' is not a positive number of seconds");
  EXPECT_EQ(why("5:x"), "--chaos 5:x: seed 'x' is not a number");
  EXPECT_EQ(why("5:"), "--chaos 5:: seed '' is not a number");
  EXPECT_EQ(why("5:-1"), "--chaos 5:-1: seed '-1' is not a number");
  EXPECT_EQ(why("5", 1), "--chaos 5: needs spec.roles.parameterServer.copies > 1");
}

}  // namespace
}  // namespace adam::launcher
