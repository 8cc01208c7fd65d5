// ParseKill and ParseChaos: the fault-injection arguments of `adam run`.
#include <cmath>
#include <cstdlib>
#include <optional>

#include "launcher/launcher.h"
#include "spec/plan.h"

namespace adam::launcher {
namespace {

// A finite, non-negative number of seconds, the whole text.
std::optional<double> Seconds(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v) || v < 0) return std::nullopt;
  return v;
}

}  // namespace

StatusOr<RunOptions::Kill> ParseKill(const std::string& text, const spec::AdamJob& job) {
  const std::string what = "--kill " + text + ": ";
  RunOptions::Kill kill;
  const size_t at = text.find('@'), plus = text.find('+', at == std::string::npos ? 0 : at);
  if (at == std::string::npos || at == 0)
    return InvalidArgumentError(what + "expected NAME@SECONDS[+RESTART]");
  kill.name = text.substr(0, at);
  const std::string when =
      text.substr(at + 1, plus == std::string::npos ? std::string::npos : plus - at - 1);
  const std::optional<double> at_s = Seconds(when);
  if (!at_s) return InvalidArgumentError(what + "'" + when + "' is not a number of seconds");
  kill.at_seconds = *at_s;
  if (plus != std::string::npos) {
    const std::string again = text.substr(plus + 1);
    const std::optional<double> restart = Seconds(again);
    if (!restart || *restart <= 0)
      return InvalidArgumentError(what + "restart '" + again + "' is not a positive number");
    kill.restart_after = *restart;
  }
  for (const auto& in : spec::MakePlan(job).instances)
    if (in.name == kill.name ||
        (kill.name == "controller-leader" && in.role == spec::Role::kController))
      return kill;
  return InvalidArgumentError(what + "the job has no role instance '" + kill.name +
                              "' (see adam plan)");
}

Status ParseChaos(const std::string& text, const spec::AdamJob& job, RunOptions* options) {
  const std::string what = "--chaos " + text + ": ";
  const size_t colon = text.find(':');
  const std::string secs = text.substr(0, colon);
  const std::optional<double> length = Seconds(secs);
  if (!length || *length <= 0)
    return InvalidArgumentError(what + "'" + secs + "' is not a positive number of seconds");
  uint64_t seed = options->chaos_seed;
  if (colon != std::string::npos) {
    const std::string digits = text.substr(colon + 1);
    char* end = nullptr;
    seed = std::strtoull(digits.c_str(), &end, 10);
    if (digits.empty() || *end != '\0' || digits[0] == '-')
      return InvalidArgumentError(what + "seed '" + digits + "' is not a number");
  }
  if (!spec::ControllerOwnsShards(job))
    return InvalidArgumentError(what + "needs spec.roles.parameterServer.copies > 1");
  options->chaos_seconds = *length;
  options->chaos_seed = seed;
  return OkStatus();
}

}  // namespace adam::launcher
