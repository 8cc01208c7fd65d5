// The exit codes of every `adam` process, which the launcher and the operator act on.
#pragma once

namespace adam {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;   // a fault that a restart may cure (a lost peer, a crash)
inline constexpr int kExitInvalid = 2;  // the input was refused (a manifest, a flag, a data file)
inline constexpr int kExitDiverged =
    3;  // training diverged: a restart would go on from the same weights

}  // namespace adam
