// How fast pushes and pulls are encoded and decoded in each wire format (update/codec.h), beside
// memcpy of the same float32 bytes in the same run (what an uncompressed message costs to fill),
// for weights (a model's values) and for one push's deltas (mostly tiny changes). Prints a table
// to stderr and writes JSON (--json PATH).
//
//   codec_bench [--floats 1000000] [--seconds 1] [--json build/bench/codec.json]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "update/codec.h"

using Steady = std::chrono::steady_clock;
using namespace adam;

namespace {

// Runs fn until `seconds` have passed; returns its calls per second.
template <typename F>
double Rate(double seconds, F fn) {
  int64_t calls = 0;
  const auto start = Steady::now();
  double took = 0;
  do {
    fn();
    ++calls;
    took = std::chrono::duration<double>(Steady::now() - start).count();
  } while (took < seconds);
  return double(calls) / took;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Encode and decode rates of the wire formats, beside memcpy"};
  size_t floats = 1000000;
  double seconds = 1;
  std::string json_path;
  app.add_option("--floats", floats, "Floats per message");
  app.add_option("--seconds", seconds, "Time per measurement");
  app.add_option("--json", json_path, "Write the results here");
  CLI11_PARSE(app, argc, argv);

  std::mt19937 rng(1);
  std::normal_distribution<float> weight(0.f, 0.05f), delta(0.f, 1e-4f);
  std::vector<float> weights(floats), deltas(floats), out(floats), copy(floats);
  for (auto& w : weights) w = weight(rng);
  for (auto& d : deltas) d = delta(rng);
  const double mb = double(floats) * 4 / 1e6;
  const double memcpy_rate =
      Rate(seconds, [&] { std::memcpy(copy.data(), weights.data(), floats * 4); });
  std::fprintf(stderr, "%zu floats (%.1f MB as float32); memcpy %.0f MB/s\n", floats, mb,
               memcpy_rate * mb);
  std::fprintf(stderr, "%-8s %-14s %10s %12s %12s %14s\n", "values", "format", "bytes/float",
               "encode MB/s", "decode MB/s", "vs memcpy");
  nlohmann::json results = nlohmann::json::array();
  const struct {
    const char* name;
    update::WireFormat format;
  } formats[] = {{"float32", {false, false}},
                 {"float16", {true, false}},
                 {"float32+zstd", {false, true}},
                 {"float16+zstd", {true, true}}};
  for (const auto& [what, values] : {std::pair{"weights", &weights}, std::pair{"deltas", &deltas}})
    for (const auto& f : formats) {
      std::string wire;
      const double enc =
          Rate(seconds, [&] { update::EncodeFloats(values->data(), floats, f.format, &wire); });
      const double dec =
          Rate(seconds, [&] { (void)update::DecodeFloats(wire, f.format, floats, out.data()); });
      const double per_float = double(wire.size()) / double(floats);
      // Encode plus decode against two copies of the float32 message.
      const double vs = (1 / memcpy_rate * 2) / (1 / enc + 1 / dec);
      std::fprintf(stderr, "%-8s %-14s %10.2f %12.0f %12.0f %13.2fx\n", what, f.name, per_float,
                   enc * mb, dec * mb, vs);
      results.push_back({{"values", what},
                         {"format", f.name},
                         {"bytes_per_float", per_float},
                         {"encode_mb_per_s", enc * mb},
                         {"decode_mb_per_s", dec * mb},
                         {"speed_vs_memcpy", vs}});
    }
  if (!json_path.empty()) {
    std::ofstream(json_path) << nlohmann::json{{"floats", floats},
                                               {"memcpy_mb_per_s", memcpy_rate * mb},
                                               {"results", results}}
                                    .dump(2)
                             << "\n";
  }
  return 0;
}
