// Fatal signals report where they struck: a crash in a pod (whose termination message is the end
// of its log) or in a test run by CI names its thread and stack rather than only "SegFault".
#pragma once

namespace adam {

// Installs handlers for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT that write the signal, the
// thread and its stack (glibc's backtrace: module+offset, and names where the module exports
// them) to stderr, the signal's line again last, then let the signal end the process as it
// would have (same exit status, core dump). Once per process; later calls do nothing. Under a
// sanitizer it does nothing: the sanitizer reports these itself.
void ReportCrashes();

}  // namespace adam
