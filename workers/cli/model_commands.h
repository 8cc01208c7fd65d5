// `adam evaluate` and `adam predict`: the ONNX model a job wrote (model/onnx.h), used without
// another tool.
#pragma once

#include <string>
#include <vector>

namespace adam::cli {

struct ModelCommandOptions {
  std::string model;   // an ONNX file Adam wrote
  std::string images;  // evaluate: IDX images (N x H x W, or N x C x H x W), raw or gzip
  std::vector<std::string> inputs;  // predict: one IDX file, or PNG files (one image each)
  std::string labels;               // evaluate: IDX labels
  int first = 10;                   // predict: how many images of an IDX file (0 = all)
  bool json = false;
};

// Prints the test accuracy and the confusion matrix; exit code 0, or 2 naming the bad input.
int Evaluate(const ModelCommandOptions& o);
// Prints each image's class and probability, and the runner-up; exit code 0 or 2. PNG files
// (grey or colour, converted to the model's channels) must have the model's height and width.
int Predict(const ModelCommandOptions& o);

}  // namespace adam::cli
