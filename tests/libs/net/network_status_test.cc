// The downward-API annotations file and Multus's network-status: the second NIC's address.
#include "net/network_status.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>

#include "testing/tmp_dir.h"

namespace adam::net {
namespace {

// What the kubelet writes for a pod with a Multus attachment (values quoted as Go does).
const char* kFile =
    "k8s.v1.cni.cncf.io/network-status=\"[{\\n    \\\"name\\\": \\\"kindnet\\\",\\n    "
    "\\\"ips\\\": [\\\"10.244.1.5\\\"],\\n    \\\"default\\\": true\\n},{\\n    \\\"name\\\": "
    "\\\"ml/adam-replication\\\",\\n    \\\"interface\\\": \\\"net1\\\",\\n    \\\"ips\\\": "
    "[\\\"192.168.50.7\\\"]\\n}]\"\n"
    "k8s.v1.cni.cncf.io/networks=\"adam-replication\"\n"
    "note=\"caf\\u00e9 \\x41\\t\"\n";

TEST(NetworkStatus, FindsTheAttachmentsAddress) {
  auto a = ParseAnnotationsFile(kFile);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->at("k8s.v1.cni.cncf.io/networks"), "adam-replication");
  EXPECT_EQ(a->at("note"), "caf\xc3\xa9 A\t");
  auto ip = NetworkAddress(a->at(kNetworkStatusAnnotation), "adam-replication");
  ASSERT_TRUE(ip.ok()) << ip.status().message();
  EXPECT_EQ(*ip, "192.168.50.7");
  EXPECT_EQ(*NetworkAddress(a->at(kNetworkStatusAnnotation), "ml/adam-replication"),
            "192.168.50.7");
  auto missing = NetworkAddress(a->at(kNetworkStatusAnnotation), "storage");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("present: kindnet, ml/adam-replication"),
            std::string::npos);
  // "replication" must not match "adam-replication" by suffix.
  EXPECT_FALSE(NetworkAddress(a->at(kNetworkStatusAnnotation), "replication").ok());
}

TEST(NetworkStatus, BadFilesNameTheLineAndByte) {
  auto unquoted = ParseAnnotationsFile("a=\"ok\"\nb=plain\n");
  EXPECT_EQ(unquoted.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(unquoted.status().message().find("line 2, byte 9"), std::string::npos)
      << unquoted.status().message();
  EXPECT_FALSE(ParseAnnotationsFile("a=\"open\n").ok());
  EXPECT_FALSE(ParseAnnotationsFile("a=\"\\q\"\n").ok());
  EXPECT_FALSE(ParseAnnotationsFile("a=\"\\u12\"\n").ok());
  EXPECT_FALSE(ParseAnnotationsFile("a=\"x\" junk\n").ok());
  EXPECT_FALSE(NetworkAddress("{not json", "x").ok());
  // Found by fuzzing: a number too large for a double threw past the parse-error handler.
  EXPECT_EQ(NetworkAddress("[{\"name\": \"x\", \"ips\": 5e555555}]", "x").status().code(),
            StatusCode::kDataLoss);
  EXPECT_FALSE(NetworkAddress("[{\"name\": \"x\", \"ips\": []}]", "x").ok());
}

TEST(NetworkStatus, ReadsThePodsFile) {
  testing::TmpDir dir;
  const std::string path = dir.path() + "/annotations";
  std::ofstream(path) << kFile;
  auto ip = PodNetworkAddress(path, "adam-replication");
  ASSERT_TRUE(ip.ok()) << ip.status().message();
  EXPECT_EQ(*ip, "192.168.50.7");
  std::ofstream(path) << "k8s.v1.cni.cncf.io/networks=\"adam-replication\"\n";
  auto none = PodNetworkAddress(path, "adam-replication");
  EXPECT_NE(none.status().message().find("is Multus installed"), std::string::npos);
  EXPECT_EQ(PodNetworkAddress(dir.path() + "/nope", "x").status().code(), StatusCode::kNotFound);
}

// Multus writes the annotation after the pod starts: the server waits for it, bounded. On a
// fake clock: the file is read again each poll, and the wait ends at its bound, not before.
TEST(NetworkStatus, WaitsForTheAnnotationToAppear) {
  testing::TmpDir dir;
  const std::string path = dir.path() + "/annotations";
  std::ofstream(path) << "";  // the kubelet's first, empty, file
  FakeClock clock;
  auto waited = std::async(std::launch::async, [&] {
    return WaitForPodNetworkAddress(path, "adam-replication", std::chrono::seconds(5),
                                    std::chrono::milliseconds(200), &clock);
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));  // read once, found nothing, waits for the next poll
  std::ofstream(path + ".tmp") << kFile;
  std::filesystem::rename(path + ".tmp", path);
  EXPECT_EQ(waited.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  clock.Advance(std::chrono::milliseconds(200));
  auto ip = waited.get();
  ASSERT_TRUE(ip.ok()) << ip.status().message();
  EXPECT_EQ(*ip, "192.168.50.7");

  std::ofstream(path) << "";
  auto none = std::async(std::launch::async, [&] {
    return WaitForPodNetworkAddress(path, "adam-replication", std::chrono::seconds(1),
                                    std::chrono::milliseconds(200), &clock);
  });
  for (int polls = 0; polls < 4; ++polls) {  // 800 ms of the 1 s bound: still waiting
    ASSERT_TRUE(clock.AwaitWaiters(1));
    clock.Advance(std::chrono::milliseconds(200));
    ASSERT_TRUE(clock.AwaitWaiters(1));
  }
  EXPECT_EQ(none.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  clock.Advance(std::chrono::milliseconds(200));
  auto r = none.get();
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(
      r.status().message().find(path + ": no address for network 'adam-replication' after waiting"),
      std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace adam::net
