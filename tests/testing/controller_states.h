// Controller states for the shard-state tests: a bootstrapped map of `shards` shards over
// `servers` servers with `copies` copies each, every server registered (on the given hosts).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "controller/shard_state.h"

namespace adam::testing {

inline v1::ControllerState Bootstrapped(int servers, int shards, int copies) {
  auto map = *shard::ShardMap::Make(int64_t(shards) * 16, 64, servers, 7);
  return controller::MakeBootstrap(map, copies);
}

inline controller::ShardState Registered(int servers, int shards, int copies,
                                         std::vector<std::string> hosts = {}) {
  controller::ShardState st;
  v1::Command c;
  *c.mutable_bootstrap() = Bootstrapped(servers, shards, copies);
  EXPECT_TRUE(st.Apply(c).ok());
  for (int i = 0; i < servers; ++i) {
    v1::Command r;
    r.mutable_register_()->set_id(uint32_t(i));
    r.mutable_register_()->set_address("ps-" + std::to_string(i));
    if (!hosts.empty()) r.mutable_register_()->set_host(hosts[size_t(i)]);
    EXPECT_TRUE(st.Apply(r).ok());
  }
  return st;
}

}  // namespace adam::testing
