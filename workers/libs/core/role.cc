#include "core/role.h"

#include <spdlog/spdlog.h>

#include "core/role_events.h"
#include "core/signals.h"

namespace adam {

int ServeUntilSignalled(Role& role) {
  if (Status st = role.Start(); !st.ok()) {
    spdlog::error("{}", st.message());
    role.Stop();  // whatever it had started
    return 1;
  }
  const events::Ready ready = role.ReadyEvent();
  spdlog::info("serving on port {} (metrics on {})", ready.port, ready.metrics_port);
  events::Emit(ready);
  WaitForTerminationSignal();
  role.Stop();
  return 0;
}

}  // namespace adam
