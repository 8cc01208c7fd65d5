// `adam evaluate` and `adam predict` (see model_commands.h).
#include "cli/model_commands.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/exit_codes.h"
#include "core/file.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "model/network.h"
#include "model/onnx.h"

namespace adam::cli {
namespace {

constexpr int kBatch = 100;

struct Loaded {
  model::ImportedModel model;
  std::unique_ptr<model::ModelLayout> layout;
  // How an image meets the input: as the job fitted its test set.
  data::InputFit Fit() const {
    const auto& in = model.model.input;
    return {in.channels, in.height, in.width, data::FitNamed(model.fit.fit), model.fit.crop_margin};
  }
  const std::string& Name(int c) const { return model.classes[size_t(c)]; }
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

bool IsImage(const std::string& bytes) {
  return bytes.rfind("\x89PNG", 0) == 0 || bytes.rfind("\xff\xd8\xff", 0) == 0;
}

// What predict classifies: every image's pixels (the model's input) and its name.
struct Batch {
  std::vector<uint8_t> pixels;
  std::vector<std::string> names;
  bool failed = false;  // an input could not be read (said on stderr)
};

void Refuse(Batch* b, const std::string& what) {
  std::fprintf(stderr, "adam predict: %s\n", what.c_str());
  b->failed = true;
}

// An IDX file's first `first` images (all when 0), named FILE[i].
void AddIdx(const Loaded& l, const std::string& path, int first, Batch* b) {
  auto arr = data::ReadIdx(path);
  if (!arr.ok()) return Refuse(b, arr.status().message());
  data::Dataset d;
  if (arr->dims.size() != 3 && arr->dims.size() != 4)
    return Refuse(b, path + ": " + std::to_string(arr->dims.size()) +
                         " dims; images have 3 (N, H, W) or 4 (N, C, H, W)");
  d.count = int(arr->dims[0]);
  d.channels = arr->dims.size() == 4 ? int(arr->dims[1]) : 1;
  d.height = int(arr->dims[arr->dims.size() - 2]);
  d.width = int(arr->dims.back());
  if (!ShapeMatches(l, d, path)) {
    b->failed = true;
    return;
  }
  const int count = first > 0 ? std::min(first, d.count) : d.count;
  b->pixels.insert(b->pixels.end(), arr->data.begin(),
                   arr->data.begin() + ptrdiff_t(count) * ptrdiff_t(d.image_bytes()));
  for (int i = 0; i < count; ++i) b->names.push_back(path + "[" + std::to_string(i) + "]");
}

void AddImage(const Loaded& l, const std::string& path, const std::string& bytes, Batch* b) {
  auto px = data::DecodeTestImage(bytes, l.Fit());
  if (!px.ok()) return Refuse(b, path + ": " + px.status().message());
  b->pixels.insert(b->pixels.end(), px->begin(), px->end());
  b->names.push_back(path);
}

// Every input: a folder's images (walked as the data server walks a class folder), an image
// file, or an IDX file.
Batch Gather(const Loaded& l, const ModelCommandOptions& o) {
  Batch b;
  for (const auto& path : o.inputs) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      int other = 0;
      auto files = data::ListImageFiles(path, &other);
      if (!files.ok()) {
        Refuse(&b, files.status().message());
        continue;
      }
      if (files->empty()) Refuse(&b, path + ": holds no .png, .jpg or .jpeg file");
      for (const auto& f : *files) {
        auto bytes = ReadWholeFile(f);
        if (!bytes) Refuse(&b, f + ": cannot read it");
        if (bytes) AddImage(l, f, *bytes, &b);
      }
      continue;
    }
    auto bytes = ReadWholeFile(path);
    if (!bytes) {
      Refuse(&b, path + ": cannot read it");
    } else if (IsImage(*bytes)) {
      AddImage(l, path, *bytes, &b);
    } else {
      AddIdx(l, path, o.first, &b);
    }
  }
  return b;
}

}  // namespace

