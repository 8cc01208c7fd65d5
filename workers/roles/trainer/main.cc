// The trainer process.
#include "trainer/main.h"

#include <spdlog/spdlog.h>

#include "core/role_events.h"
#include "trainer/role.h"
#include "update/update_plan.h"

namespace adam::trainer {

int Main(const spec::AdamJob& job, const MainOptions& options) {
  auto derived = update::DeriveJobLayout(job);
  if (!derived.ok()) {
    spdlog::error("{}", derived.status().message());
    return 1;
  }
  TrainerRole role(job, options, *derived);
  if (Status st = role.Start(); !st.ok()) {
    spdlog::error("{}", st.message());
    return 1;
  }
  events::Emit(role.ReadyEvent());
  return role.Run();
}

}  // namespace adam::trainer
