// Status and StatusOr<T>: errors as values, never exceptions across module boundaries.
//
// A Status is OK or carries a code and a message that names what is wrong and where
// (`spec.model.layers[3].units: must be > 0, got 0`). Status values are immutable and safe to
// copy between threads.
#pragma once

#include <cassert>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace adam {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller's input is wrong (a manifest field, a flag)
  kNotFound,         // a file, key or peer does not exist
  kDataLoss,         // a file or message is truncated or corrupt
  kUnavailable,      // a peer cannot be reached (yet); retrying may help
  kFailedPrecondition,
  kAlreadyExists,
  kInternal,
  kCancelled,
  kDeadlineExceeded,
  kAborted,     // a concurrent change won (an optimistic-concurrency conflict): re-read, retry
  kOutOfRange,  // a position is no longer (or not yet) available, e.g. a compacted version
};

// Returns a short name for `code` ("INVALID_ARGUMENT").
const char* StatusCodeName(StatusCode code);

// [[nodiscard]]: a call whose Status (or StatusOr) nobody looks at fails the build (see
// CMakeLists.txt's -Werror=unused-result); a caller that means to drop one says so with (void).
class [[nodiscard]] Status {
 public:
  // An OK status.
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;
  // A copy whose message is "`prefix`: message"; OK stays OK.
  Status Annotate(const std::string& prefix) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgumentError(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status NotFoundError(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status DataLossError(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
inline Status UnavailableError(std::string m) {
  return Status(StatusCode::kUnavailable, std::move(m));
}
inline Status FailedPreconditionError(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
inline Status DeadlineExceededError(std::string m) {
  return Status(StatusCode::kDeadlineExceeded, std::move(m));
}
inline Status InternalError(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
inline Status AbortedError(std::string m) { return Status(StatusCode::kAborted, std::move(m)); }
inline Status OutOfRangeError(std::string m) {
  return Status(StatusCode::kOutOfRange, std::move(m));
}

// Either a value of type T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  StatusOr(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(v_).ok() && "StatusOr built from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // The error, or OK when a value is held.
  Status status() const { return ok() ? OkStatus() : std::get<Status>(v_); }
  // Requires ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace adam

// Returns early from the enclosing function when `expr` is a non-OK Status.
#define ADAM_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::adam::Status adam_status_ = (expr);        \
    if (!adam_status_.ok()) return adam_status_; \
  } while (0)

#define ADAM_CONCAT_INNER(a, b) a##b
#define ADAM_CONCAT(a, b) ADAM_CONCAT_INNER(a, b)
// `ADAM_ASSIGN_OR_RETURN(auto x, F());` binds the value or returns the error.
#define ADAM_ASSIGN_OR_RETURN(lhs, expr) \
  ADAM_ASSIGN_OR_RETURN_IMPL(ADAM_CONCAT(adam_statusor_, __LINE__), lhs, expr)
// NOLINTBEGIN(bugprone-macro-parentheses): `lhs` may be a declaration, which parentheses break.
#define ADAM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)

// Crashes with a message when an internal invariant does not hold (never for bad input).
#define ADAM_CHECK(cond)                                                   \
  do {                                                                     \
    if (!(cond)) ::adam::internal::CheckFailed(#cond, __FILE__, __LINE__); \
  } while (0)

namespace adam::internal {
[[noreturn]] void CheckFailed(const char* cond, const char* file, int line);
}  // namespace adam::internal
