// A job's role as an object: built from its options and its collaborators (transport, clock,
// storage), then Start binds and begins its work and Stop ends it. A role's main function only
// parses, wires and runs one (ServeUntilSignalled); tests run roles in-process the same way.
#pragma once

#include "core/role_events.h"
#include "core/status.h"

namespace adam {

class Role {
 public:
  virtual ~Role() = default;
  // Binds its listeners and starts its threads; fails naming what could not start.
  virtual Status Start() = 0;
  // Ends what Start began, answering or cancelling calls in flight. Idempotent.
  virtual void Stop() = 0;
  // What it reports once started: the "ready" event (core/role_events.h) with the ports it bound.
  virtual events::Ready ReadyEvent() const = 0;
};

// A serving role's process: Start, emit the ready event, serve until SIGINT or SIGTERM (blocked
// by the caller with BlockTerminationSignals), then Stop. Returns the exit code: 0, or 1 when
// Start failed (logged; what it had started is stopped).
int ServeUntilSignalled(Role& role);

}  // namespace adam
