// The watch transport (kube/line_stream.h) against a scripted HTTP peer: how lines are cut out
// of chunks, what a refusal returns, and that a stream the server keeps writing is stopped at
// once and cleanly, many times over (what cpprest's client could not do safely).
#include "kube/line_stream.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace adam::kube {
namespace {

// Accepts connections on 127.0.0.1 one after another; for each, reads the request head and hands
// the socket to `serve`, which writes the answer (raw bytes) and returns when done.
class ScriptedPeer {
 public:
  explicit ScriptedPeer(std::function<void(int fd, const std::string& head)> serve)
      : serve_(std::move(serve)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(fd_, 16);
    thread_ = std::thread([this] { Loop(); });
  }
  ~ScriptedPeer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string url(const std::string& path = "/stream") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::string last_head() const {
    std::lock_guard<std::mutex> lock(mu_);
    return head_;
  }

 private:
  void Loop() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string head;
      char buf[4096];
      while (head.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        head.append(buf, size_t(n));
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        head_ = head;
      }
      serve_(c, head);
      ::close(c);
    }
  }

  std::function<void(int, const std::string&)> serve_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::string head_;
  std::thread thread_;
};

bool Send(int fd, const std::string& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size());
}

std::string Chunk(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

const char* kChunkedHead =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";

struct Seen {
  std::vector<int> statuses;
  std::vector<std::string> lines;
  std::function<void(int)> on_status = [this](int code) { statuses.push_back(code); };
  std::function<bool(std::string_view)> on_line = [this](std::string_view l) {
    lines.emplace_back(l);
    return true;
  };
};

TEST(LineCutter, AnUnendedLinePastTheBoundAndAReaderThatStopsEndTheCut) {
  LineCutter cutter(8);
  std::vector<std::string> lines;
  auto keep = [&](std::string_view l) {
    lines.emplace_back(l);
    return l != "stop";
  };
  EXPECT_EQ(cutter.Append("a\r\nbc", keep), LineCutter::Cut::kMore);
  EXPECT_EQ(cutter.rest(), "bc");
  EXPECT_EQ(cutter.Append("d\nstop\nnever\n", keep), LineCutter::Cut::kStopped);
  EXPECT_EQ(lines, (std::vector<std::string>{"a", "bcd", "stop"}));
  LineCutter small(8);
  EXPECT_EQ(small.Append("12345678", keep), LineCutter::Cut::kMore);
  EXPECT_EQ(small.Append("9", keep), LineCutter::Cut::kTooLong);
}

TEST(LineStream, LinesCutAcrossChunksComeWholeAndInOrder) {
  ScriptedPeer peer([](int fd, const std::string&) {
    Send(fd, kChunkedHead);
    for (const char* part : {"on", "e\ntw", "o\r\n", "\nthr", "ee\nfour"}) {
      Send(fd, Chunk(part));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    Send(fd, "0\r\n\r\n");
  });
  LineStreamRequest r;
  r.url = peer.url("/api/v1/configmaps?watch=1");
  r.token = "s3cret";
  r.timeout = std::chrono::seconds(10);
  Seen seen;
  auto a = StreamLines(r, seen.on_status, seen.on_line, nullptr);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->code, 200);
  EXPECT_EQ(seen.statuses, std::vector<int>{200});
  EXPECT_EQ(seen.lines, (std::vector<std::string>{"one", "two", "", "three", "four"}));
  const std::string head = peer.last_head();
  EXPECT_EQ(head.rfind("GET /api/v1/configmaps?watch=1 HTTP/1.1\r\n", 0), 0u) << head;
  EXPECT_NE(head.find("Authorization: Bearer s3cret\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("User-Agent: adam-operator\r\n"), std::string::npos) << head;
}

TEST(LineStream, ARefusalsBodyIsReturnedAndNoLineIsRead) {
  ScriptedPeer peer([](int fd, const std::string&) {
    const std::string body = R"({"kind":"Status","code":403,"message":"forbidden"})";
    Send(fd, "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: " +
                 std::to_string(body.size()) + "\r\n\r\n" + body);
  });
  LineStreamRequest r;
  r.url = peer.url();
  r.timeout = std::chrono::seconds(10);
  Seen seen;
  auto a = StreamLines(r, seen.on_status, seen.on_line, nullptr);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->code, 403);
  EXPECT_EQ(seen.statuses, std::vector<int>{403});
  EXPECT_NE(a->body.find("forbidden"), std::string::npos) << a->body;
  EXPECT_TRUE(seen.lines.empty());
}

// The server writes a line every millisecond for as long as the connection lasts. A reader that
// has had enough, and a stop from another thread, each end the stream promptly; the server sees
// its connection closed. Twenty times each: a stop that raced the transport's own reads would
// show here (run under ASan and TSan too).
TEST(LineStream, AStreamTheServerKeepsWritingEndsAtOnceWhenTheReaderOrAStopSays) {
  std::atomic<int> closed_seen{0};
  ScriptedPeer peer([&](int fd, const std::string&) {
    if (!Send(fd, kChunkedHead)) return;
    for (int i = 0;; ++i) {
      if (!Send(fd, Chunk("{\"n\":" + std::to_string(i) + "}\n"))) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ++closed_seen;
  });
  LineStreamRequest r;
  r.url = peer.url();
  r.timeout = std::chrono::seconds(30);
  for (int round = 0; round < 20; ++round) {
    int lines = 0;
    auto a = StreamLines(
        r, nullptr, [&](std::string_view) { return ++lines < 5; }, nullptr);
    ASSERT_TRUE(a.ok()) << a.status().message();
    EXPECT_EQ(a->code, 200);
    EXPECT_EQ(lines, 5);
  }
  for (int round = 0; round < 20; ++round) {
    std::atomic<bool> stop{false};
    std::atomic<int> lines{0};
    std::chrono::steady_clock::time_point stopped_at;
    std::thread stopper([&] {
      while (lines.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      stopped_at = std::chrono::steady_clock::now();
      stop = true;
    });
    auto a = StreamLines(
        r, nullptr,
        [&](std::string_view) {
          ++lines;
          return true;
        },
        &stop);
    const auto returned_at = std::chrono::steady_clock::now();
    stopper.join();
    EXPECT_EQ(a.status().code(), StatusCode::kCancelled) << a.status().message();
    EXPECT_LT(returned_at - stopped_at, std::chrono::seconds(1));
  }
  // Every stream's writer found its connection closed (the last one within a few writes).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (closed_seen.load() < 40 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(closed_seen.load(), 40);
}

// What the reader throws does not cross libcurl: the transfer ends, the connection is closed, and
// the exception reaches the caller; the next stream works.
TEST(LineStream, WhatTheReaderThrowsReachesTheCallerAfterTheConnectionCloses) {
  ScriptedPeer peer([](int fd, const std::string&) {
    Send(fd, kChunkedHead);
    for (int i = 0; i < 3; ++i) Send(fd, Chunk("line\n"));
    Send(fd, "0\r\n\r\n");
  });
  LineStreamRequest r;
  r.url = peer.url();
  r.timeout = std::chrono::seconds(10);
  int lines = 0;
  auto throwing = [&](std::string_view) -> bool {
    if (++lines == 2) throw std::runtime_error("the reader broke");
    return true;
  };
  try {
    (void)StreamLines(r, nullptr, throwing, nullptr);
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "the reader broke");
  }
  EXPECT_EQ(lines, 2);
  Seen seen;
  auto a = StreamLines(r, seen.on_status, seen.on_line, nullptr);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(seen.lines, (std::vector<std::string>{"line", "line", "line"}));
}

TEST(LineStream, NoServerIsUnavailableNamingTheAddress) {
  int port = 0;
  {
    ScriptedPeer gone([](int, const std::string&) {});
    const std::string u = gone.url();
    port = std::stoi(u.substr(u.rfind(':') + 1));
  }
  LineStreamRequest r;
  r.url = "http://127.0.0.1:" + std::to_string(port) + "/stream";
  r.timeout = std::chrono::seconds(10);
  auto a = StreamLines(
      r, nullptr, [](std::string_view) { return true; }, nullptr);
  EXPECT_EQ(a.status().code(), StatusCode::kUnavailable) << a.status().message();
  EXPECT_NE(a.status().message().find(r.url), std::string::npos) << a.status().message();
}

TEST(LineStream, AServerThatGoesQuietPastTheTimeOutIsUnavailable) {
  ScriptedPeer peer([](int fd, const std::string&) {
    Send(fd, kChunkedHead);
    Send(fd, Chunk("first\n"));
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  });
  LineStreamRequest r;
  r.url = peer.url();
  r.timeout = std::chrono::milliseconds(500);
  Seen seen;
  auto a = StreamLines(r, seen.on_status, seen.on_line, nullptr);
  EXPECT_EQ(a.status().code(), StatusCode::kUnavailable) << a.status().message();
  EXPECT_EQ(seen.lines, std::vector<std::string>{"first"});
}

}  // namespace
}  // namespace adam::kube
