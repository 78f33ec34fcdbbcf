#include <tjob/client.hpp>

#include "core/messages.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <pthread.h>
#include <unistd.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <future>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>

namespace tjob {

namespace asio = boost::asio;

struct trainer_client::impl {
  explicit impl(engine_config config)
      : cfg(config),
        eng(std::in_place, ctx.get_executor(), std::move(config)),
        work(ctx.get_executor()),
        thread([this] {
          ::pthread_setname_np(::pthread_self(), "tjob-engine");  // the reactor, as top -H shows it
          run_reactor();
        }) {}

  // A handler that throws out of the reactor (out of memory while a job's
  // failure is being recorded, issue 43) leaves the engine's state half
  // changed, and every caller waiting on it would wait forever: the process
  // says why and exits. Its jobs are then what a killed tjob leaves, and the
  // next tjob reconciles them (Failed, reason lost). Nothing here allocates.
  void run_reactor() noexcept {
    const char* what = "unknown error";
    bool memory = false;
    try {
      ctx.run();
      return;
    } catch (const std::bad_alloc& e) {
      memory = true;
      what = e.what();
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    auto say = [](const char* text) { [[maybe_unused]] auto n = ::write(2, text, std::strlen(text)); };
    say(memory ? "tjob: error: the engine ran out of memory (" : "tjob: error: the engine failed (");
    say(what);
    say(memory ? "); it cannot go on: raise the limit on its memory (ulimit -v) or free some. Its jobs that "
                 "were running are recorded as Failed, reason lost, by the next tjob command\n"
               : "); it cannot go on. Its jobs that were running are recorded as Failed, reason lost, by "
                 "the next tjob command\n");
    std::_Exit(1);
  }

  ~impl() {
    try {
      call(eng->shutdown());
    } catch (...) {
    }
    work.reset();
    ctx.stop();
    thread.join();
    eng.reset();
  }

  // What an operation gave, carried back to the caller's thread as values: an
  // exception object never crosses threads (libstdc++ frees it through a
  // reference count ThreadSanitizer cannot see, so it reported every error
  // returned this way as a race).
  template <class T>
  struct outcome {
    std::conditional_t<std::is_void_v<T>, bool, std::optional<T>> value{};
    std::optional<error> failure;
    std::optional<std::string> other;  // what() of anything that is not a tjob::error
  };

  template <class T>
  static asio::awaitable<outcome<T>> guarded(asio::awaitable<T> op) {
    outcome<T> r;
    try {
      if constexpr (std::is_void_v<T>)
        co_await std::move(op);
      else {
        T v = co_await std::move(op);  // named: g++ 12 mishandles a co_await inside a call's arguments
        r.value.emplace(std::move(v));
      }
    } catch (const error& e) {
      r.failure.emplace(e.code(), e.what(), e.diagnostics());
    } catch (const std::system_error& e) {  // a thread the OS would not give (ulimit -u, -v): say which limit
      const int err = e.code() == std::errc::resource_unavailable_try_again ? EAGAIN
                      : e.code() == std::errc::not_enough_memory            ? ENOMEM
                                                                            : 0;
      r.other = err ? std::string(e.what()) + "; " + detail::fix_for_errno(err, "") : std::string(e.what());
    } catch (const std::bad_alloc&) {
      r.other = detail::fix_for_errno(ENOMEM, "");
    } catch (const std::exception& e) {
      r.other = e.what();
    }
    co_return r;
  }

  template <class T>
  T call(asio::awaitable<T> op) {
    auto r = asio::co_spawn(ctx, guarded(std::move(op)), asio::use_future).get();
    if (r.failure) throw error(*r.failure);
    if (r.other) throw std::runtime_error(*r.other);
    if constexpr (!std::is_void_v<T>) return std::move(*r.value);
  }

  engine_config cfg;  // as given (train_detached hands it to the supervisor)
  asio::io_context ctx{1};
  std::optional<engine> eng;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::thread thread;
};

struct log_reader::impl {
  trainer_client::impl* client = nullptr;
  log_stream stream;

