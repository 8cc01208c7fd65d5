// `adam ps`: holds this server's shards of the job's parameters and serves pushes and pulls.
#pragma once

#include "net/role_process.h"
#include "spec/adamjob.h"
#include "spec/role_options.h"

namespace adam::ps {

// Runs until SIGINT/SIGTERM; returns the process exit code. Emits a "ready" event once serving.
// With a state directory it restores the newest usable checkpoint first, flushes every
// spec.roles.parameterServer.persistence.interval and once more on SIGTERM. With
// --replication-network it first waits for that network's address (Multus, through the downward
// API) and listens for replication there.
int Main(const spec::AdamJob& job, spec::ParamServerOptions options, const RoleProcess& process);

}  // namespace adam::ps
