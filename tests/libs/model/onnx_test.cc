// ONNX export and import (model/onnx.h): the file holds the model Adam trained, ONNX's checker
// accepts it, an ONNX runtime that is not Adam's (OpenCV's) computes what Adam computes, and what
// Adam does not write is refused, naming the node or tensor.
#include "model/onnx.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "model/network.h"
#include "testing/layers.h"
#include "testing/tmp_dir.h"

namespace adam::model {
namespace {

using spec::Activation;
using spec::LayerType;
using ::testing::HasSubstr;

// Every layer kind and activation, a non-square three-channel input, padding and stride.
spec::ModelSpec EveryLayer() {
  auto strided = testing::Conv(5, 2, Activation::kLeakyRelu);
  strided.stride = 2;
  return testing::MakeSpec(
      {testing::Conv(6, 3, Activation::kRelu, 1), testing::Pool(2, LayerType::kAvgPool),
       testing::Conv(5, 3, Activation::kTanh), strided, testing::Pool(1), testing::Dropout(0.3),
       testing::Dense(7, Activation::kSigmoid), testing::Dense(6, Activation::kNone),
       testing::Softmax(4)},
      {3, 18, 14});
}

struct Trained {
  ModelLayout layout;
  std::vector<float> params;
};

Trained Make(const spec::ModelSpec& spec, uint64_t seed) {
  auto layout = ModelLayout::Make(spec);
  EXPECT_TRUE(layout.ok()) << layout.status().message();
  Trained t{*layout, std::vector<float>(size_t(layout->num_params()))};
  t.layout.InitParams(seed, t.params.data());
  // Non-zero biases, so a bias read from the wrong place shows.
  std::mt19937 rng{static_cast<uint32_t>(seed)};
  std::uniform_real_distribution<float> b(-0.5f, 0.5f);
  for (const auto& p : t.layout.params())
    for (int64_t k = 0; k < p.bias.count; ++k) t.params[size_t(p.bias.offset + k)] = b(rng);
  return t;
}

std::string Export(const Trained& t) {
  auto bytes = ExportOnnx(t.layout, t.params.data(), {"every-layer", "test", "a doc"});
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  return bytes.ok() ? *bytes : "";
}

// Adam's probabilities for `batch` images of bytes.
std::vector<float> AdamProbabilities(const ModelLayout& layout, std::vector<float> params,
                                     const std::vector<uint8_t>& pixels, int batch) {
  auto net = Network::Create(layout, batch, params.data(), nullptr, NetworkMode::kInference);
  EXPECT_TRUE(net.ok()) << net.status().message();
  (*net)->SetInputFromBytes(pixels.data());
  (*net)->Forward(nullptr, nullptr);
  const float* p = (*net)->probabilities();
  return std::vector<float>(p, p + size_t(batch) * size_t(layout.classes()));
}

TEST(Onnx, ImportGivesBackTheExportedModel) {
  const spec::ModelSpec spec = EveryLayer();
  const Trained t = Make(spec, 7);
  auto m = ImportOnnx(Export(t));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->name, "every-layer");
  EXPECT_EQ(m->doc, "a doc");
  EXPECT_EQ(m->model.input, spec.input);
  // The dropout layer is not in the file (evaluation leaves it out); every other layer is.
  std::vector<spec::LayerSpec> kept;
  for (const auto& l : spec.layers)
    if (l.type != LayerType::kDropout) kept.push_back(l);
  ASSERT_EQ(m->model.layers.size(), kept.size());
  for (size_t i = 0; i < kept.size(); ++i) {
    const auto &a = m->model.layers[i], &b = kept[i];
    SCOPED_TRACE("layer " + std::to_string(i));
    EXPECT_EQ(a.type, b.type);
    EXPECT_EQ(a.maps, b.maps);
    EXPECT_EQ(a.kernel, b.kernel);
    EXPECT_EQ(a.stride, b.stride);
    EXPECT_EQ(a.padding, b.padding);
    EXPECT_EQ(a.size, b.size);
    EXPECT_EQ(a.units, b.units);
    EXPECT_EQ(a.classes, b.classes);
    if (a.type == LayerType::kConv || a.type == LayerType::kDense) {
      EXPECT_EQ(a.activation, b.activation);
    }
  }
  EXPECT_EQ(m->params, t.params);  // bit for bit: dropout has no parameters
}

TEST(Onnx, OpenCvComputesWhatAdamComputes) {
  testing::TmpDir dir;
  for (const spec::ModelSpec& spec :
       {EveryLayer(),
        testing::MakeSpec({testing::Conv(4, 3, Activation::kTanh), testing::Pool(2),
                           testing::Dense(16, Activation::kRelu), testing::Softmax(10)},
                          {1, 12, 12})}) {
    const Trained t = Make(spec, 11);
    const std::string model = dir.File("model.onnx");
    ASSERT_TRUE(WriteOnnxFile(model, t.layout, t.params.data(), {"m", "test", ""}).ok());
    constexpr int kBatch = 9;
    const int64_t isz = t.layout.input_size();
    std::vector<uint8_t> pixels(size_t(kBatch * isz));
    std::mt19937 rng(3);
    for (auto& p : pixels) p = uint8_t(rng() % 256);
    std::vector<float> as_float(pixels.begin(), pixels.end());
    std::ofstream(dir.File("in"), std::ios::binary)
        .write(reinterpret_cast<const char*>(as_float.data()),
               std::streamsize(as_float.size() * 4));
    const std::string cmd =
        "/usr/bin/python3 " ADAM_SOURCE_DIR "/tests/libs/model/onnx_runtime.py run " + model + " " +
        dir.File("in") + " " + dir.File("out") + " " + std::to_string(kBatch) + " " +
        std::to_string(spec.input.channels) + " " + std::to_string(spec.input.height) + " " +
        std::to_string(spec.input.width);
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const auto ours = AdamProbabilities(t.layout, t.params, pixels, kBatch);
    std::vector<float> theirs(ours.size());
    std::ifstream out(dir.File("out"), std::ios::binary);
    out.read(reinterpret_cast<char*>(theirs.data()), std::streamsize(theirs.size() * 4));
    ASSERT_EQ(out.gcount(), std::streamsize(theirs.size() * 4));
    for (size_t i = 0; i < ours.size(); ++i) EXPECT_NEAR(ours[i], theirs[i], 2e-5) << "value " << i;
    // The same model read back by Adam computes the same probabilities again.
    auto back = ReadOnnxFile(model);
    ASSERT_TRUE(back.ok()) << back.status().message();
    auto layout = ModelLayout::Make(back->model);
    ASSERT_TRUE(layout.ok());
    EXPECT_EQ(AdamProbabilities(*layout, back->params, pixels, kBatch), ours);
  }
}

// Exports EveryLayer, lets `change` edit the ModelProto, and imports the result.
Status ImportChanged(const std::function<void(onnx::ModelProto*)>& change) {
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(Export(Make(EveryLayer(), 5))));
  change(&m);
  return ImportOnnx(m.SerializeAsString()).status();
}

