#include "adapters/local/log_clock.hpp"

#include "adapters/local/fs_watch.hpp"
#include "adapters/local/log_files.hpp"

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <spdlog/spdlog.h>

#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cstring>
#include <map>
#include <optional>
#include <set>

namespace tjob::detail {

namespace asio = boost::asio;

struct log_clock::impl : std::enable_shared_from_this<impl> {
  impl(asio::any_io_executor ex, std::shared_ptr<spdlog::logger> l, task_group& o)
      : descriptor(ex), rest(ex), log(std::move(l)), owner(o) {}

  struct entry {
    std::string log_path;
    std::filesystem::path times_path;  // made at the first record: a silent job never needs it
    int wd = -1;                       // its inotify watch; -1: none
    log_time_record last{0, 0};
    bool complained = false;
  };

  asio::posix::stream_descriptor descriptor;
  asio::steady_timer rest;
  std::shared_ptr<spdlog::logger> log;
  task_group& owner;
  std::map<int, entry> entries;  // by id
  std::map<int, int> by_wd;      // watch descriptor -> id
  int next_id = 0;
  bool reading = false;
  bool closed = false;
  bool unavailable = false;                           // inotify could not be had; said once
  std::optional<asio::any_io_executor> last_records;  // write_last_records_on
  struct last_record {
    std::filesystem::path times_path;
    log_time_record r;
    std::string log_path;
  };
  std::vector<last_record> held;  // finished logs' last records, until write_held

  static void write(const std::vector<last_record>& records, spdlog::logger& l) {
    for (const auto& h : records)
      if (auto ec = append_time_record(h.times_path, h.r))
        l.warn("cannot write the line times of {}: {}", h.log_path, ec.message());
  }

  bool ensure_open() {
    if (descriptor.is_open()) return true;
    if (closed || unavailable) return false;
    int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) {
      unavailable = true;
      log->debug(
          "log times: inotify_init1 failed ({}); lines get the time of the last write before they are read",
          std::strerror(errno));
      return false;
    }
    descriptor.assign(fd);
    return true;
  }

  // The record to append when the log has grown since the last one. Times
  // never go back (a clock set back keeps the last).
  static std::optional<log_time_record> next_record(const entry& e) {
    struct stat st {};
    if (::stat(e.log_path.c_str(), &st) != 0) return std::nullopt;
    auto size = static_cast<std::uint64_t>(st.st_size);
    if (size <= e.last.size) return std::nullopt;
    std::int64_t ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    return log_time_record{size, std::max(ns, e.last.ns)};
  }

  static const std::filesystem::path& times_path(entry& e) {
    if (e.times_path.empty()) e.times_path = times_path_of(e.log_path);
    return e.times_path;
  }

  void record(entry& e) {
    auto next = next_record(e);
    if (!next) return;
    auto r = *next;
    if (auto ec = append_time_record(times_path(e), r)) {
      if (!std::exchange(e.complained, true))
        log->warn("cannot write the line times of {}: {}", e.log_path, ec.message());
      return;
    }
    e.last = r;
  }

  void dispatch(const char* buf, std::size_t n, std::set<int>& grown) {
    for_each_inotify_event(buf, n, [&](int wd, std::uint32_t mask, std::string_view) {
      if (mask & IN_Q_OVERFLOW) {
        for (const auto& [id, e] : entries) grown.insert(id);
      } else if (auto it = by_wd.find(wd); it != by_wd.end()) {
        grown.insert(it->second);
      }
    });
  }

  static asio::awaitable<void> read_loop(std::shared_ptr<impl> self) {
    char buf[4096];
    try {
      while (self->descriptor.is_open()) {
        boost::system::error_code ec;
        co_await self->descriptor.async_wait(asio::posix::descriptor_base::wait_read,
                                             asio::redirect_error(asio::use_awaitable, ec));
        if (ec) break;
        std::set<int> grown;
        for (;;) {
          ssize_t n = ::read(self->descriptor.native_handle(), buf, sizeof buf);
          if (n <= 0) break;
          self->dispatch(buf, static_cast<std::size_t>(n), grown);
        }
        for (int id : grown)
          if (auto it = self->entries.find(id); it != self->entries.end()) self->record(it->second);
        // The writes of the next 50 ms wait in the kernel's queue (merged,
        // one event per log), and come as one batch.
        self->rest.expires_after(std::chrono::milliseconds(50));
        co_await self->rest.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
    } catch (const std::exception& e) {
      self->log->error("log times: the inotify reader stopped: {}", e.what());
    }
    self->reading = false;
  }

  int add(const std::string& log_path) {
    int id = next_id++;
    entry e;
    e.log_path = log_path;
    if (ensure_open()) {
      e.wd = ::inotify_add_watch(descriptor.native_handle(), log_path.c_str(), IN_MODIFY);
      if (e.wd >= 0) {
        by_wd[e.wd] = id;
        if (!reading) {
          reading = true;
          owner.spawn(read_loop(shared_from_this()), "log times reader");  // it catches everything itself
        }
      } else {
        log->debug("log times: cannot watch {}: {}", log_path, std::strerror(errno));
      }
    }
    entries.emplace(id, std::move(e));
    return id;
  }

  void mark(int id) {
    if (auto it = entries.find(id); it != entries.end()) record(it->second);
  }

  void finish(int id) {
    auto it = entries.find(id);
    if (it == entries.end()) return;
    if (!last_records || closed) {  // (after close() nothing would write what is held)
      record(it->second);
    } else if (auto r = next_record(it->second)) {
      held.push_back({times_path(it->second), *r, it->second.log_path});
    }
    if (it->second.wd >= 0) {
      by_wd.erase(it->second.wd);
      if (descriptor.is_open()) ::inotify_rm_watch(descriptor.native_handle(), it->second.wd);
    }
    entries.erase(it);
  }
};

log_clock::log_clock(asio::any_io_executor ex, std::shared_ptr<spdlog::logger> log, task_group& owner)
    : impl_(std::make_shared<impl>(ex, std::move(log), owner)) {}

log_clock::~log_clock() { close(); }

void log_clock::write_last_records_on(asio::any_io_executor pool) { impl_->last_records = std::move(pool); }

void log_clock::write_held() {
  if (impl_->held.empty()) return;
  asio::post(*impl_->last_records,
             [records = std::exchange(impl_->held, {}), l = impl_->log] { impl::write(records, *l); });
}

log_clock::tracked log_clock::track(const std::string& log_path) { return {impl_, impl_->add(log_path)}; }

void log_clock::close() {
  impl::write(std::exchange(impl_->held, {}), *impl_->log);
  impl_->closed = true;
  boost::system::error_code ignored;
  impl_->rest.cancel();
  impl_->descriptor.close(ignored);
  impl_->by_wd.clear();
  for (auto& [id, e] : impl_->entries) e.wd = -1;
}

log_clock::tracked::tracked(tracked&& o) noexcept
    : clock_(std::move(o.clock_)), id_(std::exchange(o.id_, -1)) {}

log_clock::tracked& log_clock::tracked::operator=(tracked&& o) noexcept {
  if (this != &o) {
    finish();
    clock_ = std::move(o.clock_);
    id_ = std::exchange(o.id_, -1);
  }
  return *this;
}

log_clock::tracked::~tracked() { finish(); }

void log_clock::tracked::mark() {
  if (clock_) clock_->mark(id_);
}

void log_clock::tracked::finish() {
  if (clock_) clock_->finish(id_);
  clock_.reset();
  id_ = -1;
}

}  // namespace tjob::detail
