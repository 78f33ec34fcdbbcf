// Watches directories with inotify and wakes subscribers when a file in them
// is written or created: how an engine follows jobs that another process owns
// (their store commits and log appends) without polling. One descriptor per
// engine, opened on first use.
#pragma once

#include "core/task_group.hpp"
#include "core/wake.hpp"

#include <boost/asio/any_io_executor.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace spdlog {
class logger;
}

namespace tjob::detail {

/// Calls `f(wd, mask, name)` for each event in `buf`, `n` bytes read from an
/// inotify descriptor (`name`: the file's, empty for the directory itself).
/// Not in a coroutine: a frame keeps neither the buffer's alignment nor room
/// for inotify_event's flexible array, so each header is copied out.
void for_each_inotify_event(const char* buf, std::size_t n,
                            const std::function<void(int, std::uint32_t, std::string_view)>& f);

class fs_watch {
 public:
  /// Its reader is a task of `owner`, which must outlive it; close() ends it.
  fs_watch(boost::asio::any_io_executor ex, std::shared_ptr<spdlog::logger> log, task_group& owner);
  ~fs_watch();

  /// Wakes `w` on changes in `dir` until `remove` is called with the result;
  /// with `only`, on changes of that file of `dir` alone (the store's wake
  /// file: not every file a program writes in $TJOB_HOME, as tjob serve's
  /// log). Returns -1 when the directory cannot be watched (the caller still
  /// has its timeout).
  int add(const std::filesystem::path& dir, wake_signal* w, const std::string& only = {});
  void remove(int wd, wake_signal* w);
  /// Stops reading; pending subscribers are woken.
  void close();

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace tjob::detail
