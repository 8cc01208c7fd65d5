// Names the calling thread as `top -H`, `ps -L` and /proc/PID/task/TID/comm show it, so a role's
// threads can be told apart when their CPU is measured (bench/thread_cpu.py). Linux keeps 15
// bytes of a name: a longer one is cut there. A failure is ignored: the name is a label.
#pragma once

#include <string>
#include <thread>
#include <utility>

namespace adam {

void NameThisThread(const std::string& name);

// A thread that names itself, then runs `fn`.
template <typename Fn>
std::thread NamedThread(std::string name, Fn&& fn) {
  return std::thread([name = std::move(name), fn = std::forward<Fn>(fn)]() mutable {
    NameThisThread(name);
    fn();
  });
}

}  // namespace adam
