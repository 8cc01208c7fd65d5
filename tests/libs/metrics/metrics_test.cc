// MetricsServer: what a role registers is served as Prometheus text on /metrics, on the port it
// was given or a free one, and an address it cannot take is an error naming it.
#include "metrics/metrics.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>

namespace adam::metrics {
namespace {

using ::testing::HasSubstr;

// The body of GET /metrics from 127.0.0.1:port (HTTP/1.0: the server closes when done); "" when
// nothing answers within 5 s.
std::string Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  const timeval wait{5, 0};  // a server that accepts and never answers fails the test, not hangs it
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof wait);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, request.data(), request.size()) == ssize_t(request.size())) {
      char buf[4096];
      for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) reply.append(buf, size_t(n));
    }
  }
  close(fd);
  const size_t body = reply.find("\r\n\r\n");
  return body == std::string::npos ? "" : reply.substr(body + 4);
}

TEST(MetricsServer, ServesWhatARoleRegistersOnAFreePort) {
  auto m = MetricsServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_GT((*m)->port(), 0);
  (*m)->Counter("adam_test_pushes_total", "Pushes in this test").Increment(3);
  (*m)->Gauge("adam_test_epoch", "Epoch in this test").Set(2.5);
  (*m)->Histogram("adam_test_push_seconds", "Push time in this test", {0.1, 1}).Observe(0.3);
  const std::string text = Scrape((*m)->port());
  EXPECT_THAT(text, HasSubstr("# HELP adam_test_pushes_total Pushes in this test"));
  EXPECT_THAT(text, HasSubstr("# TYPE adam_test_pushes_total counter"));
  EXPECT_THAT(text, HasSubstr("\nadam_test_pushes_total 3"));
  EXPECT_THAT(text, HasSubstr("\nadam_test_epoch 2.5"));
  EXPECT_THAT(text, HasSubstr("adam_test_push_seconds_bucket{le=\"0.1\"} 0"));
  EXPECT_THAT(text, HasSubstr("adam_test_push_seconds_bucket{le=\"1\"} 1"));
  EXPECT_THAT(text, HasSubstr("adam_test_push_seconds_count 1"));
}

// A pod's DNS name is no address CivetWeb can bind: such a host serves on every interface.
TEST(MetricsServer, AHostNameServesOnEveryInterface) {
  auto m = MetricsServer::Start("job-ps-0.job", 0);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  (*m)->Gauge("adam_test_up", "Up in this test").Set(1);
  EXPECT_THAT(Scrape((*m)->port()), HasSubstr("\nadam_test_up 1"));
}

TEST(MetricsServer, AnAddressInUseIsAnErrorNamingIt) {
  auto first = MetricsServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string address = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = MetricsServer::Start("127.0.0.1", (*first)->port());
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("cannot serve metrics on " + address));
}

}  // namespace
}  // namespace adam::metrics
