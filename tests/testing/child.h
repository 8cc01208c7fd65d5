// `adam ARGS` as a child process for end-to-end tests: its stdout events can be awaited, its
// stderr goes to a log file, and it is stopped when the object is destroyed: SIGTERM, so that it
// removes its temporary files as a user's Ctrl-C would have it, then SIGKILL after 10 s.
// ADAM_BINARY must be defined by the test target.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/role_events.h"

namespace adam::testing {

class Child {
 public:
  Child(const std::vector<std::string>& args, const std::string& log)
      : Child(ADAM_BINARY, args, log) {}
  // Another program (a peer the test runs beside ours, e.g. Prometheus).
  Child(const std::string& binary, const std::vector<std::string>& args, const std::string& log) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      int err = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(err, STDERR_FILENO);
      close(fds[0]);
      std::vector<char*> argv = {const_cast<char*>(binary.c_str())};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (waitpid(pid_, nullptr, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          kill(pid_, SIGKILL);
          waitpid(pid_, nullptr, 0);
          break;
        }
        usleep(20 * 1000);
      }
    }
    close(fd_);
  }
  // The next event of kind E (events::Ready, events::Epoch, ...; others are skipped), or
  // nullopt after `timeout` or once the child's stdout ends.
  template <class E>
  std::optional<E> WaitFor(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (auto line = NextLine(deadline)) {
      const auto ev = events::ParseLine(*line);
      if (ev && std::holds_alternative<E>(*ev)) return std::get<E>(*ev);
    }
    return std::nullopt;
  }
  // Reads (and drops) its output until its stdout ends or `timeout` passes.
  void Drain(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (NextLine(deadline)) {
    }
  }
  void Signal(int sig) { kill(pid_, sig); }
  pid_t pid() const { return pid_; }
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  // The next line of its stdout; nullopt once `deadline` passed or stdout ended.
  std::optional<std::string> NextLine(std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      if (const size_t nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, int(left.count())) <= 0) return std::nullopt;
      char chunk[4096];
      const ssize_t n = read(fd_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buf_.append(chunk, size_t(n));
    }
  }
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string buf_;
};

}  // namespace adam::testing
