#include "tests/conformance/memory_backend.hpp"

#include "core/job_state.hpp"
#include "core/log_stream_impl.hpp"
#include "core/messages.hpp"
#include "core/names.hpp"
#include "core/task_group.hpp"
#include "core/trainer_checks.hpp"
#include "core/wake.hpp"

#include <tjob/error.hpp>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <map>
#include <memory>
#include <mutex>

namespace tjob::test::memory {

namespace asio = boost::asio;
using steady = std::chrono::steady_clock;

namespace {

struct job {
  train_job view;
  std::vector<std::string> program;
  std::string log;
  std::vector<event> events;
  bool cancel_asked = false;
  std::unique_ptr<asio::steady_timer> timer;  // the step that waits (sleep, forever)
};

struct state {
  explicit state(const detail::backend_context& ctx) : ex(ctx.ex), tasks(ctx.ex, ctx.log) {}
  asio::any_io_executor ex;
  detail::task_group tasks;
  std::map<std::string, std::shared_ptr<job>> jobs;
  detail::wake_list changes;  // any job changed (woken waiters read again)
  bool stopping = false;

  std::shared_ptr<job> find(const std::string& name) const {
    auto it = jobs.find(name);
    if (it == jobs.end())
      detail::throw_not_found(name, "in this program's memory", "tjob list --backend memory");
    return it->second;
  }

  void record(job& j, const char* reason, std::string message) {
    event e;
    e.seq = static_cast<std::int64_t>(j.events.size()) + 1;
    e.time = clock::now();
    e.step = std::string(reason) == "Created" ? "" : "node-0";
    e.reason = reason;
    e.message = std::move(message);
    j.events.push_back(std::move(e));
    changes.notify_all();
  }

  // The transition function decides; the view is its output.
  void apply(job& j, detail::job_event ev, std::string reason) {
    auto next = detail::next(j.view.steps[0].status, ev);
    if (!next) return;
    auto& s = j.view.steps[0];
    s.status = *next;
    if (ev.kind == detail::event_kind::started) j.view.start_time = clock::now();
    if (ev.kind == detail::event_kind::exited) s.exit_code = ev.exit_code;
    if (*next == job_status::failed) s.reason = reason;
    j.view.status = *next;
    j.view.reason = *next == job_status::failed ? reason : "";
    if (is_terminal(*next)) j.view.end_time = clock::now();
    record(j, std::string(detail::event_reason(ev.kind)).c_str(), reason.empty() ? "node-0" : reason);
  }

  // Sleeps `ms` (forever when negative) unless the job is cancelled; false then.
  asio::awaitable<bool> pause(job& j, long long ms) {
    j.timer = std::make_unique<asio::steady_timer>(ex);
    j.timer->expires_at(ms < 0 ? steady::time_point::max() : steady::now() + std::chrono::milliseconds(ms));
    boost::system::error_code ec;
    co_await j.timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    co_return !j.cancel_asked;
  }

  asio::awaitable<void> run(std::shared_ptr<job> j) {
    apply(*j, {detail::event_kind::started}, {});
    int code = 0;
    for (std::size_t i = 0; i < j->program.size() && !j->cancel_asked && !stopping; ++i) {
      const auto& op = j->program[i];
      const std::string arg = i + 1 < j->program.size() ? j->program[i + 1] : std::string();
      if (op == "print") {
        j->log += arg;
        changes.notify_all();
        ++i;
      } else if (op == "sleep") {
        if (!co_await pause(*j, std::stoll(arg))) break;
        ++i;
      } else if (op == "forever") {
        if (!co_await pause(*j, -1)) break;
      } else if (op == "exit") {
        code = std::stoi(arg);
        break;
      }
    }
    if (j->cancel_asked)
      apply(*j, {detail::event_kind::cancelled}, "cancelled");
    else
      apply(*j, {detail::event_kind::exited, code}, code == 0 ? "" : "exit code " + std::to_string(code));
  }
};

// A step's log: what the program printed; followed, it waits for more until
// the job has ended.
class memory_log final : public detail::piecewise_log {
 public:
  memory_log(std::shared_ptr<state> s, std::shared_ptr<job> j, std::size_t from, bool follow)
      : s_(std::move(s)), j_(std::move(j)), at_(from), follow_(follow), sig_(s_->ex), reg_(s_->changes, &sig_) {}

 private:
  asio::awaitable<bool> read_piece(std::string& out) override {
    for (;;) {
      if (at_ < j_->log.size()) {
        out.append(j_->log, at_);
        at_ = j_->log.size();
        co_return true;
      }
      if (!follow_ || is_terminal(j_->view.status) || s_->stopping) co_return false;
      co_await sig_.wait_until(steady::time_point::max());
    }
  }

  std::shared_ptr<state> s_;
  std::shared_ptr<job> j_;
  std::size_t at_;
  bool follow_;
  detail::wake_signal sig_;
  detail::wake_registration reg_;
};

class memory_watch final : public detail::job_watch {
 public:
  memory_watch(std::shared_ptr<state> s, std::string name)
      : s_(std::move(s)), name_(std::move(name)), sig_(s_->ex), reg_(s_->changes, &sig_) {}
  asio::awaitable<std::optional<train_job>> current() override { co_return s_->find(name_)->view; }
  asio::awaitable<bool> changed(steady::time_point deadline) override {
    co_return co_await sig_.wait_until(deadline);
  }

