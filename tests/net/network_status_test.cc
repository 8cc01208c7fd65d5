// The downward-API annotations file and Multus's network-status: the second NIC's address.
#include "net/network_status.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

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

// Multus writes the annotation after the pod starts: the server waits for it, bounded.
TEST(NetworkStatus, WaitsForTheAnnotationToAppear) {
  testing::TmpDir dir;
  const std::string path = dir.path() + "/annotations";
  std::ofstream(path) << "";  // the kubelet's first, empty, file
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::ofstream(path + ".tmp") << kFile;
    std::filesystem::rename(path + ".tmp", path);
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto ip = WaitForPodNetworkAddress(path, "adam-replication", std::chrono::seconds(5),
                                     std::chrono::milliseconds(20));
  later.join();
  ASSERT_TRUE(ip.ok()) << ip.status().message();
  EXPECT_EQ(*ip, "192.168.50.7");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(250));
  std::ofstream(path) << "";
  auto none = WaitForPodNetworkAddress(path, "adam-replication", std::chrono::milliseconds(200),
                                       std::chrono::milliseconds(20));
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find(
                path + ": no address for network 'adam-replication' after waiting"),
            std::string::npos)
      << none.status().message();
  std::ofstream(path) << "broken";  // malformed: at once, not after the wait
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_NE(
      WaitForPodNetworkAddress(path, "adam-replication", std::chrono::seconds(5)).status().code(),
      StatusCode::kOk);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::seconds(1));
}

}  // namespace
}  // namespace adam::net
