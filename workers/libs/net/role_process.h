// What a role's process adds to its command-line options (spec/role_options.h), the one options
// layer every role takes: how it serves and dials, and where it reads the time. `adam ROLE`
// builds one from --tls-dir/--plaintext; tests build their own (mutual TLS, a FakeClock).
#pragma once

#include <memory>

#include "core/clock.h"
#include "net/grpc.h"

namespace adam {

struct RoleProcess {
  // The job's mutual TLS, or plain text.
  std::shared_ptr<const net::Transport> transport = net::Transport::Plaintext();
  // Where the role's waits, timeouts and figures read the time (not owned).
  Clock* clock = Clock::Real();
};

}  // namespace adam
