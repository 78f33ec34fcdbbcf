// How `tjob run` and `tjob train` handle a job beyond building its request:
// the script's own arguments, the streaming of the job's logs, Ctrl-C, and
// what `run` exits with. Only the public API (include/tjob) is used.
#pragma once

#include <tjob/client.hpp>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace CLI {
class App;
}

namespace tjob::cli {

/// Writes all of `s` to stdout; false when stdout is gone (a closed pipe:
/// `tjob run ... | head`).
bool write_out(std::string_view s);
/// Writes log bytes: through the status line when one is shown (status_line.hpp), else write_out.
bool write_log(std::string_view s);

/// How many of argv's entries are tjob's: for `run` and `train` the first
/// positional (FILE.py) ends them and the rest are the script's own, flags
/// and `--` included, as `python FILE.py ARGS...` takes them. A `--` before
/// it means a program (the parser takes what follows); other commands are
/// whole.
int tjob_args_end(CLI::App& app, int argc, char** argv);

/// Writes the logs of `steps` (`options` but its step: follow, tail). One
/// step's output goes out as it is. With several, each line goes out after its
/// step's name ("[node-1] ..."): step after step without follow; with follow,
/// each step on a thread of its own, whole lines as they come, so a failing
/// node's traceback is seen whichever node it is. A reader that goes away
/// (`| head`) ends the streaming, not the job.
void stream_steps(trainer_client& client, const std::string& name, const std::vector<std::string>& steps,
                  log_options options = {.follow = true});

/// The names of a job's steps (node-0 when it has none yet).
std::vector<std::string> job_steps(trainer_client& client, const std::string& name);

/// Follows the logs of an array's members (`tjob run --array`) to their
/// ends, each line after its member's name ("[sweep-3] ...", or "[sweep-3
/// node-1] ..." for a job of several nodes). `followers` threads take the
/// members in order, each following one to its end before the next: every
/// line comes out, a member's whole lines together, though a member that runs
/// while its followers are busy comes out when one is free.
void stream_array(trainer_client& client, const std::vector<std::string>& names, std::size_t followers);

class run_interrupts;

/// `tjob run --array SPEC`: submits the members (all or nothing), streams
/// their logs after their names (stream_array), waits for them all, and
/// returns 0 when all ended Complete, else the first failed member's code
/// (128 + the signal when a signal cancelled them). `stream_step` must be
/// empty (usage_error otherwise, before anything is submitted).
int run_array(trainer_client& client, const train_request& req, const std::string& spec,
              const std::string& stream_step, run_interrupts& interrupts);

/// What `tjob run` exits with for a job that ended Failed: the exit code of
/// the step it failed of (the one whose reason is the job's), else of its
/// first failed step with one, in step order (as `docker run` exits with its
/// container's), else 1.
int exit_code_of(const train_job& job);

/// Ctrl-C (or SIGTERM, SIGHUP) while `tjob run` owns its jobs (one, or an
/// array's members): the first cancels them gracefully, the second kills them
/// now. Cancels run on threads of their own (a graceful one waits for the
/// job's end, and the second signal must not wait behind it); `detach` joins
/// them before the client goes.
class run_interrupts {
 public:
  explicit run_interrupts(double grace_seconds) : grace_(grace_seconds) {}
  ~run_interrupts() { detach(); }

  void on_signal(int sig);
  /// The jobs are there: a signal that came first cancels them now. `label`
  /// names them in messages (default: the first name).
  void attach(trainer_client& c, std::vector<std::string> names, std::string label = {});
  /// No cancel starts after this; those under way have ended.
  void detach();
  /// The first signal, 0 when none came.
  int first_signal() const;

 private:
  void cancel(bool force);

  double grace_;
  mutable std::mutex mu_;
  trainer_client* client_ = nullptr;
  std::vector<std::string> names_;
  std::string label_;
  int count_ = 0, first_ = 0;
  std::vector<std::thread> threads_;
};

/// While `tjob run` follows a job that restarts (--retries), says each
/// failed attempt on stderr as its Restarting event does ("tjob: job NAME:
/// attempt 1 of 3 failed (exit code 1): ...; attempt 2 starts in 1 s"),
/// between the attempts' log lines: a command's log is its program's bytes
/// alone. Follows the job on a thread of its own, woken by its changes;
/// ends (and joins) once the job has ended, or at the latest a few seconds
/// after it is destroyed.
class restart_notices {
 public:
  restart_notices(trainer_client& client, std::string job);
  restart_notices(const restart_notices&) = delete;
  restart_notices& operator=(const restart_notices&) = delete;
  ~restart_notices();

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread (and the threads it
/// creates later) and calls `on_signal` from a thread of its own for each.
void handle_signals(std::function<void(int)> on_signal);

/// This program's own executable (it supervises `tjob train`'s jobs).
std::string self_exe();

}  // namespace tjob::cli
