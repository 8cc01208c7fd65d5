// `adam evaluate` and `adam predict`: the ONNX model a job wrote (model/onnx.h), used without
// another tool. Images of any size are fitted as the job fitted its test set (the model's
// metadata: fit and crop margin; data::DecodeTestImage), and classes are named as the model
// names them (its metadata's class names: the image folder's class folders).
#pragma once

#include <string>
#include <vector>

namespace adam::cli {

struct ModelCommandOptions {
  std::string model;   // an ONNX file Adam wrote
  std::string images;  // evaluate: IDX images (N x H x W, or N x C x H x W), raw or gzip
  std::string labels;  // evaluate: IDX labels
  std::string folder;  // evaluate: a folder of class folders, instead of IDX files
  // predict: IDX files, PNG or JPEG files, and folders (every PNG and JPEG under them).
  std::vector<std::string> inputs;
  int first = 10;         // predict: how many images of an IDX file (0 = all)
  int top = 2;            // predict: the classes shown per image, most probable first
  int max_corrupt = 100;  // evaluate --folder: undecodable files skipped before it fails
  bool json = false;
};

// Prints the test accuracy, per class the precision and recall, and the confusion matrix; exit
// code 0, or 2 naming the bad input.
int Evaluate(const ModelCommandOptions& o);
// Prints each image's most probable classes and their probabilities; exit code 0, or 2 when an
// input could not be read (named; the others are still classified).
int Predict(const ModelCommandOptions& o);

}  // namespace adam::cli
