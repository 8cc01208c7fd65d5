// Raft benchmark: our controller group (3 `adam controller` processes) beside Debian's etcd (3
// `etcd` members), both on loopback with the same election timeout (200 ms, randomized up to
// 400 ms; heartbeats every 20 ms) and durable writes (fsync before acknowledging).
//
// Rows: commit latency of small (64-byte) writes, one client, sequential (p50/p99); throughput
// with --clients concurrent clients; leader failover: `kill -9` of the leader until a write is
// committed through a surviving member (median of --failovers rounds). Writes go to the leader.
// Both groups run side by side and every measurement alternates between them in rounds, so the
// shared machine's noise falls on both. Prints a table with ours/etcd ratios and writes --json
// (build/bench/raft.json).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "adam/v1/controller.grpc.pb.h"
#include "core/ports.h"
#include "etcd_kv.grpc.pb.h"
#include "net/grpc.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

void Kill(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// One system under test: three members, a way to write through one, and to find the leader.
struct Cluster {
  std::string name;
  std::vector<std::string> client_addresses;  // by member index
  std::function<pid_t(int member)> start;
  std::function<bool(int member, const std::string& key, const std::string& value,
                     std::chrono::milliseconds deadline)>
      put;
  std::function<int()> leader;  // member index, -1 if unknown
  std::vector<pid_t> pids;

  void StartAll() {
    pids.assign(client_addresses.size(), -1);
    for (size_t i = 0; i < pids.size(); ++i) pids[i] = start(int(i));
  }
  void StopAll() {
    for (pid_t& p : pids) Kill(p), p = -1;
  }
  int WaitLeader(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      const int l = leader();
      if (l >= 0 && put(l, "warmup", "x", 1000ms)) return l;
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }
};

struct Row {
  double p50 = 0, p99 = 0, writes_per_s = 0, failover_ms = 0;
  std::vector<double> latencies;    // every sequential write, all rounds
  std::vector<double> round_rates;  // writes/s per throughput round
  std::vector<double> failovers;
};

// One round of sequential writes from one client to the leader.
void LatencyRound(Cluster& c, int writes, Row* row) {
  const int leader = c.WaitLeader(20s);
  if (leader < 0) return;
  const std::string value(64, 'v');
  for (int i = 0; i < writes; ++i) {
    const auto t0 = Clock::now();
    if (c.put(leader, "k" + std::to_string(i % 100), value, 2000ms))
      row->latencies.push_back(Ms(Clock::now() - t0));
  }
}

// One round of `clients` concurrent writers for `seconds`.
void ThroughputRound(Cluster& c, int clients, double seconds, Row* row) {
  const int leader = c.WaitLeader(20s);
  if (leader < 0) return;
  const std::string value(64, 'v');
  std::atomic<long> done{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> ts;
  const auto t0 = Clock::now();
  for (int t = 0; t < clients; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i)
        if (c.put(leader, "c" + std::to_string(t) + "-" + std::to_string(i % 100), value, 2000ms))
          done.fetch_add(1);
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : ts) t.join();
  row->round_rates.push_back(double(done.load()) /
                             std::chrono::duration<double>(Clock::now() - t0).count());
}

// Kills the leader and times until a write commits through a surviving member; restarts it.
void FailoverRound(Cluster& c, int round, Row* row) {
  const int leader = c.WaitLeader(20s);
  if (leader < 0) return;
  std::this_thread::sleep_for(300ms);  // steady state: followers heard heartbeats recently
  const auto t_kill = Clock::now();
  Kill(c.pids[size_t(leader)]);
  c.pids[size_t(leader)] = -1;
  bool ok = false;
  while (!ok && Clock::now() - t_kill < 10s) {
    for (int m = 0; m < int(c.pids.size()) && !ok; ++m)
      if (m != leader) ok = c.put(m, "failover", std::to_string(round), 100ms);
    if (!ok) std::this_thread::sleep_for(2ms);
  }
  if (ok) row->failovers.push_back(Ms(Clock::now() - t_kill));
  c.pids[size_t(leader)] = c.start(leader);  // rejoins from its data dir
}

// Both clusters run side by side (idle but for heartbeats when not measured) and every kind of
// round alternates between them, so the shared machine's noise falls on both alike.
void Measure(Cluster& a, Cluster& b, int writes, int clients, double seconds, int failovers,
             int rounds, Row* ra, Row* rb) {
  a.StartAll();
  b.StartAll();
  for (Cluster* c : {&a, &b})
    if (c->WaitLeader(20s) < 0)
      std::fprintf(stderr, "%s: no leader within 20 s\n", c->name.c_str());
  for (int r = 0; r < rounds; ++r) {
    LatencyRound(a, writes / rounds, ra);
    LatencyRound(b, writes / rounds, rb);
    ThroughputRound(b, clients, seconds / rounds, rb);
    ThroughputRound(a, clients, seconds / rounds, ra);
    std::fprintf(stderr, "round %d/%d: %s %.0f writes/s, %s %.0f writes/s\n", r + 1, rounds,
                 a.name.c_str(), ra->round_rates.empty() ? 0.0 : ra->round_rates.back(),
                 b.name.c_str(), rb->round_rates.empty() ? 0.0 : rb->round_rates.back());
  }
  for (int r = 0; r < failovers; ++r) {
    FailoverRound(r % 2 ? b : a, r, r % 2 ? rb : ra);
    FailoverRound(r % 2 ? a : b, r, r % 2 ? ra : rb);
    std::fprintf(stderr, "failover %d/%d: %s %.0f ms, %s %.0f ms\n", r + 1, failovers,
                 a.name.c_str(), ra->failovers.empty() ? -1.0 : ra->failovers.back(),
                 b.name.c_str(), rb->failovers.empty() ? -1.0 : rb->failovers.back());
  }
  for (Row* row : {ra, rb}) {
    row->p50 = Percentile(row->latencies, 0.5);
    row->p99 = Percentile(row->latencies, 0.99);
    double sum = 0;
    for (double x : row->round_rates) sum += x;
    row->writes_per_s = row->round_rates.empty() ? 0 : sum / double(row->round_rates.size());
    row->failover_ms = Percentile(row->failovers, 0.5);
  }
  a.StopAll();
  b.StopAll();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Raft: adam controller vs etcd, 3 members each on loopback"};
  std::string adam = ADAM_BINARY, etcd = "etcd", json_path,
              job = std::string(ADAM_SOURCE_DIR) + "/examples/fashion-mnist.yaml";
  int writes = 2000, clients = 16, failovers = 5, rounds = 5, tick_ms = 10;
  double seconds = 5;
  app.add_option("--adam", adam, "adam executable");
  app.add_option("--etcd", etcd, "etcd executable");
  app.add_option("--job", job, "AdamJob the controllers bootstrap from");
  app.add_option("--writes", writes, "sequential writes for the latency rows");
  app.add_option("--clients", clients, "concurrent clients for the throughput row");
  app.add_option("--seconds", seconds, "length of the throughput run");
  app.add_option("--failovers", failovers, "leader kills per system");
  app.add_option("--rounds", rounds, "alternating rounds the writes and seconds are split into");
  app.add_option("--json", json_path, "write the results here");
  app.add_option("--tick-ms", tick_ms,
                 "our Raft tick; the election timeout stays 200 ms, heartbeats 20 ms")
      ->check(CLI::IsMember({5, 10, 20}));
  CLI11_PARSE(app, argc, argv);

  const std::string root =
      (std::filesystem::temp_directory_path() / ("adam-raft-bench-" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(root);
  std::fprintf(stderr, "raft_bench: state and logs in %s\n", root.c_str());

  // ---- ours ----
  Cluster ours;
  ours.name = "adam";
  std::string members;
  for (int i = 0; i < 3; ++i) {
    ours.client_addresses.push_back("127.0.0.1:" + std::to_string(adam::FreePort()));
    if (i > 0) members += ',';
    members += std::to_string(i + 1) + "=" + ours.client_addresses.back();
  }
  std::vector<std::unique_ptr<adam::v1::Controller::Stub>> stubs;
  for (const auto& a : ours.client_addresses)
    stubs.push_back(adam::v1::Controller::NewStub(
        adam::net::MakeChannel(*adam::net::Transport::Plaintext(), a)));
  ours.start = [&](int m) {
    return Spawn({adam, "controller", "--plaintext", "--job", job, "--id", std::to_string(m + 1),
                  "--members", members, "--state-dir", root + "/adam-" + std::to_string(m),
                  "--tick-ms", std::to_string(tick_ms), "--election-ticks",
                  std::to_string(200 / tick_ms), "--name", "controller-" + std::to_string(m + 1)},
                 root + "/adam-" + std::to_string(m) + ".log");
  };
  ours.put = [&](int m, const std::string& k, const std::string& v, std::chrono::milliseconds d) {
    adam::v1::KeyValue kv;
    kv.set_key(k);
    kv.set_value(v);
    adam::v1::PutResponse r;
    grpc::ClientContext ctx;
    adam::net::SetDeadline(&ctx, d);
    return stubs[size_t(m)]->Put(&ctx, kv, &r).ok();
  };
  ours.leader = [&]() {
    for (int m = 0; m < 3; ++m) {
      adam::v1::ControllerStatus s;
      grpc::ClientContext ctx;
      adam::net::SetDeadline(&ctx, 200ms);
      if (stubs[size_t(m)]->GetStatus(&ctx, {}, &s).ok() && s.role() == "leader") return m;
    }
    return -1;
  };

  // ---- etcd ----
  Cluster ec;
  ec.name = "etcd";
  std::vector<std::string> peer_urls;
  std::string initial;
  for (int i = 0; i < 3; ++i) {
    ec.client_addresses.push_back("127.0.0.1:" + std::to_string(adam::FreePort()));
    peer_urls.push_back("http://127.0.0.1:" + std::to_string(adam::FreePort()));
    if (i > 0) initial += ',';
    initial += "e" + std::to_string(i) + "=" + peer_urls.back();
  }
  std::vector<std::unique_ptr<etcdserverpb::KV::Stub>> kv;
  std::vector<std::unique_ptr<etcdserverpb::Maintenance::Stub>> mt;
  for (const auto& a : ec.client_addresses) {
    auto ch = adam::net::MakeChannel(*adam::net::Transport::Plaintext(), a);
    kv.push_back(etcdserverpb::KV::NewStub(ch));
    mt.push_back(etcdserverpb::Maintenance::NewStub(ch));
  }
  ec.start = [&](int m) {
    const std::string dir = root + "/etcd-" + std::to_string(m);
    const bool fresh = !std::filesystem::exists(dir);
    return Spawn({etcd,
                  "--name",
                  "e" + std::to_string(m),
                  "--data-dir",
                  dir,
                  "--listen-client-urls",
                  "http://" + ec.client_addresses[size_t(m)],
                  "--advertise-client-urls",
                  "http://" + ec.client_addresses[size_t(m)],
                  "--listen-peer-urls",
                  peer_urls[size_t(m)],
                  "--initial-advertise-peer-urls",
                  peer_urls[size_t(m)],
                  "--initial-cluster",
                  initial,
                  "--initial-cluster-state",
                  fresh ? "new" : "existing",
                  "--initial-cluster-token",
                  "adam-bench",
                  "--heartbeat-interval",
                  "20",
                  "--election-timeout",
                  "200",
                  "--log-level",
                  "warn"},
                 dir + ".log");
  };
  ec.put = [&](int m, const std::string& k, const std::string& v, std::chrono::milliseconds d) {
    etcdserverpb::PutRequest req;
    req.set_key(k);
    req.set_value(v);
    etcdserverpb::PutResponse r;
    grpc::ClientContext ctx;
    adam::net::SetDeadline(&ctx, d);
    return kv[size_t(m)]->Put(&ctx, req, &r).ok();
  };
  ec.leader = [&]() {
    for (int m = 0; m < 3; ++m) {
      etcdserverpb::StatusResponse s;
      grpc::ClientContext ctx;
      adam::net::SetDeadline(&ctx, 200ms);
      if (mt[size_t(m)]->Status(&ctx, {}, &s).ok() && s.leader() != 0 &&
          s.leader() == s.header().member_id())
        return m;
    }
    return -1;
  };

  Row a, e;
  Measure(ours, ec, writes, clients, seconds, failovers, rounds, &a, &e);

  auto ratio = [](double x, double y) { return y > 0 ? x / y : 0.0; };
  std::printf("\n%-34s %12s %12s %10s\n", "Raft, 3 members on loopback", "adam", "etcd",
              "adam/etcd");
  std::printf("%-34s %12.2f %12.2f %9.2fx\n", "commit latency p50 (ms)", a.p50, e.p50,
              ratio(a.p50, e.p50));
  std::printf("%-34s %12.2f %12.2f %9.2fx\n", "commit latency p99 (ms)", a.p99, e.p99,
              ratio(a.p99, e.p99));
  std::printf("%-34s %12.0f %12.0f %9.2fx\n",
              ("throughput, " + std::to_string(clients) + " clients (writes/s)").c_str(),
              a.writes_per_s, e.writes_per_s, ratio(a.writes_per_s, e.writes_per_s));
  std::printf("%-34s %12.0f %12.0f %9.2fx\n", "leader failover, median (ms)", a.failover_ms,
              e.failover_ms, ratio(a.failover_ms, e.failover_ms));
  std::printf("(latency and failover: lower is better; throughput: higher is better)\n");
  if (!json_path.empty()) {
    nlohmann::json j = {{"ours_commit_p50_ms", a.p50},
                        {"etcd_commit_p50_ms", e.p50},
                        {"ours_commit_p99_ms", a.p99},
                        {"etcd_commit_p99_ms", e.p99},
                        {"ours_writes_per_s", a.writes_per_s},
                        {"etcd_writes_per_s", e.writes_per_s},
                        {"ours_failover_ms", a.failover_ms},
                        {"etcd_failover_ms", e.failover_ms},
                        {"ours_failovers_ms", a.failovers},
                        {"etcd_failovers_ms", e.failovers},
                        {"clients", clients},
                        {"writes", writes},
                        {"rounds", rounds},
                        {"ours_round_writes_per_s", a.round_rates},
                        {"etcd_round_writes_per_s", e.round_rates},
                        {"election_timeout_ms", 200},
                        {"heartbeat_ms", 20},
                        {"ours_tick_ms", tick_ms}};
    std::ofstream(json_path) << j.dump(2) << "\n";
  }
  const bool ok = a.p50 > 0 && e.p50 > 0 && a.writes_per_s > 0 && e.writes_per_s > 0;
  if (ok) {
    std::error_code ec_rm;
    std::filesystem::remove_all(root, ec_rm);
  } else {
    std::fprintf(stderr, "raft_bench: a system did not run; logs kept in %s\n", root.c_str());
  }
  return ok ? 0 : 1;
}
