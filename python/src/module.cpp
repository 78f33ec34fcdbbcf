// tjob._tjob: the engine for Python. One engine per Client, on a reactor
// thread of its own; Python never blocks it. Every operation is started with
// a target (a channel and a callable): when it ends, the reactor queues the
// result on the channel and wakes it through an eventfd, without taking the
// GIL; whoever waits (a blocking call's thread in select(), an asyncio loop's
// reader) drains the channel, and the result is converted and handed to the
// callable there, where the GIL is held anyway. There is no thread per call.
// Each operation can be cancelled (Call.cancel: a wait, a log read);
// cancelling a wait leaves the job running.
//
// Uses only the public API (include/tjob), as the CLI does.
#include "values.hpp"

#include <boost/json/serialize.hpp>
#include <tjob/wire.hpp>
#include <tjob/client.hpp>
#include <tjob/engine.hpp>
#include <tjob/spec.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sys/eventfd.h>
#include <unistd.h>
#include <cerrno>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace py = pybind11;
namespace asio = boost::asio;

namespace {

using namespace tjob::python;
using tjob::clock;

// --- the reactor -------------------------------------------------------------

/// Completions for one waiter (a thread of the blocking client, an asyncio
/// loop), in batches: the reactor queues each one and writes an eventfd (once
/// a batch) without taking the GIL; the waiter's drain converts them and calls
/// their callables on its own thread, where the GIL is held anyway. A thousand
/// jobs ending together are one wake-up of the loop, not a thousand GIL
/// hand-offs to the reactor, and a busy Python thread never holds the reactor.
struct channel {
  int fd;
  std::mutex m;
  std::vector<std::function<void()>> ready;  // each run with the GIL held

  channel() : fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  }
  ~channel() { ::close(fd); }
  void push(std::function<void()> f) {
    bool first;
    {
      std::lock_guard lock(m);
      first = ready.empty();
      ready.push_back(std::move(f));
    }
    if (first) {
      std::uint64_t one = 1;
      [[maybe_unused]] auto n = ::write(fd, &one, sizeof one);
    }
  }
  // With the GIL: what has arrived since the last drain.
  void drain() {
    std::uint64_t n;
    [[maybe_unused]] auto r = ::read(fd, &n, sizeof n);
    std::vector<std::function<void()>> now;
    {
      std::lock_guard lock(m);
      now.swap(ready);
    }
    for (auto& f : now) f();
  }
};

/// Where a completion goes: a callable, called by the channel's drain.
struct target {
  std::shared_ptr<channel> ch;
  py::object fn;
};

/// One operation in flight: cancel() stops it where it waits.
struct call {
  asio::any_io_executor ex;
  std::shared_ptr<asio::cancellation_signal> signal = std::make_shared<asio::cancellation_signal>();
  void cancel() {
    asio::post(ex, [s = signal] { s->emit(asio::cancellation_type::terminal); });
  }
};

struct core : std::enable_shared_from_this<core> {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread;
  std::unique_ptr<tjob::engine> engine;
  bool closed = false;
  // The operations started and not ended (reactor thread only): close()
  // cancels them and waits for the last before the engine goes, as the
  // engine's lifetime rule asks; nothing runs detached from this owner.
  std::set<asio::cancellation_signal*> running;
  asio::steady_timer idle{io, std::chrono::steady_clock::time_point::max()};  // woken when none runs

  // Starts `op` (an awaitable of T made on the reactor) and calls `done` with
  // what `convert` makes of its result, or with the error.
  template <class T, class Op, class Convert>
  std::shared_ptr<call> start(Op op, py::object done, Convert convert) {
    if (closed) throw py::value_error("tjob: this client is closed");
    auto c = std::make_shared<call>();
    c->ex = io.get_executor();
    if (!py::isinstance<target>(done))
      throw py::type_error("tjob: an operation's done must be a Channel target");
    auto& t = done.cast<target&>();
    std::shared_ptr<channel> ch = t.ch;
    // py::object is released only with the GIL held: a holder that does so.
    auto cb = std::shared_ptr<py::object>(new py::object(t.fn), [](py::object* o) {
      py::gil_scoped_acquire gil;
      delete o;
    });
    // On the draining thread, with the GIL: the result (or the error) handed to the callable.
    auto deliver = [cb, convert](std::exception_ptr e, T& value) {
      try {
        if (e)
          (*cb)(py::none(), error_tuple(e));
        else
          (*cb)(convert(std::move(value)), py::none());
      } catch (py::error_already_set& x) {
        x.discard_as_unraisable("tjob callback");
      }
    };
    auto self = shared_from_this();
    auto signal = c->signal;
    // Posted in order before any close(), so the engine is still there when it starts.
    asio::co_spawn(
        io.get_executor(),
        [self, signal, op = std::move(op)]() mutable -> asio::awaitable<T> {
          self->running.insert(signal.get());
          co_return co_await op(*self->engine);
        },
        asio::bind_cancellation_slot(
            signal->slot(), [self, signal, ch, deliver](std::exception_ptr e, T value) mutable {
              ch->push([deliver, e, value = std::make_shared<T>(std::move(value))]() mutable {
                deliver(e, *value);
              });
              self->running.erase(signal.get());
              if (self->running.empty()) self->idle.cancel();
            }));
    return c;
  }

