// Three `adam controller` processes on loopback: `kill -9` of the leader, a new leader commits
// within a second, the killed member rejoins from its state dir and catches up; a member whose
// Raft log is corrupt refuses to start, naming the file and byte; a member id that is not one of
// the members is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "adam/v1/controller.grpc.pb.h"
#include "core/ports.h"
#include "net/grpc.h"
#include "testing/child.h"
#include "testing/tmp_dir.h"
#include "testing/wait.h"

namespace adam {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using testing::Child;

class ControllerProcesses : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 3; ++i) {
      addresses_.push_back("127.0.0.1:" + std::to_string(adam::FreePort()));
      if (i > 0) members_ += ',';
      members_ += std::to_string(i + 1) + "=" + addresses_.back();
      stubs_.push_back(v1::Controller::NewStub(
          net::MakeChannel(*net::Transport::Plaintext(), addresses_.back())));
    }
    children_.resize(3);
    for (int i = 0; i < 3; ++i) Start(i);
  }

  void Start(int i) {
    children_[size_t(i)] = std::make_unique<Child>(
        std::vector<std::string>{
            "controller", "--plaintext", "--job", ADAM_SOURCE_DIR "/examples/fashion-mnist.yaml",
            "--id", std::to_string(i + 1), "--members", members_, "--state-dir",
            dir_.File("m" + std::to_string(i)), "--name", "controller-" + std::to_string(i + 1)},
        dir_.File("m" + std::to_string(i) + ".log"));
  }

  std::optional<v1::ControllerStatus> Status(int i) {
    v1::ControllerStatus s;
    grpc::ClientContext ctx;
    net::SetDeadline(&ctx, 200ms);
    if (!stubs_[size_t(i)]->GetStatus(&ctx, {}, &s).ok()) return std::nullopt;
    return s;
  }

  bool Put(int i, const std::string& key, std::chrono::milliseconds deadline = 1000ms) {
    v1::KeyValue kv;
    kv.set_key(key);
    kv.set_value("v");
    v1::PutResponse r;
    grpc::ClientContext ctx;
    net::SetDeadline(&ctx, deadline);
    return stubs_[size_t(i)]->Put(&ctx, kv, &r).ok();
  }

  int WaitLeader(int not_this = -1) {
    const auto deadline = Clock::now() + 15s;
    while (Clock::now() < deadline) {
      for (int i = 0; i < 3; ++i)
        if (i != not_this)
          if (auto s = Status(i); s && s->role() == "leader" && s->map_version() > 0) return i;
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }

  testing::TmpDir dir_;
  std::vector<std::string> addresses_;
  std::string members_;
  std::vector<std::unique_ptr<v1::Controller::Stub>> stubs_;
  std::vector<std::unique_ptr<Child>> children_;
};

TEST_F(ControllerProcesses, KillNineOfTheLeaderANewOneCommitsWithinASecond) {
  const int leader = WaitLeader();
  ASSERT_GE(leader, 0);
  ASSERT_TRUE(Put(leader, "before"));
  // Both followers have applied it: the kill finds the group settled, not mid-replication.
  const auto leader_status = Status(leader);
  ASSERT_TRUE(leader_status);
  const uint64_t before = leader_status->commit();
  ASSERT_TRUE(testing::Eventually([&] {
    for (int i = 0; i < 3; ++i)
      if (auto s = Status(i); i != leader && (!s || s->applied() < before)) return false;
    return true;
  }));
  const auto t0 = Clock::now();
  children_[size_t(leader)]->Signal(SIGKILL);
  children_[size_t(leader)]->Wait();
  bool committed = false;
  while (!committed && Clock::now() - t0 < 5s)
    for (int i = 0; i < 3 && !committed; ++i)
      if (i != leader) committed = Put(i, "after", 100ms);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  ASSERT_TRUE(committed);
  std::printf("kill -9 of the controller leader: a new leader committed after %lld ms\n",
              static_cast<long long>(ms));
  EXPECT_LT(ms, 1000);
  // The killed member restarts from its state dir and catches up.
  Start(leader);
  const int now_leader = WaitLeader();
  ASSERT_GE(now_leader, 0);
  const uint64_t commit = Status(now_leader)->commit();
  const bool caught_up = testing::Eventually(
      [&] {
        auto s = Status(leader);
        return s && s->applied() >= commit;
      },
      5000ms);
  auto s = Status(leader);
  EXPECT_TRUE(caught_up) << "restarted member: " << (s ? s->ShortDebugString() : "no answer")
                         << "; leader commit " << commit << "\n"
                         << testing::ReadText(dir_.File("m" + std::to_string(leader) + ".log"));
}

TEST_F(ControllerProcesses, AMemberWithACorruptLogRefusesToStartNamingTheByte) {
  const int leader = WaitLeader();
  ASSERT_GE(leader, 0);
  for (const char* key : {"k0", "k1", "k2", "k3", "k4"}) ASSERT_TRUE(Put(leader, key));
  const int victim = (leader + 1) % 3;
  const std::string log = dir_.File("m" + std::to_string(victim)) + "/raft.log";
  // A commit needs only the leader and one follower: wait until the victim has the entries too.
  ASSERT_TRUE(testing::Eventually([&] {
    std::error_code ec;
    return std::filesystem::file_size(log, ec) > 40 && !ec;
  }));
  children_[size_t(victim)]->Signal(SIGKILL);
  children_[size_t(victim)]->Wait();
  std::string bytes = testing::ReadText(log);
  ASSERT_GT(bytes.size(), 40u);
  bytes[12] ^= 0x55;  // inside the first record, which is followed by others
  testing::WriteText(log, bytes);
  Start(victim);
  const int status = children_[size_t(victim)]->Wait();
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string text = testing::ReadText(dir_.File("m" + std::to_string(victim) + ".log"));
  EXPECT_NE(text.find("raft.log: record at byte 0: crc mismatch"), std::string::npos) << text;
}

// The member's id, resolved by the controller itself (--id N, or "hostname": the ordinal a
// StatefulSet pod's name ends in, plus one), must be one of --members: otherwise exit 2 naming it.
TEST(ControllerId, AnIdThatIsNotAMemberIsRefusedNamingIt) {
  testing::TmpDir dir;
  const std::string members = "1=127.0.0.1:" + std::to_string(adam::FreePort()) +
                              ",2=127.0.0.1:" + std::to_string(adam::FreePort());
  auto start = [&](const std::string& id, const std::string& log) {
    Child c({"controller", "--plaintext", "--job", ADAM_SOURCE_DIR "/examples/fashion-mnist.yaml",
             "--id", id, "--members", members, "--state-dir", dir.File("state-" + log)},
            dir.File(log));
    return c.Wait();
  };
  int status = start("3", "three.log");
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  std::string text = testing::ReadText(dir.File("three.log"));
  EXPECT_NE(text.find("--id 3 is not one of --members"), std::string::npos) << text;

  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  const std::string name = host;
  const size_t dash = name.rfind('-');
  if (dash != std::string::npos && dash + 1 < name.size() &&
      name.find_first_not_of("0123456789", dash + 1) == std::string::npos)
    GTEST_SKIP() << "this host's name (" << name << ") ends in -N";
  status = start("hostname", "hostname.log");
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  text = testing::ReadText(dir.File("hostname.log"));
  EXPECT_NE(text.find("--id hostname: this host's name (" + name + ") does not end in -N"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace adam