int Predict(const ModelCommandOptions& o) {
  Loaded l;
  if (!Load(o.model, &l)) return kExitInvalid;
  if (o.inputs.empty()) {
    std::fprintf(stderr, "adam predict: give images: PNG or JPEG files, folders, IDX files\n");
    return kExitInvalid;
  }
  const Batch b = Gather(l, o);
  const int count = int(b.names.size());
  const int classes = l.layout->classes();
  const int top = std::clamp(o.top, 1, classes);
  nlohmann::json rows = nlohmann::json::array();
  if (!Classify(l, b.pixels.data(), count, [&](int i, const float* p) {
        std::vector<int> order(static_cast<size_t>(classes));
        for (int c = 0; c < classes; ++c) order[size_t(c)] = c;
        std::partial_sort(order.begin(), order.begin() + top, order.end(),
                          [p](int a, int c) { return p[a] > p[c] || (p[a] == p[c] && a < c); });
        if (o.json) {
          nlohmann::json best = nlohmann::json::array();
          for (int k = 0; k < top; ++k)
            best.push_back({{"class", l.Name(order[size_t(k)])},
                            {"label", order[size_t(k)]},
                            {"probability", p[order[size_t(k)]]}});
          rows.push_back({{"image", i},
                          {"file", b.names[size_t(i)]},
                          {"class", l.Name(order[0])},
                          {"label", order[0]},
                          {"probability", p[order[0]]},
                          {"top", std::move(best)},
                          {"probabilities", std::vector<float>(p, p + classes)}});
          return;
        }
        std::string line = b.names[size_t(i)] + ": ";
        for (int k = 0; k < top; ++k) {
          char prob[32];
          std::snprintf(prob, sizeof prob, " (%.4f)", p[order[size_t(k)]]);
          line += (k == 0 ? "" : k == 1 ? ", then " : ", ") + l.Name(order[size_t(k)]) + prob;
        }
        std::printf("%s\n", line.c_str());
      }))
    return 1;
  if (o.json) std::printf("%s\n", rows.dump().c_str());
  return b.failed ? kExitInvalid : 0;
}

