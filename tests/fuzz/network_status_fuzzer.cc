// libFuzzer target: a downward-API annotations file -> its annotations -> the network-status
// attachment's address. Never a crash.
#include <cstdint>
#include <string>

#include "net/network_status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto annotations = adam::net::ParseAnnotationsFile(text);
  if (annotations.ok()) {
    auto it = annotations->find(adam::net::kNetworkStatusAnnotation);
    if (it != annotations->end()) (void)adam::net::NetworkAddress(it->second, "adam-replication");
  }
  // The same bytes as the annotation's JSON directly.
  (void)adam::net::NetworkAddress(text, "adam-replication");
  return 0;
}