  // A stream's state is the engine's (its watches, its wake-ups): it goes on
  // the engine's thread, never on the caller's (ThreadSanitizer caught the
  // inotify subscribers being erased here while the reactor read them).
  ~impl() {
    try {
      if (client) client->call(release(std::move(stream)));
    } catch (...) {
    }
  }
  static asio::awaitable<void> release(log_stream s) {
    { log_stream gone = std::move(s); }
    co_return;
  }
};

log_reader::log_reader(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
log_reader::log_reader(log_reader&&) noexcept = default;
log_reader& log_reader::operator=(log_reader&&) noexcept = default;
log_reader::~log_reader() = default;

std::optional<std::string> log_reader::next() { return impl_->client->call(impl_->stream.next()); }

std::optional<std::string> log_reader::read_some() { return impl_->client->call(impl_->stream.read_some()); }

std::string log_reader::read_all() {
  std::string out;
  while (auto chunk = read_some()) out += *chunk;
  return out;
}

trainer_client::trainer_client(engine_config config) : impl_(std::make_unique<impl>(std::move(config))) {}
trainer_client::~trainer_client() = default;

std::string trainer_client::train(train_request request) {
  return impl_->call(impl_->eng->train(std::move(request)));
}
train_job trainer_client::get_job(const std::string& name) { return impl_->call(impl_->eng->get_job(name)); }
std::vector<train_job> trainer_client::list_jobs(std::optional<std::string> runtime) {
  return impl_->call(impl_->eng->list_jobs(std::move(runtime)));
}
std::vector<train_job> trainer_client::wait_for_jobs_change(const std::vector<train_job>& known,
                                                            std::optional<std::string> runtime,
                                                            std::chrono::milliseconds timeout) {
  return impl_->call(impl_->eng->wait_for_jobs_change(known, std::move(runtime), timeout));
}
train_job trainer_client::wait_for_job_change(const std::string& name, const train_job& known,
                                              std::chrono::milliseconds timeout) {
  return impl_->call(impl_->eng->wait_for_job_change(name, known, timeout));
}
log_reader trainer_client::get_job_logs(const std::string& name, log_options options) {
  auto stream = impl_->call(impl_->eng->get_job_logs(name, std::move(options)));
  auto reader = std::make_unique<log_reader::impl>();
  reader->client = impl_.get();
  reader->stream = std::move(stream);
  return log_reader(std::move(reader));
}
train_job trainer_client::wait_for_job_status(const std::string& name, std::set<job_status> statuses,
                                              std::chrono::milliseconds timeout) {
  return impl_->call(impl_->eng->wait_for_job_status(name, std::move(statuses), timeout));
}
void trainer_client::cancel_job(const std::string& name, cancel_options options) {
  impl_->call(impl_->eng->cancel_job(name, options));
}
void trainer_client::cancel_jobs(const std::vector<std::string>& names, cancel_options options) {
  std::vector<std::future<impl::outcome<void>>> pending;
  pending.reserve(names.size());
  for (const auto& n : names)
    pending.push_back(
        asio::co_spawn(impl_->ctx, impl::guarded(impl_->eng->cancel_job(n, options)), asio::use_future));
  std::optional<error> first;
  for (auto& f : pending) {
    auto r = f.get();
    if (first) continue;
    if (r.failure && r.failure->code() != errc::job_not_found)
      first = std::move(r.failure);
    else if (r.other)
      first.emplace(make_error_code(errc::backend_error), *r.other);
  }
  if (first) throw error(*first);
}
void trainer_client::delete_job(const std::string& name) { impl_->call(impl_->eng->delete_job(name)); }
std::vector<event> trainer_client::get_job_events(const std::string& name) {
  return impl_->call(impl_->eng->get_job_events(name));
}
std::vector<queue_entry> trainer_client::get_queue() { return impl_->call(impl_->eng->get_queue()); }

backend_capabilities trainer_client::job_backend() { return impl_->call(impl_->eng->job_backend()); }
std::vector<runtime> trainer_client::list_runtimes() { return impl_->call(impl_->eng->list_runtimes()); }
std::vector<std::string> trainer_client::runtime_problems() {
  return impl_->call(impl_->eng->runtime_problems());
}
runtime trainer_client::get_runtime(const std::string& name) {
  return impl_->call(impl_->eng->get_runtime(name));
}
std::vector<venv_cache_entry> trainer_client::list_venv_cache() {
  return impl_->call(impl_->eng->list_venv_cache());
}
std::vector<venv_cache_entry> trainer_client::prune_venv_cache(std::chrono::seconds unused_for) {
  return impl_->call(impl_->eng->prune_venv_cache(unused_for));
}
store_check trainer_client::check_store(bool repair) { return impl_->call(impl_->eng->check_store(repair)); }
const std::filesystem::path& trainer_client::home() const { return impl_->eng->home(); }
const engine_config& trainer_client::config() const { return impl_->cfg; }

}  // namespace tjob
