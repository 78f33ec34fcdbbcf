// The status line of `tjob run` and `tjob logs -f` on a terminal: one line
// below the streamed log, redrawn in place, with a bar, the percentage, the
// ETA and the latest metrics the job's code reported (tjob.report, Kubeflow's
// update_trainjob_status); before any report, the setup phase under way
// (venv, pip, the cached venv: tjob's "[tjob] " lines) or the job's status,
// with a spinner and the time it has taken. The line that begins a phase is
// shown there rather than printed; the line that ends it is printed.
//
// Only on a TTY (status_line_wanted): without one, or with --no-progress,
// nothing of this runs and the output is the log's bytes alone.
//
// Threading: a watcher thread of its own reads the job (wait_for_job_change);
//   write_log may be called from any thread (the log followers).
#pragma once

#include <tjob/client.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

namespace tjob::cli {

/// What the line shows.
struct status_view {
  std::string status;        ///< "Running", "Created (Queued #2)"
  std::string phase;         ///< a setup phase under way; empty: none
  double phase_seconds = 0;  ///< how long it has taken
  double elapsed = 0;        ///< since the display began
  std::optional<int> percent;
  std::optional<std::int64_t> eta;
  std::vector<std::pair<std::string, std::string>> metrics;
  unsigned tick = 0;  ///< the spinner's frame
};

/// The line for `v`, at most `width` - 1 characters (the last column stays
/// free: a terminal may wrap when it is written); `utf8`: block and braille
/// characters, else ASCII.
std::string render_status(const status_view& v, int width, bool utf8);

/// Whether stdout is a terminal a line can be redrawn on (not TERM=dumb).
bool status_line_wanted();

class status_line {
 public:
  status_line(trainer_client& client, std::string job);
  status_line(const status_line&) = delete;
  status_line& operator=(const status_line&) = delete;
  /// Stops the watcher and clears the line: what follows starts on a clean line.
  ~status_line();

  /// Writes log bytes above the line (false: stdout is gone). tjob's own
  /// lines that begin a setup phase are shown in the line instead.
  bool write_log(std::string_view bytes);

 private:
  void watch();
  void redraw_locked();
  std::string line_locked() const;

  trainer_client& client_;
  std::string job_;
  bool utf8_ = false;
  std::chrono::steady_clock::time_point began_, phase_began_;
  mutable std::mutex mu_;
  std::optional<train_job> seen_;
  std::string phase_, partial_;
  bool drawn_ = false, at_line_start_ = true, gone_ = false;
  bool passing_ = false;  // the rest of a partial line that went out goes out as it comes
  std::string held_;      // tjob's line that began the phase under way, not printed (yet)
  unsigned tick_ = 0;
  std::atomic<bool> stop_{false};
  std::thread watcher_;
};

/// The display the log followers write through while one exists (set by
/// status_line's constructor, cleared by its destructor); null: none.
status_line* active_status_line();

}  // namespace tjob::cli
