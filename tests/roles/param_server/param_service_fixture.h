// The parameter service suites' fixture: two servers over a small dense model, the trainers'
// client to them, and a proxy that can silence a connection. param_service_test.cc (both update
// protocols, filtered and half-precision updates, bad and oversized requests) and
// param_service_waits_test.cc (the consistency models' waits, servers that go away and come back)
// share it.
#pragma once

#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <random>
#include <thread>

#include "model/layout.h"
#include "net/grpc.h"
#include "param_server/clock_gate.h"
#include "param_server/param_service.h"
#include "param_server/param_store.h"
#include "trainer/ps_client.h"
#include "update/codec.h"
#include "update/update_plan.h"

namespace adam::ps {

using ::testing::HasSubstr;

inline model::ModelLayout SmallDenseModel() {
  spec::ModelSpec m;
  m.input = {1, 4, 4};
  spec::LayerSpec d;
  d.type = spec::LayerType::kDense;
  d.units = 6;
  spec::LayerSpec s;
  s.type = spec::LayerType::kSoftmax;
  s.classes = 3;
  m.layers = {d, s};
  auto layout = model::ModelLayout::Make(m);
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  return *layout;
}

// A TCP proxy on loopback to `target_port` whose connections can be made to go silent: after
// Silence(), the connections open then carry nothing more either way and are never closed (what
// a caller sees of an address that stopped answering: a pod gone, its node down, every packet
// dropped); connections made later are carried as before (the server, back under a new address).
class SilencingProxy {
 public:
  explicit SilencingProxy(int target_port) : target_port_(target_port) {
    listen_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = Loopback(0);
    EXPECT_EQ(bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(listen_, 16), 0);
    socklen_t len = sizeof a;
    getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    threads_.emplace_back([this] { Accept(); });
  }
  ~SilencingProxy() {
    stop_ = true;
    for (auto& t : threads_) t.join();
    for (int fd : fds_) close(fd);
    close(listen_);
  }
  int port() const { return port_; }
  void Silence() { ++silenced_; }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(uint16_t(port));
    return a;
  }
  void Accept() {  // the only thread that adds threads and fds until the destructor joins it
    while (!stop_) {
      pollfd p{listen_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int in = accept(listen_, nullptr, nullptr);
      const int out = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a = Loopback(target_port_);
      if (in < 0 || connect(out, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        if (in >= 0) close(in);
        close(out);
        continue;
      }
      fds_.insert(fds_.end(), {in, out});
      const int generation = silenced_;
      threads_.emplace_back([this, in, out, generation] { Pump(in, out, generation); });
      threads_.emplace_back([this, in, out, generation] { Pump(out, in, generation); });
    }
  }
  void Pump(int from, int to, int generation) {
    char buf[1 << 16];
    while (!stop_) {
      if (silenced_ != generation) {  // open, but nothing more passes
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      pollfd p{from, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = read(from, buf, sizeof buf);
      if (n <= 0 || write(to, buf, size_t(n)) != n) return;
    }
  }

  const int target_port_;
  int listen_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> silenced_{0};
  std::vector<std::thread> threads_;
  std::vector<int> fds_;
};

class ParamServiceTest : public ::testing::Test {
 protected:
  // Two servers over shards of 40 floats; updates of dense layers as activations.
  void Start(spec::Consistency mode, int trainers, int staleness = 0,
             spec::DenseUpdates dense = spec::DenseUpdates::kActivations) {
    layout_.emplace(SmallDenseModel());
    auto map = shard::ShardMap::Make(layout_->num_params(), 160, 2, 7);
    ASSERT_TRUE(map.ok());
    map_ = *map;
    plan_.emplace(update::UpdatePlan::Make(*layout_, *map_, 4, dense));
    init_.resize(size_t(layout_->num_params()));
    for (size_t i = 0; i < init_.size(); ++i) init_[i] = float(i % 5);
    for (int s = 0; s < 2; ++s) {
      auto& srv = servers_[size_t(s)];
      srv.store = std::make_unique<ParamStore>(*map_, s, init_.data());
      srv.gate = std::make_unique<ClockGate>(trainers, mode, staleness);
      srv.service = std::make_unique<ParamService>(srv.store.get(), srv.gate.get(), &*plan_, s,
                                                   &pool_, ParamServiceMetrics{});
      auto server =
          net::StartServer(*net::Transport::Plaintext(), "127.0.0.1:0", {srv.service.get()});
      ASSERT_TRUE(server.ok()) << server.status().ToString();
      srv.server = std::move(*server);
      addresses_.push_back("127.0.0.1:" + std::to_string(srv.server.port));
    }
    stub_ = adam::v1::ParameterService::NewStub(
        net::MakeChannel(*net::Transport::Plaintext(), addresses_[0]));
  }
  void TearDown() override {
    for (auto& s : servers_)
      if (s.server.server) {
        s.gate->Close();
        s.server.server->Shutdown();
      }
  }
  std::unique_ptr<trainer::ParamServerClient> Client(int index,
                                                     trainer::GrpcParamServerClientOptions o = {}) {
    o.trainer_index = index;
    auto c = trainer::ConnectParamServers(*map_, *plan_, addresses_, o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  struct Server {
    std::unique_ptr<ParamStore> store;
    std::unique_ptr<ClockGate> gate;
    std::unique_ptr<ParamService> service;
    net::Server server;
  };
  std::optional<model::ModelLayout> layout_;
  std::optional<shard::ShardMap> map_;
  std::optional<update::UpdatePlan> plan_;
  BufferPool pool_;
  std::vector<float> init_;
  std::array<Server, 2> servers_;
  std::vector<std::string> addresses_;
  std::unique_ptr<adam::v1::ParameterService::Stub> stub_;
};

}  // namespace adam::ps
