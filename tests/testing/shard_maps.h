// A controller shard map written out by hand for routing tests: `servers` servers, each alive at
// replication address "repl-<id>", and shard i's in-sync copies replicas[i] (the primary first)
// and copies being filled copying[i].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "adam/v1/controller.pb.h"

namespace adam::testing {

inline v1::ShardMap ShardMapOf(uint64_t version, const std::vector<std::vector<uint32_t>>& replicas,
                               const std::vector<std::vector<uint32_t>>& copying = {},
                               uint32_t servers = 3) {
  v1::ShardMap m;
  m.set_version(version);
  for (uint32_t id = 0; id < servers; ++id) {
    auto* s = m.add_servers();
    s->set_id(id);
    s->set_alive(true);
    s->set_replication_address("repl-" + std::to_string(id));
  }
  for (size_t i = 0; i < replicas.size(); ++i) {
    auto* r = m.add_shards();
    r->set_shard(uint32_t(i));
    for (uint32_t id : replicas[i]) r->add_replicas(id);
    if (i < copying.size())
      for (uint32_t id : copying[i]) r->add_copying(id);
  }
  return m;
}

}  // namespace adam::testing
