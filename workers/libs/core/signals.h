// Termination signals for role processes: block SIGINT/SIGTERM in every thread (call first in
// main, before any thread starts) and wait for one on the main thread.
#pragma once

#include <chrono>

namespace adam {

// Blocks SIGINT and SIGTERM in the calling thread and every thread it starts later.
void BlockTerminationSignals();

// Waits until SIGINT or SIGTERM arrives; returns the signal number.
int WaitForTerminationSignal();

// Waits at most `timeout` for SIGINT or SIGTERM; returns the signal number, or 0 on timeout.
int WaitForTerminationSignal(std::chrono::milliseconds timeout);

}  // namespace adam
