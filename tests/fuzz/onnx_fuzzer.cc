// libFuzzer target: bytes -> ONNX ModelProto -> Adam's importer (model/onnx.h). An accepted model
// must make a layout whose size is the parameters read back.
#include <cstdint>
#include <string>

#include "model/onnx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto m = adam::model::ImportOnnx(std::string(reinterpret_cast<const char*>(data), size));
  if (!m.ok()) return 0;
  auto layout = adam::model::ModelLayout::Make(m->model);
  if (!layout.ok() || layout->num_params() != int64_t(m->params.size()))
    __builtin_trap();  // the importer's contract
  return 0;
}
