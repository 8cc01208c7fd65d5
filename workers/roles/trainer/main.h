// `adam trainer`: one model replica, connected to the data server and the parameter servers.
#pragma once

#include "net/role_process.h"
#include "spec/adamjob.h"
#include "spec/role_options.h"

namespace adam::trainer {

// Trains to the end of the job; returns the process exit code.
int Main(const spec::AdamJob& job, const spec::TrainerOptions& options, const RoleProcess& process);

}  // namespace adam::trainer
