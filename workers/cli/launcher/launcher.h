// The local launcher (`adam run FILE`): runs every role of one AdamJob as child processes on
// loopback, in the plan's start order, and supervises them.
//
// Each child's output is read line by line: event lines (core/event.h) drive the launcher, the
// rest are printed to stderr prefixed with the child's name. Serving roles bind port 0 and report
// the port they got, so there is no port race. One progress line per epoch goes to stderr; the
// summary goes to stdout, as text or as one JSON object. If any child dies, or on SIGINT/SIGTERM,
// every child is stopped (SIGTERM, then SIGKILL after a grace period) and the run fails, showing
// the dead child's last lines -- except, with copies > 1, a parameter server or controller member,
// which the job survives (a failover; trainers fail if it cannot recover). Children die with the
// launcher (PR_SET_PDEATHSIG). Run is called once from the main thread; it installs SIGINT,
// SIGTERM, SIGHUP and SIGPIPE handlers for its duration. With --state-dir it holds a lock on
// DIR/.lock: one run per directory.
#pragma once

#include <chrono>
#include <string>

#include "core/clock.h"
#include "core/status.h"
#include "spec/adamjob.h"

namespace adam::launcher {

struct RunOptions {
  std::string job_path;    // the manifest, passed on to every child
  std::string executable;  // the `adam` binary the children run
  bool json = false;       // summary as one JSON object on stdout
  bool quiet = false;      // hide the children's log lines (errors still shown on failure)
  std::chrono::seconds ready_timeout{300};  // for serving roles to start listening
  std::chrono::seconds stop_grace{5};       // SIGTERM -> SIGKILL
  // The run's wall time and figures, the waits above and the failover times (not owned).
  Clock* clock = Clock::Real();
  int tail_lines = 20;  // a dead child's last lines to show
  // Parameter-server checkpoints go to <state_dir>/<ps name>; a run given a directory that
  // holds checkpoints resumes from them: the parameters, and the epochs finished, so the epochs
  // and the learning-rate schedule go on where they were. Empty: a temporary directory, removed
  // at the end.
  std::string state_dir;
  // `adam run --resume DIR`: state_dir is DIR, and it must hold a checkpoint of every parameter
  // server of the job (an earlier run's --state-dir); otherwise the run is refused (exit 2)
  // naming the first server without one, before anything starts.
  bool resume = false;
  // Fault injection: SIGKILL the named role instance ("ps-0", "controller-1", or
  // "controller-leader" for whichever member leads at the time) this many seconds
  // after training starts; with `restart_after` > 0 it is started again that much later. With
  // spec.roles.parameterServer.copies > 1 the run goes on and reports how long the failover took.
  struct Kill {
    std::string name;
    double at_seconds = 0;
    double restart_after = 0;
  };
  std::vector<Kill> kills;
  // Chaos (copies > 1): for this many seconds of training, every 1-2 s kill -9 a random
  // controller member or parameter server (one at a time, so a minority) and restart it 1 s
  // later. Seeded for replay.
  double chaos_seconds = 0;
  uint64_t chaos_seed = 1;
  // Non-empty: write DIR/index.html at the end (launcher/report.h): loss and accuracy per
  // epoch, images/s over time, faults marked.
  std::string report_dir;
  // Non-empty: keep this file a Prometheus file_sd target list of every role's /metrics
  // (labels adam_job, role, instance_name), rewritten as roles start and restart.
  std::string prometheus_sd;
  // By default the run makes a throw-away CA and certificate (in its state directory, tls/) and
  // every role talks mutual TLS; true passes --plaintext instead.
  bool plaintext = false;
  // Non-empty: the final model (the one whose test accuracy the summary reports) is written there
  // as ONNX (model/onnx.h) by trainer 0, or by the evaluator when trainer 0 did not finish.
  std::string model_out;
};

// Runs the job; returns the process exit code: 0 when every trainer finished, 1 when a role
// failed, 2 when an output path cannot be written or --state-dir is in use by another run, 3 when
// training diverged (core/exit_codes.h), 128 + the signal when interrupted (SIGINT, SIGTERM,
// SIGHUP, or SIGPIPE from a reader that went away). However it ends, the roles are stopped and a
// temporary state directory (with its TLS key) is removed.
int Run(const spec::AdamJob& job, const RunOptions& options);

// `--kill NAME@SECONDS[+RESTART]` as a Kill. NAME must be one of the job's role instances (see
// spec::MakePlan), or controller-leader when it has controllers; SECONDS a finite number >= 0,
// RESTART > 0. An error names the argument and the part at fault.
StatusOr<RunOptions::Kill> ParseKill(const std::string& text, const spec::AdamJob& job);
// `--chaos SECONDS[:SEED]` into options->chaos_seconds (> 0) and chaos_seed (a decimal number; the
// default seed stays without one). Refused unless spec.roles.parameterServer.copies > 1; on an
// error `options` is unchanged.
Status ParseChaos(const std::string& text, const spec::AdamJob& job, RunOptions* options);

// Elastic parameter servers, locally. A run with copies > 1 keeps the manifest its roles follow
// in RunManifestPath(state dir) (a copy of the one it was given); `adam scale --state-dir DIR
// --parameter-servers N` rewrites that copy (Scale), as editing an AdamJob does on a cluster. The
// run starts the servers that join; the controller moves copies onto them, and off the servers
// that leave, which exit once they hold nothing.
std::string RunManifestPath(const std::string& state_dir);
// Writes `text` to `path` whole (a temporary file, renamed).
Status WriteManifest(const std::string& path, const std::string& text);
// The manifest with spec.roles.parameterServer.replicas set to `parameter_servers`: refused when
// the job has copies < 2 (no controller to move copies) or is not valid with that count.
StatusOr<std::string> ScaleManifest(const std::string& yaml_text, int parameter_servers);
// `adam scale`: refused (exit 2) unless an `adam run` holds DIR's lock and keeps its manifest
// there; returns the exit code.
int Scale(const std::string& state_dir, int parameter_servers);

}  // namespace adam::launcher
