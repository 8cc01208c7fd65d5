// Trainers scaled on a running job, with real processes: the data server and the parameter
// server follow the job's manifest file (on a cluster, the ConfigMap the operator rewrites when
// `kubectl scale` changes spec.roles.trainer.replicas), a trainer added joins where the job is,
// one removed leaves, and the job still finishes.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <future>
#include <regex>

#include "testing/child.h"
#include "testing/sanitizer.h"
#include "testing/synthetic.h"
#include "testing/tmp_dir.h"
#include "testing/wait.h"

namespace adam {
namespace {

using testing::Child;

// About 15 s of training with two trainers (a sanitizer build trains about four times slower):
// time for a scale up and down, each read by the servers within their 2 s poll.
constexpr int kEpochs = testing::kSanitizerBuild ? 500 : 2000;
constexpr std::chrono::seconds kNoted{10};
constexpr std::chrono::seconds kDone{300};

TEST(ScaledTrainers, AddedTrainersJoinWhereTheJobIsAndRemovedOnesLeave) {
  testing::TmpDir dir;
  testing::WriteSynthetic(dir.File("train"), 1200, 1);
  testing::WriteSynthetic(dir.File("test"), 300, 2);
  const std::string training =
      "epochs: " + std::to_string(kEpochs) + ", learningRate: 0.02, pushEvery: 50";
  const std::string job = testing::Manifest(dir, training, "trainer: {replicas: 2}");
  const std::vector<std::string> common = {"--job", job, "--plaintext"};
  auto args = [&](std::vector<std::string> a) {
    a.insert(a.begin() + 1, common.begin(), common.end());
    return a;
  };
  Child data(args({"data-server", "--listen", "127.0.0.1:0"}), dir.File("data.log"));
  auto data_ready = data.WaitFor<events::Ready>();
  ASSERT_TRUE(data_ready) << testing::ReadText(dir.File("data.log"));
  Child ps(args({"ps", "--index", "0", "--listen", "127.0.0.1:0", "--threads", "1", "--no-bind"}),
           dir.File("ps.log"));
  auto ps_ready = ps.WaitFor<events::Ready>();
  ASSERT_TRUE(ps_ready) << testing::ReadText(dir.File("ps.log"));
  const std::string data_addr = "127.0.0.1:" + std::to_string(data_ready->port);
  const std::string ps_addr = "127.0.0.1:" + std::to_string(ps_ready->port);
  auto trainer = [&](int i) {
    return std::make_unique<Child>(args({"trainer", "--index", std::to_string(i), "--data-server",
                                         data_addr, "--ps", ps_addr, "--no-bind"}),
                                   dir.File("trainer-" + std::to_string(i) + ".log"));
  };
  auto t0 = trainer(0);
  auto t1 = trainer(1);
  ASSERT_TRUE(t0->WaitFor<events::Epoch>(std::chrono::seconds(60)))
      << testing::ReadText(dir.File("trainer-0.log"));
  // Their events are read on (a trainer blocks on a full pipe) until each is done.
  auto done0 = std::async(std::launch::async, [&] { return t0->WaitFor<events::Done>(kDone); });
  auto done1 = std::async(std::launch::async, [&] { return t1->WaitFor<events::Done>(kDone); });

  // Scaled to 3: the manifest says so, trainer 2 starts; it waits until the data server has
  // read the new count, then trains from the job's epoch, not from epoch 0.
  testing::Manifest(dir, training, "trainer: {replicas: 3}");
  auto t2 = trainer(2);
  auto joined = t2->WaitFor<events::Epoch>(std::chrono::seconds(60));
  ASSERT_TRUE(joined) << testing::ReadText(dir.File("trainer-2.log"));
  EXPECT_GT(joined->epoch, 1) << events::ToJson(*joined).dump();
  // Epochs that started before it joined have no share for it; one that started after has.
  std::optional<events::Epoch> shared;
  while ((shared = t2->WaitFor<events::Epoch>(std::chrono::seconds(60))) && shared->images == 0) {
  }
  ASSERT_TRUE(shared) << "trainer 2 never had a share: "
                      << testing::ReadText(dir.File("trainer-2.log"));
  EXPECT_GT(shared->images, 300) << events::ToJson(*shared).dump();
  auto drain2 = std::async(std::launch::async, [&] { t2->Drain(kDone); });
  EXPECT_TRUE(
      testing::WaitForText(dir.File("data.log"), "the job now has 3 trainers (was 2)", kNoted));
  EXPECT_TRUE(
      testing::WaitForText(dir.File("ps.log"), "the job now has 3 trainers (was 2)", kNoted));

  // Scaled back to 2: trainer 2's pod is deleted (SIGTERM); the others finish the job.
  testing::Manifest(dir, training, "trainer: {replicas: 2}");
  EXPECT_TRUE(
      testing::WaitForText(dir.File("data.log"), "the job now has 2 trainers (was 3)", kNoted));
  t2->Signal(SIGTERM);
  drain2.wait();  // its pipe closed
  t2->Wait();
  auto done = done0.get();
  ASSERT_TRUE(done) << testing::ReadText(dir.File("trainer-0.log"));
  ASSERT_TRUE(done1.get()) << testing::ReadText(dir.File("trainer-1.log"));
  EXPECT_EQ(done->epochs, kEpochs);
  EXPECT_GT(done->test_accuracy, 0.5);
  const int status = t1->Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << testing::ReadText(dir.File("trainer-1.log"));
}

}  // namespace
}  // namespace adam