onnx::TensorProto* Initializer(onnx::ModelProto* m, const std::string& name) {
  for (auto& t : *m->mutable_graph()->mutable_initializer())
    if (t.name() == name) return &t;
  ADD_FAILURE() << "no initializer " << name;
  return nullptr;
}

TEST(Onnx, RefusesWhatItDoesNotWriteNamingTheNodeOrTensor) {
  const std::string bytes = Export(Make(EveryLayer(), 5));
  EXPECT_FALSE(ImportOnnx(bytes.substr(0, bytes.size() / 2)).ok());
  EXPECT_THAT(ImportOnnx("\xff\xff\xff").status().message(),
              HasSubstr("not a serialised ModelProto"));
  EXPECT_THAT(ImportChanged([](onnx::ModelProto* m) {
                m->mutable_graph()->mutable_node(2)->set_op_type("Gelu");
              }).message(),
              HasSubstr("node 'Conv_2' (Gelu): an op Adam does not write"));
  EXPECT_THAT(ImportChanged([](onnx::ModelProto* m) {
                m->mutable_opset_import(0)->set_version(11);
              }).message(),
              HasSubstr("opset_import"));
  EXPECT_THAT(ImportChanged([](onnx::ModelProto* m) {
                Initializer(m, "pixel_scale")->set_raw_data(std::string(4, '\0'));
              }).message(),
              HasSubstr("Adam's pixel normalisation"));
  EXPECT_THAT(ImportChanged([](onnx::ModelProto* m) {
                auto* w = Initializer(m, "layers.0.weight");
                w->set_raw_data(w->raw_data().substr(4));
              }).message(),
              HasSubstr("tensor 'layers.0.weight': raw_data holds"));
  EXPECT_THAT(ImportChanged([](onnx::ModelProto* m) {
                Initializer(m, "layers.7.bias")->set_dims(0, 5);
              }).message(),
              HasSubstr("bias 'layers.7.bias' must be [6]"));
  EXPECT_THAT(ImportChanged([](onnx::ModelProto* m) {
                m->mutable_graph()->mutable_node(3)->set_input(0, "pixels");
              }).message(),
              HasSubstr("must read 'Conv_2'"));
  EXPECT_THAT(ImportChanged([](onnx::ModelProto* m) {
                m->mutable_graph()->mutable_node()->RemoveLast();  // the Softmax
              }).message(),
              HasSubstr("does not end in Gemm + Softmax"));
  EXPECT_THAT(ImportChanged([](onnx::ModelProto* m) {
                auto* dims = m->mutable_graph()
                                 ->mutable_input(0)
                                 ->mutable_type()
                                 ->mutable_tensor_type()
                                 ->mutable_shape();
                dims->mutable_dim(2)->set_dim_value(0);
              }).message(),
              HasSubstr("graph.input 'pixels': dim 2 must be in [1, 65536]"));
  EXPECT_THAT(ImportChanged([](onnx::ModelProto* m) {
                auto* a = m->mutable_graph()->mutable_node(2)->add_attribute();
                a->set_name("dilations");
                a->set_type(onnx::AttributeProto::INTS);
                a->add_ints(2);
                a->add_ints(2);
              }).message(),
              HasSubstr("node 'Conv_2' (Conv): attribute dilations"));
  EXPECT_THAT(ImportChanged([](onnx::ModelProto* m) {
                // Conv_2 -> Relu_3 -> Flatten, then the pool reads the flattened tensor.
                auto* g = m->mutable_graph();
                auto* f = g->mutable_node(4);  // the average pool
                f->set_op_type("Flatten");
                f->clear_attribute();
              }).message(),
              HasSubstr("Adam flattens only right before a Gemm"));
  // A dense layer whose weight does not take the flattened previous output.
  EXPECT_THAT(ImportChanged([](onnx::ModelProto* m) {
                auto* w = Initializer(m, "layers.6.weight");
                const int64_t in = w->dims(1);
                w->set_dims(1, in - 1);
                w->set_raw_data(w->raw_data().substr(0, size_t(7 * (in - 1) * 4)));
              }).message(),
              HasSubstr("inputs where the layer has"));
}