namespace {

// A labelled test set (labels the model's) and where it came from.
struct TestSet {
  data::Dataset data;
  std::string source;
};

// The folder's class folders matched to the model's classes by name (a model that names none,
// "0", "1", ..., takes them in order when they are as many).
bool LoadFolderSet(const Loaded& l, const ModelCommandOptions& o, TestSet* out) {
  data::FolderOptions fo;
  fo.max_corrupt = o.max_corrupt;
  auto set = data::LoadTestFolder(o.folder, l.Fit(), fo);
  if (!set.ok()) {
    std::fprintf(stderr, "adam evaluate: %s\n", set.status().message().c_str());
    return false;
  }
  for (const auto& s : set->skipped) std::fprintf(stderr, "adam evaluate: skipped %s\n", s.c_str());
  const int classes = l.layout->classes();
  std::map<std::string, int> label;
  for (int c = 0; c < classes; ++c) label[l.Name(c)] = c;
  std::vector<uint8_t> to(set->classes.size());
  const bool numbered = l.Name(0) == "0" && label.count(std::to_string(classes - 1)) > 0;
  for (size_t k = 0; k < set->classes.size(); ++k) {
    auto it = label.find(set->classes[k]);
    if (it != label.end()) {
      to[k] = uint8_t(it->second);
    } else if (numbered && int(set->classes.size()) == classes) {
      to[k] = uint8_t(k);
    } else {
      std::fprintf(stderr,
                   "adam evaluate: %s: class folder \"%s\" is not one of the model's %d "
                   "classes\n",
                   o.folder.c_str(), set->classes[k].c_str(), classes);
      return false;
    }
  }
  for (auto& y : set->data.labels) y = to[y];
  out->data = std::move(set->data);
  out->source = o.folder;
  return true;
}

bool LoadIdxSet(const Loaded& l, const ModelCommandOptions& o, TestSet* out) {
  if (o.images.empty() || o.labels.empty()) {
    std::fprintf(stderr, "adam evaluate: give --folder DIR, or --images and --labels\n");
    return false;
  }
  auto d = data::LoadIdxDataset(o.images, o.labels, l.layout->classes());
  if (!d.ok()) {
    std::fprintf(stderr, "adam evaluate: %s\n", d.status().message().c_str());
    return false;
  }
  if (!ShapeMatches(l, *d, o.images)) return false;
  out->data = std::move(*d);
  out->source = o.images;
  return true;
}

using Confusion = std::vector<std::vector<int64_t>>;  // [true][predicted]

struct ClassFigures {
  int64_t images = 0;     // of the class
  int64_t predicted = 0;  // classified as the class
  int64_t right = 0;
  double Precision() const { return predicted > 0 ? double(right) / double(predicted) : 0.0; }
  double Recall() const { return images > 0 ? double(right) / double(images) : 0.0; }
};

std::vector<ClassFigures> PerClass(const Confusion& confusion) {
  std::vector<ClassFigures> out(confusion.size());
  for (size_t c = 0; c < confusion.size(); ++c) {
    for (size_t k = 0; k < confusion.size(); ++k) {
      out[c].images += confusion[c][k];
      out[c].predicted += confusion[k][c];
    }
    out[c].right = confusion[c][c];
  }
  return out;
}

void PrintText(const Loaded& l, const std::string& model, const TestSet& t, int64_t correct,
               const Confusion& confusion) {
  const int classes = l.layout->classes();
  const int n = t.data.count;
  std::printf("%s: %lld of %d images right: accuracy %.2f%%\n", model.c_str(),
              static_cast<long long>(correct), n, n > 0 ? 100.0 * double(correct) / n : 0.0);
  int width = 5;
  for (int c = 0; c < classes; ++c) width = std::max(width, int(l.Name(c).size()));
  std::printf("%-*s %8s %10s %8s\n", width, "class", "images", "precision", "recall");
  const auto figures = PerClass(confusion);
  auto pct = [](double v, int64_t of) {
    char s[16];
    std::snprintf(s, sizeof s, "%.2f%%", 100.0 * v);
    return of > 0 ? std::string(s) : std::string("-");
  };
  for (int c = 0; c < classes; ++c) {
    const ClassFigures& f = figures[size_t(c)];
    std::printf("%-*s %8lld %10s %8s\n", width, l.Name(c).c_str(), static_cast<long long>(f.images),
                pct(f.Precision(), f.predicted).c_str(), pct(f.Recall(), f.images).c_str());
  }
  std::printf("confusion matrix (rows: true class, columns: predicted, in the order above)\n");
  for (int r = 0; r < classes; ++r) {
    std::printf("%-*s", width, l.Name(r).c_str());
    for (int c = 0; c < classes; ++c)
      std::printf(" %6lld", static_cast<long long>(confusion[size_t(r)][size_t(c)]));
    std::printf("\n");
  }
}

nlohmann::json Json(const Loaded& l, const std::string& model, const TestSet& t, int64_t correct,
                    const Confusion& confusion) {
  const auto figures = PerClass(confusion);
  nlohmann::json per = nlohmann::json::array();
  for (size_t c = 0; c < figures.size(); ++c)
    per.push_back({{"class", l.Name(int(c))},
                   {"images", figures[c].images},
                   {"correct", figures[c].right},
                   {"precision", figures[c].Precision()},
                   {"recall", figures[c].Recall()}});
  return {{"model", model},
          {"images", t.data.count},
          {"correct", correct},
          {"accuracy", t.data.count > 0 ? double(correct) / t.data.count : 0.0},
          {"classes", std::move(per)},
          {"confusion", confusion}};
}

}  // namespace

int Evaluate(const ModelCommandOptions& o) {
  Loaded l;
  if (!Load(o.model, &l)) return kExitInvalid;
  TestSet t;
  if (!(o.folder.empty() ? LoadIdxSet(l, o, &t) : LoadFolderSet(l, o, &t))) return kExitInvalid;
  const int classes = l.layout->classes();
  Confusion confusion(size_t(classes), std::vector<int64_t>(static_cast<size_t>(classes)));
  int64_t correct = 0;
  if (!Classify(l, t.data.pixels.data(), t.data.count, [&](int i, const float* p) {
        const int pred = int(std::max_element(p, p + classes) - p);
        const uint8_t y = t.data.labels[size_t(i)];
        ++confusion[y][size_t(pred)];
        correct += pred == y;
      }))
    return 1;
  if (o.json)
    std::printf("%s\n", Json(l, o.model, t, correct, confusion).dump().c_str());
  else
    PrintText(l, o.model, t, correct, confusion);
  return 0;
}

}  // namespace adam::cli
