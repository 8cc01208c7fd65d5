// A trained model as an ONNX file, and back.
//
// ExportOnnx writes the model a job trained as an ONNX graph (opset 13) that any ONNX runtime
// evaluates: input "pixels", float [N, C, H, W] holding raw pixel values in [0, 255] as the IDX
// file stores them; the normalisation Adam applies (x * 2/255 - 1) is the graph's first two
// nodes; output "probabilities", float [N, classes]. Conv -> Conv, maxpool -> MaxPool, avgpool ->
// AveragePool, dense -> Flatten + Gemm (weights OI, transB), softmax -> Gemm + Softmax, each
// activation its own node; dropout is left out, as evaluation leaves it out.
//
// The model also carries, as metadata_props (string keys and values; docs/reference/adamjob.md,
// "The model file"), what a consumer needs to feed it and read it:
//   classes        a JSON array of the class names in output order (an image folder's class
//                  folders; "0", "1", ... when the data set names none)
//   input_layout   "NCHW"
//   input_channels "grey" (BT.601 luma) or "rgb"
//   input_range    "0..255": raw 8-bit pixel values as floats
//   normalization  "x*2/255-1": what the graph's first two nodes do to them
//   fit            how an image of another size was fitted in training: "crop" (scaled to cover
//                  (H + 2 margin) x (W + 2 margin), then centre-cropped to it), "stretch" (scaled
//                  to it), or "none" (IDX images: already the input's size)
//   crop_margin    that margin, pixels: the centre H x W of the fitted image is the input
//   background     "white": what transparency was composited on
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

// How images meet the model's input, as training fitted them (data/image_folder.h).
struct InputFit {
  std::string fit = "none";  // crop | stretch | none
  int crop_margin = 0;       // 0..32
};

struct OnnxInfo {
  std::string name;                  // the graph's name: the job's
  std::string producer_version;      // Adam's version
  std::string doc;                   // free text: what trained it, its test accuracy
  std::vector<std::string> classes;  // in output order; empty: "0", "1", ...
  InputFit fit;
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
  // From metadata_props; a model without them (an older Adam's) gets "0", "1", ... and "none".
  std::vector<std::string> classes;
  InputFit fit;
};

// `bytes`: a serialised ModelProto as ExportOnnx writes it.
StatusOr<ImportedModel> ImportOnnx(const std::string& bytes);

// File wrappers (the error names the path).
Status WriteOnnxFile(const std::string& path, const ModelLayout& layout, const float* params,
                     const OnnxInfo& info);
StatusOr<ImportedModel> ReadOnnxFile(const std::string& path);

}  // namespace adam::model
