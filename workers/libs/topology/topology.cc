// Topology on hwloc 2.x.
#include "topology/topology.h"

#include <hwloc.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <map>

namespace adam::topology {

struct Topology::Handle {
  hwloc_topology_t topo = nullptr;
  ~Handle() {
    if (topo) hwloc_topology_destroy(topo);
  }
};

namespace {

// Fills cores and NUMA node count from a loaded topology, keeping cores whose PUs are in
// `allowed` (null = all).
void Collect(hwloc_topology_t topo, hwloc_const_cpuset_t allowed, std::vector<Core>* cores,
             std::vector<unsigned>* node_logical) {
  std::map<unsigned, int> node_index;  // NUMA os/logical index -> dense index of used nodes
  const int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  for (int i = 0; i < ncores; ++i) {
    hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, unsigned(i));
    hwloc_cpuset_t set = hwloc_bitmap_dup(core->cpuset);
    if (allowed) hwloc_bitmap_and(set, set, allowed);
    const int pu = hwloc_bitmap_first(set);
    hwloc_bitmap_free(set);
    if (pu < 0) continue;
    int numa = 0;
    hwloc_nodeset_t nodes = core->nodeset;
    if (nodes && !hwloc_bitmap_iszero(nodes)) {
      hwloc_obj_t node =
          hwloc_get_numanode_obj_by_os_index(topo, unsigned(hwloc_bitmap_first(nodes)));
      const unsigned key = node ? node->logical_index : 0;
      auto it = node_index.emplace(key, int(node_index.size())).first;
      numa = it->second;
    }
    cores->push_back({pu, numa});
  }
  node_logical->assign(node_index.size(), 0);
  for (const auto& [logical, dense] : node_index) (*node_logical)[size_t(dense)] = logical;
}

}  // namespace

StatusOr<Topology> Topology::Discover() {
  Topology t;
  t.handle_ = std::make_shared<Handle>();
  if (hwloc_topology_init(&t.handle_->topo) != 0 || hwloc_topology_load(t.handle_->topo) != 0)
    return InternalError("hwloc could not read this machine's topology");
  // hwloc already drops cores the cgroup cpuset forbids; the affinity mask (taskset, the
  // kubelet's CPU manager) narrows it further.
  hwloc_cpuset_t bound = hwloc_bitmap_alloc();
  const bool have_bind = hwloc_get_cpubind(t.handle_->topo, bound, HWLOC_CPUBIND_PROCESS) == 0;
  Collect(t.handle_->topo, have_bind ? bound : nullptr, &t.cores_, &t.node_logical_);
  t.num_numa_nodes_ = std::max(1, int(t.node_logical_.size()));
  hwloc_bitmap_free(bound);
  if (t.cores_.empty()) return InternalError("hwloc found no usable core");
  return t;
}

StatusOr<Topology> Topology::Synthetic(const std::string& description) {
  Topology t;
  t.synthetic_ = true;
  t.handle_ = std::make_shared<Handle>();
  if (hwloc_topology_init(&t.handle_->topo) != 0)
    return InternalError("hwloc_topology_init failed");
  if (hwloc_topology_set_synthetic(t.handle_->topo, description.c_str()) != 0)
    return InvalidArgumentError("bad synthetic topology '" + description + "'");
  if (hwloc_topology_load(t.handle_->topo) != 0)
    return InternalError("hwloc could not load synthetic topology '" + description + "'");
  Collect(t.handle_->topo, nullptr, &t.cores_, &t.node_logical_);
  t.num_numa_nodes_ = std::max(1, int(t.node_logical_.size()));
  if (t.cores_.empty()) return InvalidArgumentError("synthetic topology has no core");
  return t;
}

std::string Topology::Describe() const {
  std::string pus;
  for (const auto& c : cores_) {
    if (!pus.empty()) pus += ',';
    pus += std::to_string(c.pu);
  }
  return std::to_string(num_numa_nodes_) + " NUMA node(s), " + std::to_string(cores_.size()) +
         " core(s) (PUs " + pus + ")";
}

std::vector<Placement> Topology::PlaceThreads(int threads) const {
  // Cores grouped by node, nodes in order; threads dealt to nodes in proportion to their cores
  // (largest remainder), then to that node's cores in order.
  std::vector<std::vector<Core>> by_node(static_cast<size_t>(num_numa_nodes_));
  for (const auto& c : cores_) by_node[size_t(c.numa_node)].push_back(c);
  const int total = int(cores_.size());
  std::vector<int> share(by_node.size(), 0);
  int given = 0;
  std::vector<std::pair<double, int>> rest;
  for (size_t n = 0; n < by_node.size(); ++n) {
    const double exact = double(threads) * double(by_node[n].size()) / total;
    share[n] = int(exact);
    given += share[n];
    rest.push_back({exact - share[n], int(n)});
  }
  std::stable_sort(rest.begin(), rest.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < threads; ++i, ++given) share[size_t(rest[i % rest.size()].second)]++;
  std::vector<Placement> out;
  for (size_t n = 0; n < by_node.size(); ++n)
    for (int k = 0; k < share[n]; ++k) {
      if (by_node[n].empty()) continue;
      out.push_back({int(out.size()), by_node[n][size_t(k) % by_node[n].size()]});
    }
  return out;
}

Status Topology::BindThisThread(const Placement& p) const {
  if (synthetic_) return FailedPreconditionError("cannot bind to a synthetic topology");
  hwloc_topology_t topo = handle_->topo;
  hwloc_cpuset_t set = hwloc_bitmap_alloc();
  hwloc_bitmap_only(set, unsigned(p.core.pu));
  const int rc = hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD);
  hwloc_bitmap_free(set);
  if (rc != 0) return UnavailableError("cannot bind thread to PU " + std::to_string(p.core.pu));
  if (num_numa_nodes_ > 1 && size_t(p.core.numa_node) < node_logical_.size()) {
    hwloc_obj_t node =
        hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, node_logical_[size_t(p.core.numa_node)]);
    if (node) {
      // Best effort: a kernel without NUMA memory policy still gets the CPU binding.
      hwloc_set_membind(topo, node->nodeset, HWLOC_MEMBIND_BIND,
                        HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET);
    }
  }
  return OkStatus();
}

PinningDecision DecidePinning(int allowed_cpus, int64_t limit_millis) {
  if (limit_millis <= 0) return {};
  if (limit_millis % 1000 != 0)
    return {false,
            "CPU limit " + std::to_string(limit_millis) + "m is not whole CPUs: running unpinned"};
  if (allowed_cpus != limit_millis / 1000)
    return {false, "allowed cpuset has " + std::to_string(allowed_cpus) +
                       " CPUs but the CPU limit is " + std::to_string(limit_millis / 1000) +
                       ": the cores are shared with other pods (no static CPU manager), running "
                       "unpinned"};
  return {};
}

PinningDecision DecidePinningHere() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  int64_t limit = 0;
  if (const char* env = std::getenv("ADAM_CPU_LIMIT_MILLIS")) {
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    if (end != env && *end == '\0' && v > 0) limit = v;
  }
  return DecidePinning(allowed, limit);
}

}  // namespace adam::topology
