// The watch stream's wire format: one JSON object per line, {"type": ..., "object": {...}}.
//
// The decoder is the parser of network input from the API server: a malformed line is an error
// naming the line and the byte at fault, never a crash (fuzzed by tests/fuzz/watch_stream).
// Thread-compatible.
#pragma once

#include <string>

#include "core/status.h"
#include "kube/client.h"

namespace adam::kube {

class WatchDecoder {
 public:
  // Decodes one line (without its newline). Requires a known type (ADDED, MODIFIED, DELETED,
  // BOOKMARK, ERROR) and an object; every object but an ERROR's carries metadata.resourceVersion
  // as a string. DATA_LOSS names the line number and byte offset otherwise.
  StatusOr<WatchEvent> Decode(const std::string& line);

 private:
  uint64_t lines_ = 0;
};

// The Status an ERROR event's object (a metav1.Status) stands for: code 410 -> OUT_OF_RANGE
// (list again), anything else UNAVAILABLE, with the server's message.
Status WatchErrorStatus(const Json& status_object);

}  // namespace adam::kube
