// A small job manifest for tests: a conv net on DIR's synthetic IDX files (synthetic.h writes
// them; parsing the manifest does not need them).
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "testing/tmp_dir.h"

namespace adam::testing {

// Writes DIR/job.yaml training a small conv net on DIR/{train,test}-* with the given
// `training` and `roles` flow mappings (without braces); returns its path.
inline std::string Manifest(const TmpDir& dir, const std::string& training,
                            const std::string& roles) {
  std::ostringstream m;
  m << "apiVersion: adam.dev/v1alpha1\nkind: AdamJob\nmetadata: {name: synthetic}\nspec:\n"
    << "  dataset:\n"
    << "    train: {images: " << dir.File("train-images.gz")
    << ", labels: " << dir.File("train-labels") << "}\n"
    << "    test: {images: " << dir.File("test-images.gz")
    << ", labels: " << dir.File("test-labels") << "}\n"
    << "    augment: {shift: 1, hflip: false, variants: 2}\n"
    << "  model:\n    input: {channels: 1, height: 12, width: 12}\n    layers:\n"
    << "      - {type: conv, maps: 4, kernel: 3, activation: tanh}\n"
    << "      - {type: maxpool, size: 2}\n"
    << "      - {type: dense, units: 16, activation: relu}\n"
    << "      - {type: softmax, classes: 4}\n"
    << "  training: {" << training << "}\n"
    << "  roles: {" << roles << "}\n";
  const std::string path = dir.File("job.yaml");
  std::ofstream(path) << m.str();
  return path;
}

}  // namespace adam::testing
