// The slurm backend's state and its parts, shared by its files:
// slurm_backend.cpp (reading, waiting, cancel, delete, the registration),
// slurm_train.cpp (submitting) and slurm_logs.cpp (the nodes' logs).
#pragma once

#include "adapters/process/run.hpp"
#include "adapters/slurm/slurm_backend.hpp"
#include "adapters/slurm/slurm_job.hpp"
#include "adapters/slurm/slurm_submit.hpp"
#include "core/outcome.hpp"
#include "core/task_group.hpp"
#include "core/wake.hpp"

#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tjob::slurm {

using detail::failure;
using detail::outcome;

/// The queue as one squeue showed it: tjob's jobs of this shared directory.
struct queue_snapshot {
  std::map<std::string, queue_row> by_id;  ///< Slurm's id -> row
  std::multimap<std::string, std::string> ids_by_name;
  /// When squeue was started: a job submitted later is not in it, and is not
  /// taken for one Slurm forgot.
  clock::time_point taken;
};

/// The row of the Slurm job `id` in `q`; nullopt for none (or no id).
inline std::optional<queue_row> row_of_id(const queue_snapshot& q, const std::string& id) {
  if (id.empty()) return std::nullopt;
  auto it = q.by_id.find(id);
  if (it == q.by_id.end()) return std::nullopt;
  return it->second;
}

/// Whether `q` can say that Slurm forgot the job of `f`: it was read after the
/// job was submitted. The id file's time is the shared file system's clock,
/// which may be a little off ours: a margin of a few seconds.
inline bool knows_of(const queue_snapshot& q, const job_files& f) {
  return f.submitted && q.taken > *f.submitted + std::chrono::seconds(3);
}

struct backend::impl : std::enable_shared_from_this<impl> {
  detail::backend_context ctx;
  slurm_config cfg;
  std::filesystem::path shared;  ///< the jobs' directories are here
  std::vector<std::string> command_env;  ///< over the inherited environment, for every command
  std::vector<std::string> clean_env;    ///< engine_config::clean_job_environment: what sbatch inherits
  std::vector<char*> clean_envp;
  bool stopping = false;
  detail::task_group tasks;

  // The shared poll of the queue: runs while someone watches.
  detail::wake_list waiters;  ///< woken after each read of the queue
  detail::wake_signal poll_now;  ///< cuts the poll's sleep short (a new waiter, a submit, a cancel)
  int watchers = 0;
  bool polling = false;
  std::optional<queue_snapshot> last_queue;  ///< the latest read; unset when the poll's failed
  std::string queue_trouble;                 ///< why the latest read failed
  std::chrono::steady_clock::time_point last_queue_at{};
  /// The read of the queue under way: a caller that comes meanwhile takes
  /// its answer instead of starting another squeue.
  struct queue_read {
    explicit queue_read(const boost::asio::any_io_executor& ex) : done(ex) {}
    std::optional<outcome<queue_snapshot>> result;
    boost::asio::steady_timer done;  ///< cancelled when `result` is set
  };
  std::shared_ptr<queue_read> reading;

  explicit impl(detail::backend_context c);

  std::string where() const { return "in the Slurm jobs of " + shared.string(); }
  failure not_found(const std::string& name) const;
  void check_running() const;
  std::filesystem::path dir_of(const std::string& name) const { return shared / name; }

  // --- Slurm's commands ---------------------------------------------------
  /// Runs one of Slurm's commands; `env` over command_env (and over the
  /// clean environment when `clean`). A program that is missing, a time
  /// limit passed or a non-zero exit is a failure quoting its stderr.
  boost::asio::awaitable<outcome<process::run_result>> command(std::vector<std::string> argv,
                                                               std::vector<std::string> env = {},
                                                               bool clean = false);
  /// tjob's jobs of this shared directory in Slurm's queue: one squeue,
  /// whose answer every caller that asks while it runs shares; it becomes
  /// last_queue when it is the newest.
  boost::asio::awaitable<outcome<queue_snapshot>> read_queue();
  boost::asio::awaitable<outcome<queue_snapshot>> read_queue_now();  ///< one squeue of its own

  // --- the jobs' files -----------------------------------------------------
  /// What the job's directory says; nullopt when there is no such job.
  /// `history`: also the nodes of the attempts before this one
  /// (job_files::earlier), which only the events show.
  std::optional<job_files> read_files(const std::string& name, bool history = false) const;
  /// How long `step`'s log was when attempt `attempt` ended (what the batch
  /// script recorded in attempt-<attempt>/); 0 when it recorded nothing.
  off_t log_size_at(const std::string& name, int attempt, const std::string& step) const;
  /// Every job directory's name, as the directory lists them.
  std::vector<std::string> job_names() const;

  // --- reading --------------------------------------------------------------
  /// The job from its files and a fresh read of the queue (or the poll's,
  /// when `polled` and it is recent). A queue that cannot be read leaves the
  /// files to say what they can.
  boost::asio::awaitable<outcome<train_job>> find(const std::string& name, bool polled = false);
  boost::asio::awaitable<train_job> get(const std::string& name);
  boost::asio::awaitable<std::vector<train_job>> list(std::optional<std::string> runtime);
  boost::asio::awaitable<std::vector<event>> events(const std::string& name);

  // --- waiting --------------------------------------------------------------
  /// Keeps the poll running while it lives.
  struct watcher {
    std::shared_ptr<impl> b;
    explicit watcher(std::shared_ptr<impl> bk);
    ~watcher();
    watcher(const watcher&) = delete;
    watcher& operator=(const watcher&) = delete;
  };
  boost::asio::awaitable<void> poll_loop();
  /// Until `done(job)` holds (nullopt: the job is gone) or the deadline.
  boost::asio::awaitable<bool> wait_until(const std::string& name, std::chrono::steady_clock::time_point deadline,
                                          const std::function<bool(const std::optional<train_job>&)>& done);

  // --- acting -----------------------------------------------------------------
  boost::asio::awaitable<std::string> train(detail::checked_request c);
  /// A job's dependencies: the sbatch --dependency items on the Slurm ids
  /// of the jobs named ("afterok:42"), and why it can never start when one
  /// that has ended already is not as it needs (empty: it can).
  struct dependencies {
    std::vector<std::string> ids;
    std::string never;
  };
  boost::asio::awaitable<dependencies> dependencies_of(const std::string& me, const train_request& r);
  /// The job name that throttles the next member of `array` (array_limit).
  std::string array_slot(const std::string& array, int limit);
  std::map<std::string, int> array_members;  ///< members submitted so far, by array
  void make_job_dir(const std::string& me, const std::filesystem::path& dir,
                    const std::vector<std::pair<std::string, std::string>>& files);
  boost::asio::awaitable<void> cancel(const std::string& name, bool force, bool checkpoint);
  boost::asio::awaitable<bool> warn_before_cancel(const std::string& name, const job_files& f);
  boost::asio::awaitable<void> remove(const std::string& name);
  boost::asio::awaitable<log_stream> logs(const std::string& name, const log_options& o);
};

/// Writes `text` to `path` through a temporary file and a rename, mode 0600.
/// Returns false (errno set) when it cannot.
bool write_file(const std::filesystem::path& path, std::string_view text, mode_t mode = 0600);

}  // namespace tjob::slurm
