// Linked into every test binary (tests/CMakeLists.txt): a test that crashes prints the signal, the
// thread and its stack before it dies, so that a crash seen once in CI says where it happened.
#include "core/crash.h"

namespace {

const bool kReporting = [] {
  adam::ReportCrashes();
  return true;
}();

}  // namespace
