// libFuzzer target: bytes -> an image file of an image folder (PNG or JPEG by magic), decoded and
// fitted to a small grey and a colour target, by crop and by stretch.
#include <cstdint>
#include <string_view>

#include "data/image_folder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  adam::data::FolderOptions o;
  o.height = 7;
  o.width = 9;
  for (int channels : {1, 3})
    for (auto fit : {adam::data::Fit::kCrop, adam::data::Fit::kStretch}) {
      o.channels = channels;
      o.fit = fit;
      auto px = adam::data::DecodeImage(bytes, o);
      if (px.ok() && px->size() != size_t(channels * 7 * 9)) __builtin_trap();  // the contract
    }
  return 0;
}
