// The `adam controller` process: one member of the job's controller group.
#pragma once

#include "net/role_process.h"
#include "spec/adamjob.h"
#include "spec/role_options.h"

namespace adam::controller {

// Runs until SIGINT/SIGTERM; returns the process exit code (2 for an --id that is neither a
// member's number nor "hostname" with this host's name ending in -N, or one not in --members).
int Main(const spec::AdamJob& job, const spec::ControllerOptions& options,
         const RoleProcess& process);

}  // namespace adam::controller
