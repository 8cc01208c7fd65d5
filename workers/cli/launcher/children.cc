#include "launcher/children.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace adam::launcher {

std::string ExitText(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

StatusOr<Child*> Children::Start(const spec::RoleInstance& in, std::vector<std::string> args,
                                 const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return InternalError(std::string("pipe: ") + std::strerror(errno));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return InternalError(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    if (!cpus.empty()) sched_setaffinity(0, sizeof set, &set);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  Child c;
  c.inst = in;
  c.pid = pid;
  c.fd = fds[0];
  c.ready = in.role == spec::Role::kTrainer;  // trainers serve nothing others wait on
  children_.push_back(std::move(c));
  return &children_.back();
}

std::vector<Child*> Children::Poll(int wake_fd) {
  std::vector<pollfd> pfds;
  std::vector<Child*> owners;
  pfds.push_back({wake_fd, POLLIN, 0});
  owners.push_back(nullptr);
  for (auto& c : children_)
    if (c.fd >= 0) {
      pfds.push_back({c.fd, POLLIN, 0});
      owners.push_back(&c);
    }
  poll(pfds.data(), pfds.size(), 200);
  for (size_t i = 1; i < pfds.size(); ++i)
    if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) ReadFrom(*owners[i]);
  std::vector<Child*> exited;
  int status = 0;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
    for (auto& c : children_) {
      if (c.pid != pid) continue;
      Drain(c);  // what it wrote before dying
      c.exited = true;
      c.wait_status = status;
      exited.push_back(&c);
    }
  return exited;
}

bool Children::ReadFrom(Child& c) {
  char buf[65536];
  const ssize_t n = read(c.fd, buf, sizeof buf);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    if (!c.buf.empty()) on_line_(c, c.buf);
    c.buf.clear();
    close(c.fd);
    c.fd = -1;
    return false;
  }
  if (n < 0) return false;
  c.buf.append(buf, size_t(n));
  size_t pos;
  while ((pos = c.buf.find('\n')) != std::string::npos) {
    on_line_(c, c.buf.substr(0, pos));
    c.buf.erase(0, pos + 1);
  }
  return true;
}

void Children::Drain(Child& c) {
  if (c.fd < 0) return;
  ReadFrom(c);
  while (c.fd >= 0 && ReadFrom(c)) {
  }
}

void Children::StopAll(std::chrono::seconds grace, Clock& clock) {
  for (auto& c : children_)
    if (!c.exited) {
      c.expected_exit = true;
      kill(c.pid, SIGTERM);
    }
  const auto deadline = clock.Now() + grace;
  while (true) {
    bool alive = false;
    for (auto& c : children_) {
      if (c.exited) continue;
      int status;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.exited = true;
        c.wait_status = status;
        while (c.fd >= 0 && ReadFrom(c)) {
        }
      } else {
        alive = true;
      }
    }
    if (!alive) break;
    if (clock.Now() > deadline) {
      for (auto& c : children_)
        if (!c.exited) {
          std::fprintf(stderr, "adam run: %s did not stop in %lld s; killing it\n",
                       c.inst.name.c_str(), static_cast<long long>(grace.count()));
          kill(c.pid, SIGKILL);
          waitpid(c.pid, &c.wait_status, 0);
          c.exited = true;
        }
      break;
    }
    clock.SleepFor(std::chrono::milliseconds(20));
  }
  for (auto& c : children_)
    if (c.fd >= 0) {
      close(c.fd);
      c.fd = -1;
    }
}

}  // namespace adam::launcher