  void open(tjob::engine_config cfg) {
    thread = std::thread([this] { io.run(); });
    std::promise<void> made;
    auto fut = made.get_future();
    asio::post(io, [&] {
      try {
        engine = std::make_unique<tjob::engine>(io.get_executor(), std::move(cfg));
        made.set_value();
      } catch (...) {
        made.set_exception(std::current_exception());
      }
    });
    py::gil_scoped_release nogil;
    try {
      fut.get();
    } catch (...) {
      work.reset();
      thread.join();
      throw;
    }
  }

  // Stops supervising (jobs started here are later found lost, as with the
  // C++ client; detached ones run on) and ends the thread.
  void close() {
    if (closed) return;
    closed = true;
    py::gil_scoped_release nogil;
    std::promise<void> done;
    auto fut = done.get_future();
    asio::co_spawn(
        io,
        [this]() -> asio::awaitable<void> {
          co_await engine->shutdown();
          // what still waits (a wait, a log follow) is cancelled and ends
          // before the engine does
          for (auto* s : running) s->emit(asio::cancellation_type::terminal);
          while (!running.empty()) {
            boost::system::error_code ec;
            idle.expires_at(std::chrono::steady_clock::time_point::max());
            co_await idle.async_wait(asio::redirect_error(asio::use_awaitable, ec));
          }
          engine.reset();
        },
        [&](std::exception_ptr) { done.set_value(); });
    fut.wait();
    work.reset();
    thread.join();
  }
};

/// A watch of one job: what it last saw.
struct watch_handle {
  std::shared_ptr<core> owner;
  std::shared_ptr<tjob::train_job> last;
};

std::shared_ptr<call> watch_next(watch_handle& h, double timeout_s, py::object done) {
  auto last = h.last;
  auto timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
  return h.owner->start<tjob::train_job>(
      [last, timeout](tjob::engine& e) -> asio::awaitable<tjob::train_job> {
        auto known = *last;  // named: g++ 12 and temporaries in a co_await
        auto now = co_await e.wait_for_job_change(known.name, std::move(known), timeout);
        *last = now;
        co_return now;
      },
      std::move(done), job_dict);
}

/// A step's log being read: its stream lives on (and is destroyed on) the reactor.
struct log_handle {
  std::shared_ptr<core> owner;
  std::shared_ptr<tjob::log_stream> stream;
};

std::shared_ptr<tjob::log_stream> on_reactor(std::shared_ptr<core> c, tjob::log_stream s) {
  auto ex = c->io.get_executor();
  return std::shared_ptr<tjob::log_stream>(new tjob::log_stream(std::move(s)), [c, ex](tjob::log_stream* p) {
    if (c->closed && !c->thread.joinable()) {
      delete p;
      return;
    }
    asio::post(ex, [p] { delete p; });
  });
}

class client {
 public:
  explicit client(py::dict config) : core_(std::make_shared<core>()) { core_->open(config_of(config)); }
  ~client() {
    try {
      core_->close();
    } catch (...) {
    }
    // A close that could not finish (the interpreter going away) leaves the
    // thread to the process's exit rather than terminating it here.
    if (core_->thread.joinable()) core_->thread.detach();
  }

  void close() { core_->close(); }
  std::string home() const { return core_->engine ? core_->engine->home().string() : std::string(); }

  std::shared_ptr<call> train(py::dict request, py::object done) {
    auto r = request_of(request);
    return core_->start<std::string>(
        [r = std::move(r)](tjob::engine& e) mutable { return e.train(std::move(r)); }, std::move(done),
        [](std::string s) { return py::str(s); });
  }

