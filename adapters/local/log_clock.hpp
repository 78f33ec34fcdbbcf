// The times of the lines of the logs this engine's jobs write (log_files.hpp
// says how a line's time is read back). One inotify descriptor, opened on
// first use, watches each running step's log; each time a log has grown the
// clock appends a record of its size and modification time, then rests
// 50 ms, so a chatty job costs at most 20 records a second and the engine as
// many wake-ups. Without inotify (no instance left) there are records only
// when the step ends and when a reader asks (mark).
#pragma once

#include "core/task_group.hpp"

#include <boost/asio/any_io_executor.hpp>

#include <memory>
#include <string>

namespace spdlog {
class logger;
}

namespace tjob::detail {

class log_clock {
  struct impl;

 public:
  /// Its reader is a task of `owner`, which must outlive it; close() ends it.
  log_clock(boost::asio::any_io_executor ex, std::shared_ptr<spdlog::logger> log, task_group& owner);
  log_clock(const log_clock&) = delete;
  log_clock& operator=(const log_clock&) = delete;
  ~log_clock();

  /// One log watched; a last record is written when it is finished or
  /// destroyed.
  class tracked {
   public:
    tracked() = default;
    tracked(tracked&& o) noexcept;
    tracked& operator=(tracked&& o) noexcept;
    ~tracked();
    /// Records the log as it is now, if it has grown: what a reader of its
    /// times is about to read gets its final time.
    void mark();
    /// The last record; the watch ends.
    void finish();

   private:
    friend class log_clock;
    tracked(std::shared_ptr<impl> c, int id) : clock_(std::move(c)), id_(id) {}
    std::shared_ptr<impl> clock_;
    int id_ = -1;
  };

  tracked track(const std::string& log_path);
  /// Stops watching (the tracked logs still get their last records).
  void close();
  /// Where a finished log's last record is written (the engine's pool),
  /// once write_held() is called (after the commit that follows the step's
  /// end): a log's first record makes its times file, and on a disk
  /// filesystem that costs a directory and an inode, which the step's end
  /// and the waiters it wakes would otherwise wait for, and which would
  /// contend with that commit's writes. A reader that comes first gives the
  /// log's last lines its modification time, which is the time that record
  /// holds. Without it (tests), the record is written at once.
  void write_last_records_on(boost::asio::any_io_executor pool);
  /// Hands the last records held since the last call to the pool.
  void write_held();

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace tjob::detail
