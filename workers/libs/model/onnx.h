// A trained model as an ONNX file, and back.
//
// ExportOnnx writes the model a job trained as an ONNX graph (opset 13) that any ONNX runtime
// evaluates: input "pixels", float [N, C, H, W] holding raw pixel values in [0, 255] as the IDX
// file stores them; the normalisation Adam applies (x * 2/255 - 1) is the graph's first two
// nodes; output "probabilities", float [N, classes]. Conv -> Conv, maxpool -> MaxPool, avgpool ->
// AveragePool, dense -> Flatten + Gemm (weights OI, transB), softmax -> Gemm + Softmax, each
// activation its own node; dropout is left out, as evaluation leaves it out.
//
// ImportOnnx reads back the graphs ExportOnnx writes (that chain of nodes, in that order) into a
// model spec and its parameters, for `adam evaluate` and `adam predict`; anything else is refused
// naming the node or tensor at fault.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "model/layout.h"

namespace adam::model {

inline constexpr int kOnnxOpset = 13;

struct OnnxInfo {
  std::string name;              // the graph's name: the job's
  std::string producer_version;  // Adam's version
  std::string doc;               // free text: what trained it, its test accuracy
};

// `params` holds layout.num_params() floats in the layout's order. Returns the serialised
// ModelProto.
StatusOr<std::string> ExportOnnx(const ModelLayout& layout, const float* params,
                                 const OnnxInfo& info);

struct ImportedModel {
  spec::ModelSpec model;
  std::vector<float> params;  // in ModelLayout::Make(model)'s order
  std::string name;
  std::string doc;
};

// `bytes`: a serialised ModelProto as ExportOnnx writes it.
StatusOr<ImportedModel> ImportOnnx(const std::string& bytes);

// File wrappers (the error names the path).
Status WriteOnnxFile(const std::string& path, const ModelLayout& layout, const float* params,
                     const OnnxInfo& info);
StatusOr<ImportedModel> ReadOnnxFile(const std::string& path);

}  // namespace adam::model