  /// The members of array `spec` of the request, all or nothing: when one is
  /// refused, those submitted before it are deleted and its error raised.
  std::shared_ptr<call> train_array(py::dict request, std::string spec, py::object done) {
    auto r = request_of(request);
    return core_->start<std::vector<std::string>>(
        [r = std::move(r),
         spec = std::move(spec)](tjob::engine& e) -> asio::awaitable<std::vector<std::string>> {
          auto members = tjob::array_members(r, spec);
          std::vector<std::string> names;
          std::exception_ptr failed;
          for (auto& m : members) {
            try {
              auto name = co_await e.train(std::move(m));
              names.push_back(std::move(name));
            } catch (...) {
              failed = std::current_exception();
              break;
            }
          }
          if (failed) {
            for (const auto& n : names) {
              try {
                co_await e.delete_job(n);
              } catch (...) {  // already gone: nothing to undo
              }
            }
            std::rethrow_exception(failed);
          }
          co_return names;
        },
        std::move(done), [](const std::vector<std::string>& names) { return py::cast(names); });
  }

  std::shared_ptr<call> get_job(std::string name, py::object done) {
    return core_->start<tjob::train_job>([name](tjob::engine& e) { return e.get_job(name); }, std::move(done),
                                         job_dict);
  }

  std::shared_ptr<call> list_jobs(std::optional<std::string> runtime, py::object done) {
    return core_->start<std::vector<tjob::train_job>>(
        [runtime](tjob::engine& e) { return e.list_jobs(runtime); }, std::move(done),
        [](const std::vector<tjob::train_job>& jobs) {
          py::list out;
          for (const auto& j : jobs) out.append(job_dict(j));
          return out;
        });
  }

  std::shared_ptr<call> wait(std::string name, std::vector<std::string> statuses, double timeout_s,
                             py::object done) {
    auto wanted = statuses_of(statuses);
    auto timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
    return core_->start<tjob::train_job>(
        [name, wanted, timeout](tjob::engine& e) { return e.wait_for_job_status(name, wanted, timeout); },
        std::move(done), job_dict);
  }

  // A watch of one job (wait_for_job_status's callbacks): open_watch gives the
  // job as it is, then each next() the job once it has changed (or as it is
  // at the timeout); None once it is gone.
  std::shared_ptr<call> open_watch(std::string name, py::object done) {
    auto c = core_;
    return core_->start<tjob::train_job>([name](tjob::engine& e) { return e.get_job(name); }, std::move(done),
                                         [c](tjob::train_job j) {
                                           auto now = job_dict(j);
                                           auto last = std::make_shared<tjob::train_job>(std::move(j));
                                           return py::make_tuple(py::cast(watch_handle{c, last}), now);
                                         });
  }

  std::shared_ptr<call> cancel_job(std::string name, bool force, bool checkpoint, py::object done) {
    return core_->start<bool>(
        [name, force, checkpoint](tjob::engine& e) -> asio::awaitable<bool> {
          tjob::cancel_options how{.force = force,
                                   .checkpoint = checkpoint};  // (named: docs/architecture.md, g++ 12)
          co_await e.cancel_job(name, how);
          co_return true;
        },
        std::move(done), [](bool) { return py::none(); });
  }

  std::shared_ptr<call> delete_job(std::string name, py::object done) {
    return core_->start<bool>(
        [name](tjob::engine& e) -> asio::awaitable<bool> {
          co_await e.delete_job(name);
          co_return true;
        },
        std::move(done), [](bool) { return py::none(); });
  }

  std::shared_ptr<call> events(std::string name, py::object done) {
    return core_->start<std::vector<tjob::event>>([name](tjob::engine& e) { return e.get_job_events(name); },
                                                  std::move(done),
                                                  [](const std::vector<tjob::event>& evs) {
                                                    py::list out;
                                                    for (const auto& x : evs) out.append(event_dict(x));
                                                    return out;
                                                  });
  }

  std::shared_ptr<call> queue(py::object done) {
    return core_->start<std::vector<tjob::queue_entry>>([](tjob::engine& e) { return e.get_queue(); },
                                                        std::move(done),
                                                        [](const std::vector<tjob::queue_entry>& qs) {
                                                          py::list out;
                                                          for (const auto& q : qs) out.append(queue_dict(q));
                                                          return out;
                                                        });
  }

  std::shared_ptr<call> list_runtimes(py::object done) {
    return core_->start<std::vector<tjob::runtime>>([](tjob::engine& e) { return e.list_runtimes(); },
                                                    std::move(done),
                                                    [](const std::vector<tjob::runtime>& rs) {
                                                      py::list out;
                                                      for (const auto& r : rs) out.append(runtime_dict(r));
                                                      return out;
                                                    });
  }

