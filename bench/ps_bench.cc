// Parameter-server benchmark: update application against a STREAM-style triad in the same run,
// push and pull of 1 MiB shards through gRPC on loopback, and the bytes of Adam's two dense-layer
// protocols for the example job. Prints a table to stderr and writes JSON (--json PATH).
//
//   ps_bench [--threads N] [--shards 32] [--updates 8] [--seconds 3] [--json build/bench/ps.json]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "model/layout.h"
#include "net/grpc.h"
#include "param_server/buffer_pool.h"
#include "param_server/clock_gate.h"
#include "param_server/param_service.h"
#include "param_server/param_store.h"
#include "spec/adamjob.h"
#include "topology/topology.h"
#include "update/update_plan.h"

using Steady = std::chrono::steady_clock;
using namespace adam;

namespace {

double Seconds(Steady::time_point a, Steady::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// a = b + s * c over `n` floats per array, each thread on its own slice (first-touched by it);
// GB/s counted STREAM's way (two reads and one write per element).
double TriadGbps(int threads, int64_t n, int reps) {
  std::vector<float*> a(static_cast<size_t>(threads)), b(static_cast<size_t>(threads)),
      c(static_cast<size_t>(threads));
  const int64_t per = n / threads;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (auto* v : {&a, &b, &c}) {
        (*v)[size_t(t)] = static_cast<float*>(std::aligned_alloc(64, size_t(per) * 4));
        std::fill_n((*v)[size_t(t)], per, 1.f);
      }
    });
  for (auto& th : ts) th.join();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    std::atomic<int> go{0};
    ts.clear();

    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        float* __restrict x = a[size_t(t)];
        const float* __restrict y = b[size_t(t)];
        const float* __restrict z = c[size_t(t)];
        go.fetch_add(1);
        while (go.load() < threads) {
        }
        for (int64_t i = 0; i < per; ++i) x[i] = y[i] + 0.5f * z[i];
      });
    const auto t0 = Steady::now();
    for (auto& th : ts) th.join();
    best = std::min(best, Seconds(t0, Steady::now()));
  }
  for (int t = 0; t < threads; ++t)
    for (auto* v : {&a, &b, &c}) std::free((*v)[size_t(t)]);
  return 3.0 * double(per * threads) * 4 / best / 1e9;
}

struct ApplyResult {
  double gbps = 0;
  double updates_per_second = 0;
};

// `shards` shards of 1 MiB on one server with `threads` shard workers; each round queues
// `updates` full-shard updates per shard from `threads` producers and waits until all are applied.
ApplyResult ApplyGbps(int threads, int shards, int updates, int reps) {
  const int64_t per = (1 << 20) / 4;
  auto map = shard::ShardMap::Make(per * shards, 1 << 20, 1, 1);
  std::vector<float> init(size_t(per * shards), 0.f);
  ps::ParamStore store(*map, 0, init.data(), {.threads = threads, .bind = true});
  ps::BufferPool pool;
  std::vector<ps::BufferPool::Buffer> bufs;
  for (int i = 0; i < shards * updates; ++i) {
    bufs.push_back(pool.Get(size_t(per) * 4));
    std::fill_n(bufs.back().as<float>(), per, 1e-6f);
  }
  std::vector<ps::Op> ops(size_t(shards * updates));
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    std::promise<void> done;
    ps::Completion completion(int(ops.size()), [&] { done.set_value(); });
    for (size_t i = 0; i < ops.size(); ++i) {
      ops[i] = {};
      ops[i].shard = uint32_t(i % size_t(shards));
      ops[i].count = per;
      ops[i].values = bufs[i].as<float>();
      ops[i].done = &completion;
    }
    const auto t0 = Steady::now();
    std::vector<std::thread> producers;
    const size_t chunk = (ops.size() + size_t(threads) - 1) / size_t(threads);
    for (int t = 0; t < threads; ++t)
      producers.emplace_back([&, t] {
        const size_t lo = size_t(t) * chunk, hi = std::min(ops.size(), lo + chunk);
        if (lo < hi) store.Submit(ops.data() + lo, hi - lo);
      });
    for (auto& p : producers) p.join();
    done.get_future().wait();
    best = std::min(best, Seconds(t0, Steady::now()));
  }
  const double bytes = double(ops.size()) * double(per) * 4;
  return {bytes / best / 1e9, double(ops.size()) / best};
}

struct RpcResult {
  double gbps = 0, p50_ms = 0, p99_ms = 0;
  int64_t calls = 0;
};

RpcResult Percentiles(std::vector<double> lat, double bytes, double seconds) {
  RpcResult r;
  std::sort(lat.begin(), lat.end());
  r.calls = int64_t(lat.size());
  if (!lat.empty()) {
    r.p50_ms = lat[lat.size() / 2] * 1e3;
    r.p99_ms = lat[std::min(lat.size() - 1, lat.size() * 99 / 100)] * 1e3;
  }
  r.gbps = bytes / seconds / 1e9;
  return r;
}

