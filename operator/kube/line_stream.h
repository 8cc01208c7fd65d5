// A GET whose answer is a stream of lines (a watch), on libcurl.
//
// Why not cpprest, as every other request: a watch is stopped while the server may still be
// sending, and cpprest's client stops a request by closing its socket from the cancelling thread
// while its own threads may be starting the next read of a multi-part read on it, which boost.asio
// does not allow (a crash in epoll_reactor::start_op). Here the transfer, the reader and the
// stop all happen on the calling thread: stopping is leaving the loop and closing the connection.
// Thread-safe (each call has its own connection).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace adam::kube {

// Cuts a byte stream into lines as it arrives in pieces of any size: a line ends at '\n', and a
// '\r' just before it is dropped. The cutting half of StreamLines, apart so that it is fuzzed
// (tests/fuzz/watch_stream). Thread-compatible.
class LineCutter {
 public:
  enum class Cut { kMore, kStopped, kTooLong };
  explicit LineCutter(size_t max_line) : max_line_(max_line) {}
  // Hands every line that `data` ends to `on_line`, in order. kStopped when `on_line` returned
  // false (the rest of `data` is dropped), kTooLong when the unended line has grown past
  // `max_line` bytes, else kMore.
  Cut Append(std::string_view data, const std::function<bool(std::string_view)>& on_line);
  // What follows the last '\n' so far: a last line the stream did not end (its '\r' dropped).
  std::string_view rest() const;

 private:
  size_t max_line_;
  std::string pending_;
};

struct LineStreamRequest {
  std::string url;     // scheme://host:port/path?query
  std::string ca_pem;  // the server's CA; empty: the system's
  bool insecure_skip_tls_verify = false;
  std::string cert_pem, key_pem;         // a client certificate, when given
  std::string token;                     // a bearer token, when given
  std::chrono::milliseconds timeout{0};  // the whole transfer's, connecting included
};

struct LineStreamAnswer {
  int code = 0;      // the HTTP status
  std::string body;  // the answer's body when the status is not 200 (the first 64 KiB)
};

// GETs `r`; with a 200 answer, hands each line (its newline taken off) to `on_line`, in order,
// until the server ends the stream, `on_line` returns false, or `*stop` is set (checked at least
// every 20 ms). `on_status` (when set) is called once, with the status, before any line.
// CANCELLED when stopped; UNAVAILABLE for a connection, TLS or time-out failure; DATA_LOSS for a
// line longer than 64 MiB; otherwise the answer. What `on_status` or `on_line` throws ends the
// transfer and is thrown again from here, after the connection is closed.
StatusOr<LineStreamAnswer> StreamLines(const LineStreamRequest& r,
                                       const std::function<void(int)>& on_status,
                                       const std::function<bool(std::string_view)>& on_line,
                                       const std::atomic<bool>* stop);

}  // namespace adam::kube
