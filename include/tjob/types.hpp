// tjob/types.hpp — what a job is made of: trainers, requests, jobs, steps,
// runtimes and events. Plain values, copyable, no I/O.
//
// Threading: values only; share freely once built.
#pragma once

#include <tjob/status.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace tjob {

using clock = std::chrono::system_clock;

/// Runs a program with arguments, as given: argv[0] is looked up on PATH (the
/// child's PATH, i.e. `env["PATH"]` when set, else the engine's) unless it
/// contains a '/'. No shell is involved; every string is passed as data.
struct command_trainer {
  std::vector<std::string> command;          ///< argv; must not be empty
  std::map<std::string, std::string> env;    ///< laid over the engine's environment
  std::string working_dir;                   ///< empty: the job's own `jobs/<name>/work/`
};

/// The kinds of trainer a job can have. Python function and script trainers
/// (venv, pip, torchrun) join this variant; the engine dispatches on it.
using trainer = std::variant<command_trainer>;

/// Everything `train` needs. The runtime defaults to Kubeflow's
/// `torch-distributed` when empty.
struct train_request {
  std::string name;       ///< empty: generated (a letter + 11 hex characters)
  std::string runtime;    ///< runtime name; empty: "torch-distributed"
  trainer job_trainer;
  int num_nodes = 1;
};

/// The trainer part of a runtime, as Kubeflow's `RuntimeTrainer`.
struct runtime_trainer {
  std::string trainer_type = "CustomTrainer";
  std::string framework;
  std::string image;
  int num_nodes = 1;
  std::string device = "Unknown";
  std::string device_count = "Unknown";
  std::vector<std::string> packages;
};

/// A training runtime, as Kubeflow's `Runtime`.
struct runtime {
  std::string name;
  runtime_trainer trainer;
  std::string kind = "ClusterTrainingRuntime";
};

/// One unit of a job that runs a process (`node-0`, `node-1`, …).
struct step {
  std::string name;
  job_status status = job_status::created;
  std::optional<int> exit_code;
  std::string reason;   ///< why it failed: "exit code 3", "cancelled", "lost", …
  std::int64_t pid = 0; ///< the process while it runs; 0 before it starts
};

/// A job as the engine knows it. `status` is derived from the event log.
struct train_job {
  std::string name;
  std::string runtime;
  std::vector<step> steps;
  int num_nodes = 1;
  clock::time_point creation_timestamp;
  job_status status = job_status::created;
  std::string reason;   ///< for Failed: the failing step's reason
};

/// One entry of a job's append-only event log.
struct event {
  std::int64_t seq = 0;     ///< order within the store
  clock::time_point time;
  std::string step;         ///< empty for job-level events
  std::string reason;       ///< Created, Started, Exited, StartFailed, CancelRequested, Cancelled, Lost
  std::string message;      ///< for a person
};

/// Options of `get_job_logs`.
struct log_options {
  std::string step = "node-0";
  bool follow = false;
  std::optional<std::size_t> tail;   ///< only the last N lines (then follow, if asked)
};

}  // namespace tjob
