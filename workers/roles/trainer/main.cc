// The trainer process.
#include "trainer/main.h"

#include <spdlog/spdlog.h>

#include "core/exit_codes.h"
#include "core/role_events.h"
#include "trainer/role.h"
#include "update/update_plan.h"

namespace adam::trainer {

int Main(const spec::AdamJob& job, const spec::TrainerOptions& options,
         const RoleProcess& process) {
  if (Status st = spec::CheckControllerFlag(job, !options.controller.empty()); !st.ok()) {
    spdlog::error("{}", st.message());
    return kExitInvalid;
  }
  auto derived = update::DeriveJobLayout(job);
  if (!derived.ok()) {
    spdlog::error("{}", derived.status().message());
    return 1;
  }
  TrainerRole role(job, options, process, *derived);
  if (Status st = role.Start(); !st.ok()) {
    spdlog::error("{}", st.message());
    return 1;
  }
  events::Emit(role.ReadyEvent());
  return role.Run();
}

}  // namespace adam::trainer
