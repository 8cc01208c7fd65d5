// Mutex and MutexLock: std::mutex and std::unique_lock with Clang's thread-safety annotations
// (Abseil's macros), so that the clang builds (-Wthread-safety, an error there) check at compile
// time that every member marked ABSL_GUARDED_BY(mu_) is touched only with mu_ held and every
// ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) function is called so. libstdc++'s std::mutex carries no
// annotations, hence the wrapper; absl::Mutex has them but its own condition variable and time
// types, and the roles wait on std::condition_variable with std::chrono deadlines. Under GCC the
// macros are empty and the types cost what std::mutex and std::unique_lock cost. Thread-safe, as a
// mutex is.
//
// Waiting: MutexLock waits on a std::condition_variable with the mutex held around the wait as the
// analysis sees it. A predicate that reads guarded members says so:
// `[&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ... }`.
#pragma once

#include <absl/base/thread_annotations.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace adam {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  // Taken through MutexLock. BasicLockable too, for std::unique_lock where a function holds a
  // lock taken on a condition or a set of mutexes decided at run time (the analysis cannot follow
  // those: such a function says so, and why its accesses are held).
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex for its scope (std::unique_lock underneath, so condition variables can wait on it).
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(&mu), lock_(mu.mu_) {}
  ~MutexLock() ABSL_UNLOCK_FUNCTION() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  Mutex& mutex() const { return *mu_; }

  // Lets go of the mutex before the scope ends, and takes it again.
  void Unlock() ABSL_UNLOCK_FUNCTION() { lock_.unlock(); }
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { lock_.lock(); }

  // Waits for a notification (or a spurious wake-up): the caller loops on its condition.
  void Wait(std::condition_variable& cv) { cv.wait(lock_); }
  // Waits until pred() holds.
  template <class Pred>
  void Await(std::condition_variable& cv, Pred pred) {
    cv.wait(lock_, pred);
  }
  // Waits until pred() holds or `timeout` has passed; returns pred() at the end.
  template <class Rep, class Period, class Pred>
  bool AwaitFor(std::condition_variable& cv, std::chrono::duration<Rep, Period> timeout,
                Pred pred) {
    return cv.wait_for(lock_, timeout, pred);
  }
  // Waits until pred() holds or `deadline`; returns pred() at the end.
  template <class Clock, class Duration, class Pred>
  bool AwaitUntil(std::condition_variable& cv, std::chrono::time_point<Clock, Duration> deadline,
                  Pred pred) {
    return cv.wait_until(lock_, deadline, pred);
  }
  // Waits for a notification or `deadline`; false when the time ran out.
  template <class Clock, class Duration>
  bool WaitUntil(std::condition_variable& cv, std::chrono::time_point<Clock, Duration> deadline) {
    return cv.wait_until(lock_, deadline) == std::cv_status::no_timeout;
  }

 private:
  Mutex* mu_;
  std::unique_lock<std::mutex> lock_;
};

}  // namespace adam