  std::shared_ptr<call> get_runtime(std::string name, py::object done) {
    return core_->start<tjob::runtime>([name](tjob::engine& e) { return e.get_runtime(name); },
                                       std::move(done), runtime_dict);
  }

  std::shared_ptr<call> open_logs(std::string name, py::dict options, py::object done) {
    auto o = log_options_of(options);
    auto c = core_;
    return core_->start<std::shared_ptr<tjob::log_stream>>(
        [name, o, c](tjob::engine& e) -> asio::awaitable<std::shared_ptr<tjob::log_stream>> {
          auto s = co_await e.get_job_logs(name, o);
          co_return on_reactor(c, std::move(s));
        },
        std::move(done),
        [c](std::shared_ptr<tjob::log_stream> s) {
          return py::cast(log_handle{c, std::move(s)});
        });
  }

 private:
  std::shared_ptr<core> core_;
};

std::shared_ptr<call> read_log(log_handle& h, py::object done) {
  auto s = h.stream;
  return h.owner->start<std::optional<std::string>>([s](tjob::engine&) { return s->read_some(); },
                                                    std::move(done),
                                                    [](std::optional<std::string> chunk) -> py::object {
                                                      if (!chunk) return py::none();
                                                      return py::bytes(*chunk);
                                                    });
}

}  // namespace

namespace {

// The engine's client: each method starts an operation and returns a Call.
void def_client(py::module_& m) {
  py::class_<client>(m, "Client")
      .def(py::init<py::dict>(), py::arg("config"))
      .def("close", &client::close)
      .def_property_readonly("home", &client::home)
      .def("train", &client::train)
      .def("train_array", &client::train_array)
      .def("get_job", &client::get_job)
      .def("list_jobs", &client::list_jobs)
      .def("wait", &client::wait)
      .def("open_watch", &client::open_watch)
      .def("cancel_job", &client::cancel_job)
      .def("delete_job", &client::delete_job)
      .def("events", &client::events)
      .def("queue", &client::queue)
      .def("list_runtimes", &client::list_runtimes)
      .def("get_runtime", &client::get_runtime)
      .def("open_logs", &client::open_logs);
}

}  // namespace

PYBIND11_MODULE(_tjob, m) {
  m.doc() = "tjob's engine (use the tjob package)";
  py::class_<call, std::shared_ptr<call>>(m, "Call").def("cancel", &call::cancel);
  py::class_<target>(m, "Target");
  py::class_<channel, std::shared_ptr<channel>>(m, "Channel")
      .def(py::init<>())
      .def("fileno", [](const channel& c) { return c.fd; })
      .def("drain", &channel::drain)
      .def("target", [](std::shared_ptr<channel> c, py::object fn) {
        return target{std::move(c), std::move(fn)};
      });
  py::class_<log_handle>(m, "Log").def("read", &read_log, py::arg("done"));
  py::class_<watch_handle>(m, "Watch").def("next", &watch_next, py::arg("timeout"), py::arg("done"));
  def_client(m);
  // (name, None) or (None, error): the supervisor is started at once, and
  // answers when it has created the job.
  m.def("backend_capabilities", [](const std::string& id) {
    auto b = tjob::find_backend(id);
    if (!b) throw py::value_error("tjob: unknown backend '" + id + "'");
    return boost::json::serialize(tjob::to_json(b->capabilities));
  });
  m.def(
      "train_detached",
      [](py::dict request, py::dict config) -> py::tuple {
        auto r = request_of(request);
        auto c = config_of(config);
        std::string name;
        if (auto failed = without_gil([&] { name = tjob::train_detached(r, c); }))
          return py::make_tuple(py::none(), error_tuple(failed));
        return py::make_tuple(py::str(name), py::none());
      },
      py::arg("request"), py::arg("config"));
  // (names, None) or (None, error): one supervisor for every member.
  m.def(
      "train_detached_array",
      [](py::dict request, std::string spec, py::dict config) -> py::tuple {
        auto r = request_of(request);
        auto c = config_of(config);
        std::vector<std::string> names;
        if (auto failed = without_gil([&] { names = tjob::train_detached(tjob::array_members(r, spec), c); }))
          return py::make_tuple(py::none(), error_tuple(failed));
        return py::make_tuple(py::cast(names), py::none());
      },
      py::arg("request"), py::arg("spec"), py::arg("config"));
  add_sweep_functions(m);
  m.def("format_time", [](double s) {
    return tjob::format_time(
        clock::time_point(std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(s))));
  });
}
