// Finding a pod's second interface: the Multus network-status annotation, read from the file the
// Kubernetes downward API writes a pod's annotations to.
//
// The file has one `key="value"` line per annotation, the value quoted as Go's strconv.Quote
// does (\", \\, \n, \t, \uXXXX ...). The network-status annotation is a JSON list of attachments,
// each {"name": "NAMESPACE/NAME" or "NAME", "interface": ..., "ips": [...]}. Both parsers take
// input from outside the process: a malformed file is an error naming the line and byte, never a
// crash (fuzzed by tests/fuzz/network_status). Pure and thread-compatible.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "core/clock.h"
#include "core/status.h"

namespace adam::net {

inline constexpr const char* kNetworkStatusAnnotation = "k8s.v1.cni.cncf.io/network-status";

// Parses a downward-API annotations file into key -> value.
StatusOr<std::map<std::string, std::string>> ParseAnnotationsFile(const std::string& text);

// The first IP address of the attachment named `network` (matching NAME or NAMESPACE/NAME) in a
// network-status JSON list; NOT_FOUND naming the attachments present when it is absent.
StatusOr<std::string> NetworkAddress(const std::string& network_status_json,
                                     const std::string& network);

// Reads `annotations_path` and returns the address of `network` on this pod.
StatusOr<std::string> PodNetworkAddress(const std::string& annotations_path,
                                        const std::string& network);

// The same, waiting while the file is empty or has no address for `network` yet: Multus writes
// the annotation after the pod starts, and the kubelet refreshes the downward-API file a little
// later. After `timeout` the error names the file and the wait; a malformed file fails at once.
// The file is read again every `poll` of `clock`.
StatusOr<std::string> WaitForPodNetworkAddress(
    const std::string& annotations_path, const std::string& network,
    std::chrono::milliseconds timeout,
    std::chrono::milliseconds poll = std::chrono::milliseconds(200), Clock* clock = Clock::Real());

}  // namespace adam::net
