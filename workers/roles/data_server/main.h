// `adam data-server`: loads the job's data set, builds the augmentation cache, serves it.
#pragma once

#include "net/role_process.h"
#include "spec/adamjob.h"
#include "spec/role_options.h"

namespace adam::data_server {

// Runs until SIGINT/SIGTERM; returns the process exit code. Emits a "ready" event once serving.
int Main(const spec::AdamJob& job, const spec::DataServerOptions& options,
         const RoleProcess& process);

}  // namespace adam::data_server
