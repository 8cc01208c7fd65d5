// libFuzzer target: a pod's /metrics answer -> ParsePrometheusText. Never a crash.
#include <cstdint>
#include <string>

#include "kube/scrape.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)adam::kube::ParsePrometheusText(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
