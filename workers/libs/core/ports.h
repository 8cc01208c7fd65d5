// A free TCP port on `host` (an IPv4 address), for a role that must know its address before it
// starts (controller members list each other) and for tests. The port is released before the
// call returns, so another process may take it first: callers accept that race. Returns 0 when
// no port could be had. Thread-safe.
#pragma once

#include <string>

namespace adam {

int FreePort(const std::string& host = "127.0.0.1");

}  // namespace adam
