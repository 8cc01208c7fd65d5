// `adam evaluate` and `adam predict` (see model_commands.h).
#include "cli/model_commands.h"

#include <png.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
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
    for (int k = 0; k < net->batch(); ++k)
      each(i + k, net->probabilities() + ptrdiff_t(k) * classes);
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

bool IsPng(const std::string& path) {
  std::string ext = path.size() >= 4 ? path.substr(path.size() - 4) : "";
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".png";
}

// Appends one PNG's pixels (libpng's simplified API converts grey or colour, with or without
// alpha, to the model's 1 or 3 channels) as C x H x W bytes to `out`.
bool ReadPng(const std::string& path, const spec::Shape& in, std::vector<uint8_t>* out) {
  if (in.channels != 1 && in.channels != 3) {
    std::fprintf(stderr, "adam predict: %s: the model takes %d channels; PNG input needs 1 or 3\n",
                 path.c_str(), in.channels);
    return false;
  }
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.c_str())) {
    std::fprintf(stderr, "adam predict: %s: not a PNG libpng can read: %s\n", path.c_str(),
                 image.message);
    return false;
  }
  if (int(image.width) != in.width || int(image.height) != in.height) {
    std::fprintf(stderr, "adam predict: %s: %ux%u pixels, the model takes %dx%d (width x height)\n",
                 path.c_str(), image.width, image.height, in.width, in.height);
    png_image_free(&image);
    return false;
  }
  image.format = in.channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  std::vector<uint8_t> hwc(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, hwc.data(), 0, nullptr)) {
    std::fprintf(stderr, "adam predict: %s: %s\n", path.c_str(), image.message);
    return false;
  }
  const size_t plane = size_t(in.height) * size_t(in.width);
  for (int c = 0; c < in.channels; ++c)
    for (size_t p = 0; p < plane; ++p) out->push_back(hwc[p * size_t(in.channels) + size_t(c)]);
  return true;
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
    nlohmann::json j = {{"model", o.model},
                        {"images", d->count},
                        {"correct", correct},
                        {"accuracy", acc},
                        {"confusion", confusion}};
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
  if (o.inputs.empty()) {
    std::fprintf(stderr, "adam predict: give an IDX file or PNG files\n");
    return kExitInvalid;
  }
  data::IdxArray arr_png;
  const bool png = IsPng(o.inputs[0]);
  if (png) {
    const auto& in = l.model.model.input;
    for (const auto& path : o.inputs)
      if (!ReadPng(path, in, &arr_png.data)) return kExitInvalid;
    arr_png.dims = {uint32_t(o.inputs.size()), uint32_t(in.channels), uint32_t(in.height),
                    uint32_t(in.width)};
  } else if (o.inputs.size() > 1) {
    std::fprintf(stderr, "adam predict: %s: more than one file is PNG files only\n",
                 o.inputs[1].c_str());
    return kExitInvalid;
  }
  auto arr = png ? StatusOr<data::IdxArray>(std::move(arr_png)) : data::ReadIdx(o.inputs[0]);
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
                 o.inputs[0].c_str(), arr->dims.size());
    return kExitInvalid;
  }
  if (!ShapeMatches(l, d, o.inputs[0])) return kExitInvalid;
  // Every PNG named; the first N images of an IDX file.
  const int count = !png && o.first > 0 ? std::min(o.first, d.count) : d.count;
  const int classes = l.layout->classes();
  nlohmann::json rows = nlohmann::json::array();
  if (!Classify(l, arr->data.data(), count, [&](int i, const float* p) {
        std::vector<int> order(static_cast<size_t>(classes));
        for (int c = 0; c < classes; ++c) order[size_t(c)] = c;
        std::partial_sort(order.begin(), order.begin() + std::min(2, classes), order.end(),
                          [p](int a, int b) { return p[a] > p[b]; });
        const int top = order[0], next = classes > 1 ? order[1] : order[0];
        if (o.json)
          rows.push_back({{"image", i},
                          {"class", top},
                          {"probability", p[top]},
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
