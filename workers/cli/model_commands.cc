// `adam evaluate` and `adam predict` (see model_commands.h).
#include "cli/model_commands.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "core/exit_codes.h"
#include "data/idx.h"
#include "model/network.h"
#include "model/onnx.h"

namespace adam::cli {
namespace {

constexpr int kBatch = 100;

struct Loaded {
  model::ImportedModel model;
  std::unique_ptr<model::ModelLayout> layout;
};

bool Load(const std::string& path, Loaded* out) {
  auto m = model::ReadOnnxFile(path);
  if (!m.ok()) {
    std::fprintf(stderr, "adam: %s\n", m.status().message().c_str());
    return false;
  }
  auto layout = model::ModelLayout::Make(m->model);
  if (!layout.ok()) {  // ImportOnnx made it once already
    std::fprintf(stderr, "adam: %s: %s\n", path.c_str(), layout.status().message().c_str());
    return false;
  }
  out->model = std::move(*m);
  out->layout = std::make_unique<model::ModelLayout>(std::move(*layout));
  return true;
}

// Runs the model over `count` images; calls `each(i, probabilities)` per image.
template <typename Each>
bool Classify(Loaded& l, const uint8_t* pixels, int count, Each each) {
  const int64_t isz = l.layout->input_size();
  std::unique_ptr<model::Network> nets[2];
  const int batches[2] = {std::min(kBatch, std::max(1, count)), 1};
  for (int k = 0; k < 2; ++k) {
    auto net = model::Network::Create(*l.layout, batches[k], l.model.params.data(), nullptr,
                                      model::NetworkMode::kInference);
    if (!net.ok()) {
      std::fprintf(stderr, "adam: %s\n", net.status().message().c_str());
      return false;
    }
    nets[k] = std::move(*net);
  }
  const int classes = l.layout->classes();
  for (int i = 0; i < count;) {
    model::Network* net = count - i >= nets[0]->batch() ? nets[0].get() : nets[1].get();
    net->SetInputFromBytes(pixels + i * isz);
    net->Forward(nullptr, nullptr);
    for (int k = 0; k < net->batch(); ++k) each(i + k, net->probabilities() + k * classes);
    i += net->batch();
  }
  return true;
}

bool ShapeMatches(const Loaded& l, const data::Dataset& d, const std::string& path) {
  const auto& in = l.model.model.input;
  if (d.channels == in.channels && d.height == in.height && d.width == in.width) return true;
  std::fprintf(stderr, "adam: %s: images are %dx%dx%d, the model takes %dx%dx%d\n", path.c_str(),
               d.channels, d.height, d.width, in.channels, in.height, in.width);
  return false;
}

}  // namespace

int Evaluate(const ModelCommandOptions& o) {
  Loaded l;
  if (!Load(o.model, &l)) return kExitInvalid;
  const int classes = l.layout->classes();
  auto d = data::LoadIdxDataset(o.images, o.labels, classes);
  if (!d.ok()) {
    std::fprintf(stderr, "adam evaluate: %s\n", d.status().message().c_str());
    return kExitInvalid;
  }
  if (!ShapeMatches(l, *d, o.images)) return kExitInvalid;
  // confusion[true][predicted]
  std::vector<std::vector<int64_t>> confusion(static_cast<size_t>(classes),
                                             std::vector<int64_t>(static_cast<size_t>(classes)));
  int64_t correct = 0;
  if (!Classify(l, d->pixels.data(), d->count, [&](int i, const float* p) {
        const int pred = int(std::max_element(p, p + classes) - p);
        ++confusion[d->labels[size_t(i)]][size_t(pred)];
        correct += pred == d->labels[size_t(i)];
      }))
    return 1;
  const double acc = d->count > 0 ? double(correct) / d->count : 0;
  if (o.json) {
    nlohmann::json j = {{"model", o.model},   {"images", d->count}, {"correct", correct},
                        {"accuracy", acc},    {"confusion", confusion}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s: %lld of %d images right: accuracy %.2f%%\n", o.model.c_str(),
              static_cast<long long>(correct), d->count, 100 * acc);
  std::printf("confusion matrix (rows: true class, columns: predicted)\n      ");
  for (int c = 0; c < classes; ++c) std::printf(" %6d", c);
  std::printf("\n");
  for (int t = 0; t < classes; ++t) {
    std::printf("%6d", t);
    for (int c = 0; c < classes; ++c)
      std::printf(" %6lld", static_cast<long long>(confusion[size_t(t)][size_t(c)]));
    std::printf("\n");
  }
  return 0;
}

int Predict(const ModelCommandOptions& o) {
  Loaded l;
  if (!Load(o.model, &l)) return kExitInvalid;
  auto arr = data::ReadIdx(o.images);
  if (!arr.ok()) {
    std::fprintf(stderr, "adam predict: %s\n", arr.status().message().c_str());
    return kExitInvalid;
  }
  data::Dataset d;
  if (arr->dims.size() == 3 || arr->dims.size() == 4) {
    d.count = int(arr->dims[0]);
    d.channels = arr->dims.size() == 4 ? int(arr->dims[1]) : 1;
    d.height = int(arr->dims[arr->dims.size() - 2]);
    d.width = int(arr->dims.back());
  } else {
    std::fprintf(stderr, "adam predict: %s: %zu dims; images have 3 (N, H, W) or 4 (N, C, H, W)\n",
                 o.images.c_str(), arr->dims.size());
    return kExitInvalid;
  }
  if (!ShapeMatches(l, d, o.images)) return kExitInvalid;
  const int count = o.first > 0 ? std::min(o.first, d.count) : d.count;
  const int classes = l.layout->classes();
  nlohmann::json rows = nlohmann::json::array();
  if (!Classify(l, arr->data.data(), count, [&](int i, const float* p) {
        std::vector<int> order(static_cast<size_t>(classes));
        for (int c = 0; c < classes; ++c) order[size_t(c)] = c;
        std::partial_sort(order.begin(), order.begin() + std::min(2, classes), order.end(),
                          [p](int a, int b) { return p[a] > p[b]; });
        const int top = order[0], next = classes > 1 ? order[1] : order[0];
        if (o.json)
          rows.push_back({{"image", i}, {"class", top}, {"probability", p[top]},
                          {"probabilities", std::vector<float>(p, p + classes)}});
        else
          std::printf("image %d: class %d (%.4f), then class %d (%.4f)\n", i, top, p[top], next,
                      p[next]);
      }))
    return 1;
  if (o.json) std::printf("%s\n", rows.dump().c_str());
  return 0;
}

}  // namespace adam::cli
