#include "core/role.h"

#include <spdlog/spdlog.h>

#include "core/event.h"
#include "core/signals.h"

namespace adam {

int ServeUntilSignalled(Role& role) {
  if (Status st = role.Start(); !st.ok()) {
    spdlog::error("{}", st.message());
    role.Stop();  // whatever it had started
    return 1;
  }
  const nlohmann::json ready = role.ReadyEvent();
  spdlog::info("serving on port {} (metrics on {})", ready.value("port", 0),
               ready.value("metrics_port", 0));
  EmitEvent(ready);
  WaitForTerminationSignal();
  role.Stop();
  return 0;
}

}  // namespace adam
