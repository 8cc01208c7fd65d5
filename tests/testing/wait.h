// Test helpers: reading and writing a whole file, and waiting for a condition another thread
// brings about.
#pragma once

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace adam::testing {

// The file's bytes ("" when it cannot be read).
inline std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Replaces the file's contents with `bytes`.
inline void WriteText(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Polls `pred` every 10 ms until it holds (true) or `timeout` passes (its last answer).
template <typename F>
bool Eventually(F pred, std::chrono::milliseconds timeout = std::chrono::milliseconds(8000)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

// Waits until the file at `path` contains `text` (true), or `timeout` passes (false).
inline bool WaitForText(const std::string& path, const std::string& text,
                        std::chrono::milliseconds timeout) {
  return Eventually([&] { return ReadText(path).find(text) != std::string::npos; }, timeout);
}

}  // namespace adam::testing
