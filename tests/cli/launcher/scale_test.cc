// `adam scale`: the manifest a running job follows, rewritten with a new server count, and what
// it refuses (no copies, a count the job cannot have, no run using the directory).
#include <gtest/gtest.h>
#include <sys/file.h>

#include <fstream>

#include "core/file.h"
#include "launcher/launcher.h"
#include "spec/adamjob.h"
#include "testing/manifest.h"
#include "testing/tmp_dir.h"

namespace adam::launcher {
namespace {

TEST(ScaleManifest, SetsTheServerCountAndKeepsTheRest) {
  testing::TmpDir dir;
  const std::string path = testing::Manifest(
      dir, "epochs: 3", "controller: {replicas: 3}, parameterServer: {replicas: 3, copies: 3}");
  const std::string text = ReadWholeFile(path).value_or("");
  auto scaled = ScaleManifest(text, 5);
  ASSERT_TRUE(scaled.ok()) << scaled.status().message();
  auto job = spec::ParseAdamJob(*scaled);
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->roles.parameter_server.replicas, 5);
  EXPECT_EQ(job->roles.parameter_server.copies, 3);
  EXPECT_EQ(job->training.epochs, 3);
  EXPECT_EQ(job->model.layers.size(), 4u);
}

TEST(ScaleManifest, RefusesAJobWithoutCopiesAndACountBelowTheCopies) {
  testing::TmpDir dir;
  const std::string plain =
      ReadWholeFile(testing::Manifest(dir, "epochs: 1", "parameterServer: {replicas: 2}"))
          .value_or("");
  auto s = ScaleManifest(plain, 3);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("copies is 1"), std::string::npos) << s.status().message();
  const std::string ha = ReadWholeFile(testing::Manifest(dir, "epochs: 1",
                                                         "controller: {replicas: 3}, "
                                                         "parameterServer: {replicas: 3, copies: "
                                                         "3}"))
                             .value_or("");
  s = ScaleManifest(ha, 2);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("spec.roles.parameterServer.copies"), std::string::npos)
      << s.status().message();
  EXPECT_FALSE(ScaleManifest(ha, 0).ok());
}

TEST(Scale, RewritesOnlyTheManifestOfARunningJob) {
  testing::TmpDir dir;
  const std::string state = dir.File("state");
  std::filesystem::create_directories(state);
  const std::string job = testing::Manifest(
      dir, "epochs: 1", "controller: {replicas: 3}, parameterServer: {replicas: 3, copies: 3}");
  ASSERT_TRUE(WriteManifest(RunManifestPath(state), ReadWholeFile(job).value_or("")).ok());
  EXPECT_EQ(Scale(state, 4), 2);  // no run holds the directory's lock
  const int fd = ::open((state + "/.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);  // as `adam run --state-dir` holds it
  EXPECT_EQ(Scale(state, 4), 0);
  auto scaled = spec::ParseAdamJob(ReadWholeFile(RunManifestPath(state)).value_or(""));
  ASSERT_TRUE(scaled.ok());
  EXPECT_EQ(scaled->roles.parameter_server.replicas, 4);
  EXPECT_EQ(Scale(state, 2), 2);  // fewer servers than copies: refused, the file unchanged
  EXPECT_EQ(spec::ParseAdamJob(ReadWholeFile(RunManifestPath(state)).value_or(""))
                ->roles.parameter_server.replicas,
            4);
  ::close(fd);
}

}  // namespace
}  // namespace adam::launcher