 private:
  std::shared_ptr<state> s_;
  std::string name_;
  detail::wake_signal sig_;
  detail::wake_registration reg_;
};

class memory_changes final : public detail::change_watch {
 public:
  explicit memory_changes(std::shared_ptr<state> s) : s_(std::move(s)), sig_(s_->ex), reg_(s_->changes, &sig_) {}
  asio::awaitable<bool> changed(steady::time_point deadline) override {
    co_return co_await sig_.wait_until(deadline);
  }

 private:
  std::shared_ptr<state> s_;
  detail::wake_signal sig_;
  detail::wake_registration reg_;
};

backend_capabilities capabilities_of() {
  backend_capabilities c;
  c.id = "memory";
  return c;
}

class backend final : public detail::backend {
 public:
  explicit backend(detail::backend_context ctx) : detail::backend(ctx), s_(std::make_shared<state>(ctx)) {}

  backend_capabilities capabilities() const override { return capabilities_of(); }

  asio::awaitable<std::string> train(detail::checked_request c) override {
    auto& r = c.request;
    auto* t = std::get_if<command_trainer>(&r.job_trainer);
    if (!t) throw error(errc::invalid_argument, detail::who(r.name) + ": the memory backend runs commands only");
    if (r.num_nodes != 1)
      throw error(errc::invalid_argument, detail::who(r.name) + ": the memory backend runs one node");
    if (s_->jobs.count(r.name))
      throw error(errc::duplicate_name, detail::who(r.name) + " exists already; delete it or choose another name");
    auto j = std::make_shared<job>();
    j->view.name = r.name;
    j->view.runtime = c.rt.name;
    j->view.creation_timestamp = clock::now();
    step s;
    s.name = "node-0";
    j->view.steps.push_back(s);
    j->program = t->command;
    s_->jobs[r.name] = j;
    s_->record(*j, "Created", "in memory");
    s_->tasks.spawn(s_->run(j), "memory job " + r.name);
    co_return r.name;
  }

  asio::awaitable<train_job> get_job(std::string name) override { co_return s_->find(name)->view; }

  asio::awaitable<std::vector<train_job>> list_jobs(std::optional<std::string> runtime) override {
    std::vector<train_job> out;
    for (const auto& [n, j] : s_->jobs)
      if (!runtime || j->view.runtime == *runtime) out.push_back(j->view);
    std::stable_sort(out.begin(), out.end(), [](const train_job& a, const train_job& b) {
      return a.creation_timestamp < b.creation_timestamp;
    });
    co_return out;
  }

  asio::awaitable<log_stream> get_job_logs(std::string name, log_options o) override {
    auto j = s_->find(name);
    if (o.step != "node-0") detail::throw_step_not_found(name, o.step, {"node-0"});
    std::size_t from = 0;
    if (o.tail) {
      // the last N lines: back from the end, over N newlines (a last line without one counts)
      std::size_t lines = 0, at = j->log.size();
      if (at > 0 && j->log.back() == '\n') --at;
      while (at > 0 && lines < *o.tail) {
        if (j->log[at - 1] == '\n') ++lines;
        if (lines < *o.tail) --at;
      }
      from = *o.tail == 0 ? j->log.size() : at;
    }
    co_return log_stream(std::make_unique<memory_log>(s_, j, from, o.follow));
  }

  asio::awaitable<std::unique_ptr<detail::job_watch>> watch_job(std::string name) override {
    s_->find(name);
    co_return std::make_unique<memory_watch>(s_, std::move(name));
  }

  asio::awaitable<std::unique_ptr<detail::change_watch>> watch_all() override {
    co_return std::make_unique<memory_changes>(s_);
  }

  asio::awaitable<void> cancel_job(std::string name, cancel_options) override {
    auto j = s_->find(name);
    if (is_terminal(j->view.status)) co_return;
    j->cancel_asked = true;
    if (j->timer) j->timer->cancel();
    co_return;
  }

  asio::awaitable<void> delete_job(std::string name) override {
    auto j = s_->find(name);
    if (!is_terminal(j->view.status)) {
      j->cancel_asked = true;
      if (j->timer) j->timer->cancel();
    }
    s_->jobs.erase(name);
    s_->changes.notify_all();
    co_return;
  }

  asio::awaitable<std::vector<event>> get_job_events(std::string name) override {
    co_return s_->find(name)->events;
  }

  asio::awaitable<void> shutdown() override {
    s_->stopping = true;
    for (auto& [n, j] : s_->jobs)
      if (j->timer) j->timer->cancel();
    s_->changes.notify_all();
    co_await s_->tasks.join();
  }

 private:
  std::shared_ptr<state> s_;
};

}  // namespace

detail::backend_registration registration() {
  detail::backend_registration r;
  r.description.id = "memory";
  r.description.summary = "memory (the tests' own)";
  r.description.capabilities = capabilities_of();
  r.check = [](const boost::json::object& c, const std::function<std::string(std::string_view)>& name_of) {
    detail::config_reader{c, name_of, "memory"}.only({});
  };
  r.make = [](detail::backend_context ctx) -> std::shared_ptr<detail::backend> {
    return std::make_shared<backend>(std::move(ctx));
  };
  return r;
}

void register_once() {
  static std::once_flag once;
  std::call_once(once, [] { detail::register_backend(registration()); });
}

}  // namespace tjob::test::memory
