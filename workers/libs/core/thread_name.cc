#include "core/thread_name.h"

#include <pthread.h>

namespace adam {

namespace {
constexpr size_t kMaxName = 15;  // TASK_COMM_LEN less the terminating NUL
}  // namespace

void NameThisThread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, kMaxName).c_str());
}

}  // namespace adam
