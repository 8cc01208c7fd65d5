// Topology: the cores and NUMA nodes this process may use (hwloc), where to place worker
// threads, and binding a thread (and the memory it allocates) to its place.
//
// Discover() reads the machine restricted to the process's allowed cpuset (what a Kubernetes pod
// with exclusive CPUs gets: cgroup cpuset and affinity mask both apply). Synthetic() builds a
// topology from hwloc's synthetic syntax ("pack:2 numa:2 core:4 pu:1") so placement is tested
// on machines with several NUMA nodes without having one; synthetic topologies cannot bind.
// A Topology is immutable after construction; its methods are thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace adam::topology {

// One usable core: the OS index of its first usable hardware thread and its NUMA node.
struct Core {
  int pu = 0;         // OS processor index to bind to
  int numa_node = 0;  // logical index of its NUMA node (0..num_numa_nodes-1)
};

// Where worker thread t runs.
struct Placement {
  int thread = 0;
  Core core;
};

// Whether a role should pin its threads, from what Kubernetes gave its container. The kubelet's
// static CPU manager gives a Guaranteed container with a whole-CPU limit exactly that many cores
// of its own; without it (the default on managed clusters) every pod may run on every core, and
// placing threads "from the first allowed core" would pile the threads of every pod onto the same
// few cores. So: pin only when the allowed cpuset has exactly limit/1000 CPUs.
struct PinningDecision {
  bool pin = true;
  std::string why;  // one line for the log; empty when pinned as asked
};
// `allowed_cpus`: CPUs in the process's affinity mask; `limit_millis`: the container's CPU limit
// in millicores (ADAM_CPU_LIMIT_MILLIS from the downward API), 0 when unknown (not on
// Kubernetes, where the launcher's own cores are the process's).
PinningDecision DecidePinning(int allowed_cpus, int64_t limit_millis);
// The same for this process: its affinity mask and $ADAM_CPU_LIMIT_MILLIS.
PinningDecision DecidePinningHere();

class Topology {
 public:
  static StatusOr<Topology> Discover();
  static StatusOr<Topology> Synthetic(const std::string& description);

  const std::vector<Core>& cores() const { return cores_; }
  int num_numa_nodes() const { return num_numa_nodes_; }
  // One line: "2 NUMA nodes, 8 cores (0-7)".
  std::string Describe() const;

  // Places `threads` workers: spread over NUMA nodes in proportion to their cores (so each node's
  // threads share its memory), one core per thread while cores last, then wrapping around.
  std::vector<Placement> PlaceThreads(int threads) const;

  // Binds the calling thread to `p`'s core and its future allocations to that core's NUMA node.
  // Fails on a synthetic topology.
  Status BindThisThread(const Placement& p) const;

 private:
  struct Handle;
  std::shared_ptr<Handle> handle_;
  std::vector<Core> cores_;
  std::vector<unsigned> node_logical_;  // dense node index -> hwloc logical index
  int num_numa_nodes_ = 1;
  bool synthetic_ = false;
};

}  // namespace adam::topology
