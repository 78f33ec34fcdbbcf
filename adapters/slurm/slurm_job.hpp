// What a Slurm job of tjob's is made of, and how its state is read: the
// record tjob writes in the job's directory, the files its nodes leave there
// (a start, an exit, a log each), the line squeue shows for it, and the fold
// of these into a train_job and its events. Pure functions of values; the
// backend (slurm_backend.cpp) reads the files and runs squeue.
//
// Threading: values only.
#pragma once

#include "core/progress.hpp"

#include <tjob/types.hpp>

#include <boost/json/object.hpp>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tjob::slurm {

/// What tjob records of a job when it submits it (the job's `job.json`).
struct job_record {
  std::string name;
  std::string runtime;
  int num_nodes = 1;
  clock::time_point created;
  std::map<std::string, std::string> labels, annotations;
  std::string array;
  retry_policy retry;  ///< a restart runs every node again
  std::optional<stop_warning> warning;  ///< sbatch --signal; also what a cancel with checkpoint sends
};

boost::json::object to_json(const job_record& r);
/// nullopt when `text` is not a record (a partly written or foreign file).
std::optional<job_record> record_from_json(std::string_view text);

/// The Slurm job's comment: tjob's mark with the shared directory, so that
/// `tjob list` tells its jobs from a cluster's others (and from another tjob
/// home's), and a user of squeue sees the name, runtime and labels.
std::string comment_of(const job_record& r, const std::string& shared_dir);
/// The name a comment carries, when it is tjob's for `shared_dir`.
std::optional<std::string> name_in_comment(std::string_view comment, const std::string& shared_dir);

/// One line of squeue for a job (queue_format's fields).
struct queue_row {
  std::string id;      ///< Slurm's job id
  std::string state;   ///< PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
  std::string reason;  ///< why it pends (Priority, Resources, Dependency, ...) or ended
  std::optional<clock::time_point> start, end, submit;
  std::string nodes;
  std::string comment;
};

/// squeue's -o format that parse_queue reads (run with SLURM_TIME_FORMAT=%s,
/// so that times are seconds since the epoch): the comment last, as it may
/// hold the separator.
inline constexpr const char* queue_format = "%i|%T|%r|%S|%e|%V|%N|%k";
/// The rows of squeue's output in queue_format; lines that are not rows
/// are skipped.
std::vector<queue_row> parse_queue(std::string_view out);

/// A state Slurm no longer changes.
bool is_ended_state(std::string_view state);

/// What one node of the job left in the job's directory.
struct node_files {
  std::optional<clock::time_point> started;  ///< node-<i>.start
  std::optional<int> exit_code;              ///< node-<i>.exit: the code (128 + signal)
  std::optional<clock::time_point> exited;
};

/// A restart of the job (a line of its `restarts` file): attempt `attempt`
/// failed, and the next began. The batch script restarts every node, in the
/// job's allocation, when `node`'s exit code is retried, after `wait`; Slurm
/// requeues the job itself when a node failed or the job was preempted (no
/// node, no exit code).
struct restart_record {
  int attempt = 1;
  std::optional<int> exit_code;
  std::string node;  ///< "node-1"; empty when Slurm requeued it
  std::chrono::milliseconds wait{0};
  clock::time_point at;
};

/// The batch script's `restarts` file: "ATTEMPT CODE NODE WAIT NS" a line
/// ("-" for no code or node: Slurm requeued it; WAIT in seconds), the
/// attempts in order; a line that does not read (one being written) ends it.
std::vector<restart_record> parse_restarts(const std::string& text);

/// Everything the job's directory says, read at one time.
struct job_files {
  job_record record;
  std::string slurm_id;  ///< empty: not submitted (yet), or tjob ended it itself
  std::optional<clock::time_point> submitted;  ///< when the id was recorded
  std::vector<node_files> nodes;               ///< the current attempt's
  /// The restarts so far, and the nodes of the attempts before this one
  /// (`attempt-<k>/`, read for the events only): earlier[k-1] is attempt k's.
  std::vector<restart_record> restarts;
  std::vector<std::vector<node_files>> earlier;
  int attempt() const { return static_cast<int>(restarts.size()) + 1; }
  /// `end`: the batch script's own end ("0 srun", "1 setup", "1 requeued"
  /// when Slurm requeued it with no restarts left).
  std::optional<int> end_code;
  std::string end_what;
  std::optional<clock::time_point> ended;
  /// `cancel`: tjob was asked to cancel it, and when.
  std::optional<clock::time_point> cancel_requested;
  /// `never`: it was not submitted, as a dependency can never be met (the
  /// reason, for the person).
  std::string never;
  std::optional<clock::time_point> never_at;
  /// `progress.json`: the latest report of its training code (tjob.report
  /// with TJOB_PROGRESS_FILE), and when it was written.
  std::optional<detail::progress_report> progress;
  std::optional<clock::time_point> progress_at;
};

/// `s` without the newlines and spaces at its end (a file's one line, a command's answer).
std::string trimmed(std::string s);

/// A time written as nanoseconds since the epoch (`date +%s%N`).
clock::time_point from_ns(std::int64_t ns);

/// The file of a job's directory that its training code's reports go to.
inline constexpr const char* progress_file = "progress.json";

/// The job as tjob shows it. `row` is squeue's line for it; `queue_known`
/// says squeue answered (a job it does not list was then forgotten by
/// Slurm: past MinJobAge, without accounting).
train_job fold(const job_files& f, const std::optional<queue_row>& row, bool queue_known);

/// Its events, in order, from the same reading.
std::vector<event> events_of(const job_files& f, const std::optional<queue_row>& row, bool queue_known);

/// The reason of a Failed job whose Slurm job ended `state` with `reason`,
/// when the state says more than the nodes' exits (a timeout, a cancel, a
/// node failure); empty when the nodes' exits tell it.
std::string reason_of_state(std::string_view state, std::string_view reason, bool cancel_requested);

}  // namespace tjob::slurm
