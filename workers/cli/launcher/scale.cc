// `adam scale`: rewrites a running `adam run`'s copy of its manifest with a new server count.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>

#include "core/file.h"
#include "launcher/launcher.h"

namespace adam::launcher {

std::string RunManifestPath(const std::string& state_dir) { return state_dir + "/job.yaml"; }

Status WriteManifest(const std::string& path, const std::string& text) {
  // Whole or not at all: the roles following it read it every 2 s.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.flush()) return UnavailableError("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return UnavailableError("cannot rename " + tmp + " to " + path + ": " + ec.message());
  return OkStatus();
}

StatusOr<std::string> ScaleManifest(const std::string& yaml_text, int parameter_servers) {
  if (parameter_servers < 1)
    return InvalidArgumentError("--parameter-servers " + std::to_string(parameter_servers) +
                                ": must be at least 1");
  YAML::Node doc;
  try {
    doc = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string("the manifest does not parse: ") + e.what());
  }
  ADAM_ASSIGN_OR_RETURN(spec::AdamJob before, spec::ParseAdamJob(yaml_text));
  if (!spec::ControllerOwnsShards(before))
    return FailedPreconditionError(
        "spec.roles.parameterServer.copies is " +
        std::to_string(before.roles.parameter_server.copies) +
        ": servers join and leave a running job only with copies > 1 (a controller moves the "
        "copies)");
  doc["spec"]["roles"]["parameterServer"]["replicas"] = parameter_servers;
  YAML::Emitter out;
  out << doc;
  std::string text = std::string(out.c_str()) + "\n";
  auto after = spec::ParseAdamJob(text);
  if (!after.ok())
    return InvalidArgumentError(
        "with " + std::to_string(parameter_servers) +
        " parameter servers the job is not valid: " + std::string(after.status().message()));
  return text;
}

int Scale(const std::string& state_dir, int parameter_servers) {
  // Only a live run follows the file: one holds DIR/.lock (LockStateDir).
  const std::string lock = state_dir + "/.lock";
  const int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC);
  const bool held = fd >= 0 && flock(fd, LOCK_SH | LOCK_NB) != 0;
  if (fd >= 0) ::close(fd);
  const std::string path = RunManifestPath(state_dir);
  if (!held || !std::filesystem::exists(path)) {
    std::fprintf(stderr,
                 "adam scale: no adam run is using %s (a run given --state-dir %s keeps its "
                 "manifest in %s and follows it)\n",
                 state_dir.c_str(), state_dir.c_str(), path.c_str());
    return 2;
  }
  const std::string text = ReadWholeFile(path).value_or("");
  auto was = spec::ParseAdamJob(text);
  auto scaled = ScaleManifest(text, parameter_servers);
  if (!was.ok() || !scaled.ok()) {
    std::fprintf(
        stderr, "adam scale: %s: %s\n", path.c_str(),
        std::string(was.ok() ? scaled.status().message() : was.status().message()).c_str());
    return 2;
  }
  if (Status st = WriteManifest(path, *scaled); !st.ok()) {
    std::fprintf(stderr, "adam scale: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  std::fprintf(stderr,
               "adam scale: %s: parameter servers %d -> %d; the run starts or retires servers "
               "and the controller moves copies within seconds\n",
               path.c_str(), was->roles.parameter_server.replicas, parameter_servers);
  return 0;
}

}  // namespace adam::launcher
