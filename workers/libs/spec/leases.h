// The lease times that the parameter servers keep and the controller's options are checked
// against: one place, included by both (param_server/routing.h, spec/role_options.h).
#pragma once

#include <chrono>

namespace adam::spec {

// How long a parameter server's primary serves after the last heartbeat the controller leader
// accepted (param_server/routing.h). The controller's failure timeout must exceed it by at least
// kLeaseMargin, or a primary cut off from the controller could still serve after another copy
// was promoted: Check refuses a ControllerOptions that breaks this.
inline constexpr std::chrono::milliseconds kPrimaryLease{300};
inline constexpr std::chrono::milliseconds kLeaseMargin{100};

}  // namespace adam::spec