// The metadata a consumer needs: class names in output order, the input's layout, channels,
// range and normalisation, how images were fitted; read back by ImportOnnx, with defaults for a
// model that has none (an older Adam's) and errors naming the key for one that is wrong.
TEST(Onnx, MetadataNamesTheClassesAndTheFit) {
  const Trained t = Make(EveryLayer(), 3);
  OnnxInfo info{"m", "test", "", {"cat", "dog", "fish", "bird"}, {"crop", 4}};
  auto bytes = ExportOnnx(t.layout, t.params.data(), info);
  ASSERT_TRUE(bytes.ok());
  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(*bytes));
  std::map<std::string, std::string> props;
  for (const auto& p : proto.metadata_props()) props[p.key()] = p.value();
  EXPECT_EQ(props["classes"], R"(["cat","dog","fish","bird"])");
  EXPECT_EQ(props["input_layout"], "NCHW");
  EXPECT_EQ(props["input_channels"], "rgb");
  EXPECT_EQ(props["input_range"], "0..255");
  EXPECT_EQ(props["normalization"], "x*2/255-1");
  EXPECT_EQ(props["fit"], "crop");
  EXPECT_EQ(props["crop_margin"], "4");
  EXPECT_EQ(props["background"], "white");
  auto m = ImportOnnx(*bytes);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->classes, info.classes);
  EXPECT_EQ(m->fit.fit, "crop");
  EXPECT_EQ(m->fit.crop_margin, 4);
  // Without names: numbered; without metadata at all: numbered, and no fit.
  info.classes.pop_back();
  EXPECT_THAT(ExportOnnx(t.layout, t.params.data(), info).status().message(),
              HasSubstr("3 class names for the softmax's 4 classes"));
  auto plain = ImportOnnx(Export(t));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->classes, (std::vector<std::string>{"0", "1", "2", "3"}));
  proto.clear_metadata_props();
  auto old = ImportOnnx(proto.SerializeAsString());
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->classes, plain->classes);
  EXPECT_EQ(old->fit.fit, "none");
  EXPECT_EQ(old->fit.crop_margin, 0);
  auto with = [](const char* key, const char* value) {
    return [key, value](onnx::ModelProto* m) {
      for (auto& p : *m->mutable_metadata_props())
        if (p.key() == key) p.set_value(value);
    };
  };
  EXPECT_THAT(ImportChanged(with("classes", R"(["a","b"])")).message(),
              HasSubstr("metadata_props[\"classes\"]: not a JSON array of 4 class names"));
  EXPECT_THAT(ImportChanged(with("classes", R"(["a","b","c",6])")).message(),
              HasSubstr("entry 3 is not a string"));
  EXPECT_THAT(ImportChanged(with("fit", "squeeze")).message(),
              HasSubstr("metadata_props[\"fit\"]: \"squeeze\" is not crop, stretch or none"));
  EXPECT_THAT(ImportChanged(with("crop_margin", "33")).message(),
              HasSubstr("metadata_props[\"crop_margin\"]: \"33\" is not a margin of 0 to 32"));
}

TEST(Onnx, FilesNameTheirPath) {
  const Trained t = Make(EveryLayer(), 1);
  const Status st = WriteOnnxFile("/nonexistent-dir/m.onnx", t.layout, t.params.data(), {});
  EXPECT_THAT(st.message(), HasSubstr("/nonexistent-dir/m.onnx"));
  auto r = ReadOnnxFile("/nonexistent-dir/m.onnx");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("/nonexistent-dir/m.onnx"));
}

}  // namespace
}  // namespace adam::model
