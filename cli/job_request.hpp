// What `run` and `train` make of their options: the job's train_request
// (a Python file and its venv options, or a command after `--`), and the
// usage errors (exit 2) the CLI raises when an option cannot be used.
#pragma once

#include <tjob/backends.hpp>
#include <tjob/types.hpp>

#include <stdexcept>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace tjob::cli {

/// An option or argument that cannot be used; the CLI exits 2 with its text.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct job_options {
  std::string name, runtime, workdir;
  std::string code_dir;  // --working-dir: sent with the job
  std::vector<std::string> env, labels, annotations;
  std::vector<std::string> command;
  bool command_mode = false;  // `--` was given: run a program, not Python
  std::vector<std::string> packages, index_urls;
  std::string func, args, python, resources, image;
  int num_nodes = 1;
  bool system_site_packages = false, keep_venv = false, refresh = false;
  int priority = 0;
  std::vector<std::string> after_ok, after_any, after_not_ok;
  std::string array;                       // train --array: 0-99%8
  std::string deadline;                    // --deadline: seconds, or 90s, 10m, 2h
  std::string warning;                     // --signal: SIG[@TIME] before the deadline
  std::string begin;                       // --begin: not before this time
  int retries = 0;                         // --retries: max_restarts
  std::vector<int> retry_on, no_retry_on;  // --retry-on, --no-retry-on: exit codes
  std::string retry_backoff;               // --retry-backoff: INITIAL[,FACTOR[,MAX]]
  std::string stream_step;                 // run: the one step to stream (default: every node)
  bool no_progress = false;                // run: no status line on a terminal
};

/// The options of a job, for `run` and `train` alike.
void add_job_options(CLI::App* cmd, job_options& o);

/// The request `o` describes, for the backend that runs it (what it does:
/// where a working directory is, whether it takes an image and keeps labels). Throws usage_error naming the
/// option and the fix.
train_request make_request(const job_options& o, const backend_capabilities& backend);

/// The requests of `req` as the members of array `spec` (tjob::array_members:
/// NAME-<i>, each with TJOB_ARRAY_INDEX=<i>). Throws usage_error.
std::vector<train_request> array_requests(const train_request& req, const std::string& spec);

/// `--deadline`: whole seconds ("3600") or a duration of whole units ("90s",
/// "10m", "2h", "1h30m"); at least one second. Throws usage_error.
std::chrono::seconds parse_deadline(const std::string& value);

/// `--retry-backoff INITIAL[,FACTOR[,MAX]]` onto `p`: durations as 500ms,
/// 2s, 1m or plain seconds (1.5), the factor a number (2). Throws usage_error.
void parse_retry_backoff(const std::string& value, retry_policy& p);

/// `logs --since`: a duration back from `now` as kubectl and Docker take it
/// ("90s", "10m", "1h30m", "1.5h"; units ns, us, ms, s, m, h) or a time in
/// RFC 3339 ("2026-12-03T19:00:00Z", "...+01:00"). Throws usage_error.
clock::time_point parse_since(const std::string& value, clock::time_point now);

}  // namespace tjob::cli