// Pushes (or pulls) of one 1 MiB shard from `clients` threads for `seconds`.
RpcResult RpcBench(bool push, int clients, double seconds, const std::string& address,
                   const std::vector<uint32_t>& ids) {
  std::vector<std::vector<double>> lat(static_cast<size_t>(clients));
  std::atomic<int64_t> bytes{0};
  std::vector<std::thread> ts;
  const auto start = Steady::now();
  for (int c = 0; c < clients; ++c)
    ts.emplace_back([&, c] {
      auto stub = adam::v1::ParameterService::NewStub(
          net::MakeChannel(*net::Transport::Plaintext(), address));
      adam::v1::PushRequest preq;
      auto* d = preq.add_deltas();
      d->set_shard(ids[size_t(c) % ids.size()]);
      d->set_values(std::string(1 << 20, '\0'));
      adam::v1::PullRequest lreq;
      lreq.add_shards(ids[size_t(c) % ids.size()]);
      while (Seconds(start, Steady::now()) < seconds) {
        grpc::ClientContext ctx;
        const auto t0 = Steady::now();
        grpc::Status st;
        if (push) {
          adam::v1::PushResponse resp;
          st = stub->Push(&ctx, preq, &resp);
        } else {
          adam::v1::PullResponse resp;
          st = stub->Pull(&ctx, lreq, &resp);
        }
        if (!st.ok()) {
          std::fprintf(stderr, "rpc failed: %s\n", st.error_message().c_str());
          return;
        }
        lat[size_t(c)].push_back(Seconds(t0, Steady::now()));
        bytes += 1 << 20;
      }
    });
  for (auto& t : ts) t.join();
  std::vector<double> all;
  for (auto& l : lat) all.insert(all.end(), l.begin(), l.end());
  return Percentiles(all, double(bytes.load()), Seconds(start, Steady::now()));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Parameter-server benchmark"};
  int threads = 0, shards = 32, updates = 8, reps = 5, clients = 4;
  double seconds = 3;
  std::string json_path, job_path = "examples/fashion-mnist.yaml";
  app.add_option("--threads", threads,
                 "threads for triad and shard workers (default: usable cores)");
  app.add_option("--shards", shards, "1 MiB shards in the apply benchmark");
  app.add_option("--updates", updates, "queued updates per shard per round");
  app.add_option("--reps", reps, "rounds (best is reported)");
  app.add_option("--clients", clients, "gRPC client threads");
  app.add_option("--seconds", seconds, "seconds per gRPC measurement");
  app.add_option("--job", job_path, "job whose dense-layer protocol bytes are reported");
  app.add_option("--json", json_path, "write the results here");
  CLI11_PARSE(app, argc, argv);
  if (threads <= 0) {
    auto topo = topology::Topology::Discover();
    threads = topo.ok() ? int(topo->cores().size()) : 1;
  }

  std::fprintf(stderr, "parameter server benchmark: %d threads\n", threads);
  // Triad and apply alternate, one round each at a time, so both see the same machine (these
  // machines are shared): the ratio is the median of the rounds' ratios.
  std::fprintf(stderr,
               "  %d rounds of: triad (3 x 192 MiB), apply (%d shards x %d updates of 1 MiB)\n",
               reps, shards, updates);
  double triad = 0;
  ApplyResult apply;
  std::vector<double> ratios;
  for (int r = 0; r < reps; ++r) {
    const double t = TriadGbps(threads, int64_t{64} << 20 >> 2, 1);
    const ApplyResult a = ApplyGbps(threads, shards, updates, 1);
    std::fprintf(stderr, "    round %d: triad %.2f GB/s, apply %.2f GB/s (%.2fx)\n", r + 1, t,
                 a.gbps, a.gbps / t);
    triad = std::max(triad, t);
    if (a.gbps > apply.gbps) apply = a;
    ratios.push_back(a.gbps / t);
  }
  std::sort(ratios.begin(), ratios.end());
  const double ratio = ratios[ratios.size() / 2];

  // gRPC on loopback: one server with 16 shards of 1 MiB.
  const int64_t per = (1 << 20) / 4;
  auto map = shard::ShardMap::Make(per * 16, 1 << 20, 1, 1);
  std::vector<float> init(size_t(per * 16), 0.f);
  ps::ParamStore store(*map, 0, init.data(), {.threads = threads});
  ps::ClockGate gate(1, spec::Consistency::kAsync, 0);
  ps::BufferPool pool;
  spec::ModelSpec ms;
  ms.input = {1, 1, 1};
  spec::LayerSpec sm;
  sm.type = spec::LayerType::kSoftmax;
  sm.classes = 2;
  ms.layers = {sm};
  auto tiny = model::ModelLayout::Make(ms);
  auto plan = update::UpdatePlan::Make(*tiny, *map, 1, spec::DenseUpdates::kWeights);
  ps::ParamService service(&store, &gate, &plan, 0, &pool, {});
  auto server = net::StartServer(*net::Transport::Plaintext(), "127.0.0.1:0", {&service});
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().message().c_str());
    return 1;
  }
  const std::string address = "127.0.0.1:" + std::to_string(server->port);
  std::fprintf(stderr, "  gRPC push/pull of 1 MiB shards, %d clients, %.0f s each ...\n", clients,
               seconds);
  const RpcResult push = RpcBench(true, clients, seconds, address, store.shard_ids());
  const RpcResult pull = RpcBench(false, clients, seconds, address, store.shard_ids());
  server->server->Shutdown();

  // Dense-layer protocol bytes for the example job's model, at its pushEvery and server count and
  // around them.
  nlohmann::json dense_json;
  std::string dense_table;
  if (auto job = spec::LoadAdamJob(job_path); job.ok()) {
    auto layout = model::ModelLayout::Make(job->model);
    const auto& role = job->roles.parameter_server;
    auto bytes_for = [&](int servers, int push_every) {
      auto m = shard::ShardMap::Make(layout->num_params(), role.shard_bytes, servers,
                                     job->training.seed);
      return update::UpdatePlan::Make(*layout, *m, push_every, spec::DenseUpdates::kAuto)
          .DenseBytes(push_every);
    };
    const auto b = bytes_for(role.replicas, job->training.push_every);
    dense_json = {{"job", job_path},
                  {"push_every", job->training.push_every},
                  {"servers", role.replicas},
                  {"weights_bytes", b.weights},
                  {"activations_bytes", b.activations},
                  {"planned_bytes", b.planned}};
    char line[160];
    std::snprintf(line, sizeof line,
                  "\ndense-layer bytes per push, auto protocol / weight deltas (%s):\n%-10s",
                  job_path.c_str(), "servers");
    dense_table += line;
    for (int k : {25, 50, 100, 200}) {
      std::snprintf(line, sizeof line, " %12s", ("k=" + std::to_string(k)).c_str());
      dense_table += line;
    }
    dense_table += "\n";
    for (int servers : {1, 2, 4}) {
      std::snprintf(line, sizeof line, "%-10d", servers);
      dense_table += line;
      for (int k : {25, 50, 100, 200}) {
        const auto x = bytes_for(servers, k);
        std::snprintf(line, sizeof line, " %12.2f", double(x.planned) / double(x.weights));
        dense_table += line;
      }
      dense_table += "\n";
    }
  }

  std::fprintf(stderr, "\n%-44s %12s\n", "measure", "value");
  std::fprintf(stderr, "%-44s %9.2f GB/s\n", "STREAM-style triad (all threads)", triad);
  std::fprintf(stderr, "%-44s %9.2f GB/s  (median of rounds: %.2fx triad)\n",
               "update application (batched, all threads)", apply.gbps, ratio);
  std::fprintf(stderr, "%-44s %9.2f GB/s  p50 %.2f ms  p99 %.2f ms\n",
               "gRPC push of 1 MiB (loopback)", push.gbps, push.p50_ms, push.p99_ms);
  std::fprintf(stderr, "%-44s %9.2f GB/s  p50 %.2f ms  p99 %.2f ms\n",
               "gRPC pull of 1 MiB (loopback)", pull.gbps, pull.p50_ms, pull.p99_ms);
  if (!dense_json.is_null())
    std::fprintf(
        stderr,
        "dense layers per push of %d images on %d servers: weights %.0f KB, "
        "activations+errors %.0f KB, as planned %.0f KB (%.2fx of weights)\n",
        dense_json["push_every"].get<int>(), dense_json["servers"].get<int>(),
        dense_json["weights_bytes"].get<double>() / 1e3,
        dense_json["activations_bytes"].get<double>() / 1e3,
        dense_json["planned_bytes"].get<double>() / 1e3,
        dense_json["planned_bytes"].get<double>() / dense_json["weights_bytes"].get<double>());
  std::fprintf(stderr, "%s", dense_table.c_str());

  nlohmann::json out = {{"threads", threads},
                        {"triad_gbps", triad},
                        {"apply_gbps", apply.gbps},
                        {"apply_vs_triad", ratio},
                        {"apply_updates_per_second", apply.updates_per_second},
                        {"push_gbps", push.gbps},
                        {"push_p50_ms", push.p50_ms},
                        {"push_p99_ms", push.p99_ms},
                        {"pull_gbps", pull.gbps},
                        {"pull_p50_ms", pull.p50_ms},
                        {"pull_p99_ms", pull.p99_ms},
                        {"dense_protocol", dense_json}};
  std::printf("%s\n", out.dump().c_str());
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}
