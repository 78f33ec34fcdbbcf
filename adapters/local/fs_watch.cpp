#include "adapters/local/fs_watch.hpp"

#include <boost/asio/posix/stream_descriptor.hpp>

#include <spdlog/spdlog.h>

#include <sys/inotify.h>
#include <unistd.h>
#include <algorithm>
#include <cstring>

namespace tjob::detail {

namespace asio = boost::asio;

struct fs_watch::impl : std::enable_shared_from_this<impl> {
  impl(asio::any_io_executor ex, std::shared_ptr<spdlog::logger> l, task_group& o)
      : descriptor(ex), log(std::move(l)), owner(o) {}

  asio::posix::stream_descriptor descriptor;
  std::shared_ptr<spdlog::logger> log;
  task_group& owner;
  std::map<int, named_wake_lists> subscribers;  // by watch descriptor; by file name in it
  bool reading = false;
  bool closed = false;

  bool ensure_open() {
    if (descriptor.is_open()) return true;
    if (closed) return false;
    int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) {
      log->warn("inotify_init1 failed: {}", std::strerror(errno));
      return false;
    }
    descriptor.assign(fd);
    return true;
  }

  void start_reading() {
    if (reading) return;
    reading = true;
    owner.spawn(read_loop(shared_from_this()), "inotify reader");  // it catches everything itself
  }

  // Wakes the subscribers of each event in `buf`.
  void dispatch(const char* buf, std::size_t n) {
    for_each_inotify_event(buf, n, [&](int wd, std::uint32_t mask, std::string_view name) {
      if (mask & IN_Q_OVERFLOW) {
        for (auto& [w, sub] : subscribers) sub.notify_all();
      } else if (auto it = subscribers.find(wd); it != subscribers.end()) {
        if (name.empty() || (mask & IN_DELETE_SELF))
          it->second.notify_all();  // the directory itself
        else
          it->second.notify(name);
      }
    });
  }

  static asio::awaitable<void> read_loop(std::shared_ptr<impl> self) {
    char buf[8192];
    try {
      while (self->descriptor.is_open()) {
        boost::system::error_code ec;
        co_await self->descriptor.async_wait(asio::posix::descriptor_base::wait_read,
                                             asio::redirect_error(asio::use_awaitable, ec));
        if (ec) break;
        for (;;) {
          ssize_t n = ::read(self->descriptor.native_handle(), buf, sizeof buf);
          if (n <= 0) break;
          self->dispatch(buf, static_cast<std::size_t>(n));
        }
      }
    } catch (const std::exception& e) {
      self->log->error("inotify reader stopped: {}", e.what());
    }
    self->reading = false;
    for (auto& [wd, sub] : self->subscribers) sub.notify_all();
  }
};

void for_each_inotify_event(const char* buf, std::size_t n,
                            const std::function<void(int, std::uint32_t, std::string_view)>& f) {
  for (const char* p = buf; p + sizeof(inotify_event) <= buf + n;) {
    inotify_event ev;
    std::memcpy(&ev, p, sizeof ev);
    const char* name = p + sizeof(inotify_event);
    std::size_t room = std::min<std::size_t>(ev.len, static_cast<std::size_t>(buf + n - name));
    f(ev.wd, ev.mask, std::string_view(name, ::strnlen(name, room)));  // (NUL-padded)
    p += sizeof(inotify_event) + ev.len;
  }
}

fs_watch::fs_watch(asio::any_io_executor ex, std::shared_ptr<spdlog::logger> log, task_group& owner)
    : impl_(std::make_shared<impl>(ex, std::move(log), owner)) {}

fs_watch::~fs_watch() { close(); }

int fs_watch::add(const std::filesystem::path& dir, wake_signal* w, const std::string& only) {
  if (!impl_->ensure_open()) return -1;
  int wd =
      ::inotify_add_watch(impl_->descriptor.native_handle(), dir.c_str(),
                          IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_DELETE_SELF | IN_CLOSE_WRITE);
  if (wd < 0) return -1;
  impl_->subscribers[wd].add(w, only);
  impl_->start_reading();
  return wd;
}

void fs_watch::remove(int wd, wake_signal* w) {
  if (wd < 0) return;
  auto it = impl_->subscribers.find(wd);
  if (it == impl_->subscribers.end()) return;
  it->second.remove(w);
  // The kernel returns the same wd for the same directory, so the watch stays
  // while anybody listens and goes with the last subscriber.
  if (it->second.empty()) {
    impl_->subscribers.erase(it);
    if (impl_->descriptor.is_open()) ::inotify_rm_watch(impl_->descriptor.native_handle(), wd);
  }
}

void fs_watch::close() {
  impl_->closed = true;
  boost::system::error_code ignored;
  impl_->descriptor.close(ignored);
  for (auto& [wd, sub] : impl_->subscribers) sub.notify_all();
}

}  // namespace tjob::detail
