#include "adapters/container/container_impl.hpp"

#include "core/deadline.hpp"
#include "core/job_state.hpp"
#include "core/json_fields.hpp"
#include "core/log_stream_impl.hpp"
#include "core/messages.hpp"
#include "core/names.hpp"
#include "core/times.hpp"
#include "core/trainer_checks.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <fstream>

#include <cerrno>
#include <cstring>

namespace tjob::container {

using detail::obj_of;
using detail::quote;
using detail::str_of;
using detail::who;

void write_file(const fs::path& p, std::string_view text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out) fail(errc::invalid_argument, "cannot write " + p.string());
}

namespace {

// The rank of a step named node-<rank>; -1 for others.
int rank_of(const std::string& step) {
  if (!step.starts_with("node-")) return -1;
  int rank = -1;
  auto [end, ec] = std::from_chars(step.data() + 5, step.data() + step.size(), rank);
  return ec == std::errc() && end == step.data() + step.size() ? rank : -1;
}

// A waiter's view of one job: woken by the daemon's events for it; without
// the event stream (the daemon restarting, or refusing /events) the status is
// read again each second until the stream is back.
class container_watch final : public detail::job_watch {
 public:
  container_watch(std::shared_ptr<backend::impl> b, std::string name)
      : b_(std::move(b)), name_(std::move(name)), sig_(b_->ctx.ex), reg_(b_->waiters, &sig_) {}

  asio::awaitable<std::optional<train_job>> current() override {
    if (b_->stopping) fail(errc::shut_down, "the engine is shutting down");
    mark_ = b_->mark(name_);
    auto job = co_await b_->find(name_);
    if (job) {
      unreachable_since_.reset();
      read_ = true;
      // Before its containers, a job changes in files only (another
      // process's cancel, its owner's end): read it again each half second.
      waiting_ = job->status == job_status::created &&
                 (job->reason == detail::queued_reason || job->reason == detail::waiting_reason);
      co_return std::move(*job);
    }
    // the daemon went away: retry while it restarts, for a while
    if (!detail::means(job.error().code, errc::backend_unavailable)) raise(job.error());
    if (!unreachable_since_) unreachable_since_ = steady::now();
    if (steady::now() - *unreachable_since_ > std::chrono::seconds(30)) raise(job.error());
    b_->ctx.log->warn("{}: waiting: {}", who(name_), job.error().message);
    read_ = false;
    co_return std::nullopt;
  }

  asio::awaitable<bool> changed(steady::time_point deadline) override {
    if (!started_) {
      started_ = true;
      co_await b_->connect_events(sig_, deadline);
      co_return true;  // read again, now that the stream is there
    }
    while (b_->mark(name_) == mark_) {
      auto until = read_ && b_->events_connected && !waiting_
                       ? deadline
                       : std::min(deadline, steady::now() + (waiting_ ? std::chrono::milliseconds(500)
                                                                      : std::chrono::milliseconds(1000)));
      if (!co_await sig_.wait_until(until)) co_return steady::now() < deadline;
    }
    co_return true;
  }

 private:
  std::shared_ptr<backend::impl> b_;
  std::string name_;
  detail::wake_signal sig_;
  detail::wake_registration reg_;
  std::uint64_t mark_ = 0;
  bool read_ = false, started_ = false, waiting_ = false;
  std::optional<steady::time_point> unreachable_since_;
};

}  // namespace

// --- reading jobs ---------------------------------------------------------

// The containers of one job (or of every job), oldest first.
asio::awaitable<outcome<std::vector<seen>>> backend::impl::containers(const std::string& job) {
  auto daemon_ = co_await daemon();
  if (!daemon_) co_return daemon_.error();
  auto& d = **daemon_;
  // (a named vector: g++ 12 miscompiles an initializer list inside co_await)
  std::vector<std::string> filter{job.empty() ? std::string(label_job) : std::string(label_job) + "=" + job};
  auto list = co_await d.container_list(filter);
  if (!list) co_return list.error();
  std::vector<seen> out;
  for (const auto& v : *list) {
    if (!v.is_object()) continue;
    if (auto c = seen_of(v.as_object())) out.push_back(std::move(*c));
  }
  // A job Kubeflow's container backend made keeps its runtime on its network.
  for (auto& c : out) {
    auto net = c.labels[label_network];
    if (!c.labels[label_runtime].empty() || net.empty()) continue;
    auto known = network_runtime.find(net);
    if (known == network_runtime.end()) {
      auto inspected = co_await d.network_inspect(net);
      if (!inspected) co_return inspected.error();
      auto runtime = *inspected ? labels_of(**inspected)[label_runtime] : std::string();
      known = network_runtime.emplace(net, std::move(runtime)).first;
    }
    c.labels[label_runtime] = known->second;
  }
  // exit codes (and pids) are only in inspect; an exited container's answer is final
  for (auto& c : out) {
    const json::object* ins = nullptr;
    std::optional<json::object> fresh;
    if (auto it = exited.find(c.id); it != exited.end()) {
      ins = &it->second;
    } else {
      auto inspected = co_await d.container_inspect(c.id);
      if (!inspected) co_return inspected.error();
      fresh = std::move(*inspected);
      if (!fresh) {
        c.state = "removing";
        c.error = "removed while being read";
        continue;
      }
      ins = &*fresh;
    }
    read_inspected(*ins, c);
    if (fresh && (c.state == "exited" || c.state == "dead") &&
        !restart_pending(c, cancelled(c.labels[label_job])))
      exited[c.id] = std::move(*fresh);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const seen& a, const seen& b) { return a.created < b.created; });
  co_return out;
}

bool restart_pending(const seen& c, bool stopped) {
  auto it = c.labels.find(label_max_restarts);
  const bool ended = c.state == "exited" || c.state == "stopped";  // (Podman: stopped until its cleanup)
  if (stopped || it == c.labels.end() || !ended || !c.exit_code || *c.exit_code == 0) return false;
  return c.restarts < std::atoi(it->second.c_str());
}

bool backend::impl::for_good(const seen& c) const {
  if (c.state != "exited" && c.state != "dead" && c.state != "stopped") return false;
  auto job = c.labels.find(label_job);
  return !restart_pending(c, job != c.labels.end() && cancelled(job->second));
}

bool backend::impl::cancelled(const std::string& job) const {
  auto d = state(job);
  return d && d->exists("cancelled");
}

bool backend::impl::deadline_passed(const std::string& job) const {
  auto d = state(job);
  return d && d->exists("deadline-exceeded");
}

std::optional<job_dir> backend::impl::state(const std::string& job) const {
  return job_dir::open(ctx.home / "containers", job);
}

void backend::impl::set_marker(const std::string& job, const char* marker, std::string_view text) const {
  auto d = state(job);
  if (!d) {
    make_home_dirs(ctx.home);
    make_private_dir(workdir(job));
    d = state(job);
  }
  if (!d) fail(errc::invalid_argument, who(job) + ": cannot open its directory " + workdir(job).string());
  d->mark(marker, text);
}

fs::path backend::impl::workdir(const std::string& job) const { return ctx.home / "containers" / job; }

train_job backend::impl::to_job(const std::string& name, std::vector<seen> cs) {
  train_job j;
  j.name = name;
  std::sort(cs.begin(), cs.end(), [](const seen& a, const seen& b) {
    int ra = rank_of(a.step), rb = rank_of(b.step);
    if ((ra < 0) != (rb < 0)) return ra >= 0;
    if (ra != rb) return ra < rb;
    return a.step < b.step;
  });
  std::vector<job_status> statuses;
  std::int64_t created = 0;
  const auto dir = state(name);
  const bool was_cancelled = dir && dir->exists("cancelled");
  const bool past_deadline = was_cancelled && dir->exists("deadline-exceeded");
  int nodes = 0;
  for (const auto& c : cs) {
    step s;
    s.name = c.step.empty() ? c.name : c.step;
    const bool restarting = c.state == "restarting" || restart_pending(c, was_cancelled);
    s.status = restarting ? job_status::created : status_of(c.state, c.exit_code);
    s.exit_code = restarting ? std::nullopt : c.exit_code;
    s.attempt = c.restarts + 1;
    if (restarting) s.reason = "Restarting";
    if (s.status == job_status::running) s.pid = c.pid;
    if (s.status == job_status::failed) {
      if (past_deadline)
        s.reason = "DeadlineExceeded";
      else if (was_cancelled)
        s.reason = "cancelled";
      else if (c.oom)
        s.reason = "OOMKilled";
      else if (c.exit_code)
        s.reason = "exit code " + std::to_string(*c.exit_code);
      else
        s.reason = c.state + (c.error.empty() ? "" : ": " + c.error);
    }
    statuses.push_back(s.status);
    if (rank_of(s.name) >= 0) ++nodes;
    if (j.runtime.empty()) j.runtime = c.labels.count(label_runtime) ? c.labels.at(label_runtime) : "";
    if (auto a = c.labels.find(label_array); a != c.labels.end()) j.array = a->second;
    if (created == 0 || (c.created > 0 && c.created < created)) created = c.created;
    if (c.started && (!j.start_time || *c.started < *j.start_time)) j.start_time = c.started;
    if (c.finished && is_terminal(s.status) && (!j.end_time || *c.finished > *j.end_time))
      j.end_time = c.finished;
    j.steps.push_back(std::move(s));
  }
  j.num_nodes = std::max(nodes, 1);
  j.status = detail::aggregate(statuses);
  if (!is_terminal(j.status)) j.end_time.reset();
  // Podman records a short-lived container's start after its end (StartedAt
  // 2 ms past FinishedAt, met here): a job never ends before it starts.
  if (j.end_time && j.start_time && *j.end_time < *j.start_time) j.end_time = j.start_time;
  for (const auto& s : j.steps)
    if (s.status == job_status::failed && j.reason.empty()) j.reason = s.reason;
  if (!is_terminal(j.status))  // between attempts, as a local job reads
    for (const auto& s : j.steps)
      if (s.reason == "Restarting") j.reason = s.reason;
  j.creation_timestamp = clock::time_point(std::chrono::seconds(created));
  if (dir) read_progress(*dir, j);
  return j;
}

asio::awaitable<outcome<train_job>> backend::impl::find(const std::string& name) {
  auto cs = co_await containers(name);
  if (!cs) co_return cs.error();
  if (cs->empty()) {
    // No container yet: a job that waits for admission, or ended waiting.
    auto q = read_queue(name);
    if (!q || q->state == "started") co_return not_found(name);
    auto j = queued_job(*q, std::nullopt);
    if (j.reason == detail::queued_reason) j.queue_position = co_await position_of(name);
    co_return j;
  }
  auto j = to_job(name, std::move(*cs));
  co_return j;
}

asio::awaitable<train_job> backend::impl::get(const std::string& name) {
  auto job = co_await find(name);
  co_return std::move(job).value();
}

std::string backend::impl::container_of(const std::string& job, const std::string& step) {
  int r = rank_of(step);
  return r >= 0 ? node_name(job, r) : job + "-" + step;
}

// --- cancel / delete ------------------------------------------------------

asio::awaitable<void> backend::impl::stop_all(const std::vector<seen>& cs, bool force) {
  int grace = static_cast<int>((ctx.cfg.grace_period.count() + 999) / 1000);
  std::string signal = force ? "SIGKILL" : "SIGTERM";
  for (const auto& c : cs)
    if (c.state == "running") {
      auto killed = co_await api->container_kill(c.id, signal);
      killed.value();
    }
  if (force) co_return;  // (a killed container needs no stop)
  for (const auto& c : cs)
    if (c.state == "running" || c.state == "paused" || c.state == "restarting") {
      auto stopped = co_await api->container_stop(c.id, grace);
      stopped.value();
    }
}

asio::awaitable<void> backend::impl::cancel(const std::string& name, bool force) {
  auto found = co_await containers(name);
  auto cs = std::move(found).value();
  if (cs.empty()) {
    // Waiting for admission: the marker is the cancel; its owner's admitter
    // sees it, and a reader shows it Failed, cancelled, at once.
    auto q = read_queue(name);
    if (!q || q->state == "started") raise(not_found(name));
    if (is_terminal(queued_job(*q, std::nullopt).status)) co_return;
    set_marker(name, "cancelled");
    ++generation[name];
    waiters.notify_all();
    co_return;
  }
  auto j = to_job(name, cs);
  if (is_terminal(j.status)) co_return;
  set_marker(name, "cancelled");
  co_await stop_all(cs, force);
}

asio::awaitable<void> backend::impl::enforce_deadline(std::string name, std::chrono::seconds limit) {
  container_watch w(shared_from_this(), name);
  if (!co_await detail::ran_past_deadline(w, limit)) co_return;
  ctx.log->info("{}: its active deadline of {} s passed; stopping it", who(name), limit.count());
  set_marker(name, "deadline-exceeded", std::to_string(limit.count()) + "\n");
  co_await cancel(name, false);
}

asio::awaitable<void> backend::impl::remove(const std::string& name) {
  auto daemon_ = co_await daemon();
  auto& d = *daemon_.value();
  auto found = co_await containers(name);
  auto cs = std::move(found).value();
  auto inspected = co_await d.network_inspect(network_name(name));
  auto net = std::move(inspected).value();
  bool ours = net && labels_of(*net)[label_job] == name;
  if (cs.empty() && !ours) {
    std::error_code ec;
    if (auto q = read_queue(name); q && q->state != "started") {
      // It never had a container: its queue file is the job. Marked
      // cancelled first, so an owner about to make its containers stops.
      set_marker(name, "cancelled");
      fs::remove(queue_path(name), ec);
      if (cfg.auto_remove) fs::remove_all(workdir(name), ec);
      ++generation[name];
      waiters.notify_all();
      co_return;
    }
    // Nothing of it in the daemon (its containers removed behind our back):
    // the work dir this engine made for it is all that is left.
    if (cfg.auto_remove && state(name)) fs::remove_all(workdir(name), ec);
    raise(not_found(name));
  }
  progress.forget(name);
  co_await stop_all(cs, false);
  std::set<std::string> networks;
  for (const auto& c : cs) {
    auto removed = co_await d.container_remove(c.id);
    removed.value();
    exited.erase(c.id);
    if (auto it = c.labels.find(label_network); it != c.labels.end() && !it->second.empty())
      networks.insert(it->second);
  }
  if (ours) networks.insert(str_of(*net, "Id"));
  for (const auto& n : networks) {
    auto removed = co_await d.network_remove(n);
    removed.value();
  }
  if (cfg.auto_remove) {
    // only the work dir this engine made; a label is not trusted with rm -rf
    std::error_code ec;
    fs::remove_all(workdir(name), ec);
    if (ec) ctx.log->warn("{}: cannot remove its work dir: {}", who(name), ec.message());
  }
}

asio::awaitable<void> backend::impl::shutdown() {
  stopping = true;
  progress.stop();
  if (events) events->close();
  backoff_wake.notify();
  waiters.notify_all();
  co_await tasks.join();
}

// ---------------------------------------------------------------------------

failure backend::impl::not_found(const std::string& name) const {
  return detail::not_found_failure(name, "on " + api->describe(), "tjob list --backend container");
}

backend::backend(detail::backend_context ctx)
    : detail::backend(ctx), impl_(std::make_shared<impl>(std::move(ctx))) {}
backend::~backend() = default;

namespace {

backend_capabilities capabilities_of() {
  backend_capabilities c;
  c.id = "container";
  c.needs_owner = true;
  c.owner_until_started = true;  // (then the daemon keeps it; a deadline keeps its owner)
  c.admission = true;
  c.arrays = true;
  c.begin_time = true;  // it waits with its owner, as for dependencies
  c.takes_image = true;
  c.workdir_in_image = true;
  c.takes_code_dir = true;
  c.job_files = "containers";
  return c;
}

}  // namespace

backend_capabilities backend::capabilities() const { return capabilities_of(); }

detail::backend_registration registration() {
  using kind = backend_option::value_kind;
  detail::backend_registration r;
  r.description.id = "container";
  r.description.summary = "container (Docker or Podman)";
  r.description.capabilities = capabilities_of();
  r.description.options = {
      {"container_runtime", "--container-runtime",
       "Container backend: docker or podman; default: whichever answers (Docker first)", kind::text},
      {"container_host", "--container-host",
       "Container backend: the daemon, unix:///path/to/socket or tcp://host:port; default: $DOCKER_HOST, "
       "$CONTAINER_HOST, then the usual sockets",
       kind::text},
      {"pull_policy", "--pull-policy", "Container backend: IfNotPresent (default), Always or Never",
       kind::text},
      {"network", "--network", "Container backend: job (a network <job>-net per job, default), host or none",
       kind::text},
      {"volumes", "-v,--volume",
       "Container backend: a mount SOURCE:CONTAINER[:ro] of every node, SOURCE a host path or a named volume "
       "(repeatable)",
       kind::texts},
      {"env", "--container-env",
       "Container backend: NAME=VALUE in every node's environment, under the job's own --env (repeatable)",
       kind::texts},
      {"auto_remove", "--keep-workdir",
       "Container backend: delete keeps the job's work dir on the host (auto_remove off)", kind::flag, false},
  };
  r.check = [](const boost::json::object& c, const std::function<std::string(std::string_view)>& name_of) {
    config_of(c, name_of);
  };
  r.make = [](detail::backend_context ctx) -> std::shared_ptr<detail::backend> {
    return std::make_shared<backend>(std::move(ctx));
  };
  return r;
}

asio::awaitable<std::string> backend::train(detail::checked_request request) {
  co_return co_await impl_->train(std::move(request));
}
asio::awaitable<train_job> backend::get_job(std::string name) { co_return co_await impl_->get(name); }
asio::awaitable<std::vector<train_job>> backend::list_jobs(std::optional<std::string> runtime) {
  // The queue files first, then the containers: a job admitted in between
  // (its containers made, then its queue file removed) is in the second
  // read. The other order missed it in both, and a sweep's owner took such a
  // trial for deleted.
  auto files = impl_->read_queues();
  std::string every;  // (named: g++ 12)
  auto found = co_await impl_->containers(every);
  auto all = std::move(found).value();
  std::map<std::string, std::vector<seen>> by_job;
  std::vector<std::string> order;
  for (auto& c : all) {
    auto job = c.labels[label_job];
    if (!by_job.count(job)) order.push_back(job);
    by_job[job].push_back(std::move(c));
  }
  std::vector<train_job> out;
  for (const auto& name : order) {
    auto j = impl_->to_job(name, std::move(by_job[name]));
    if (!runtime || j.runtime == *runtime) out.push_back(std::move(j));
  }
  // The jobs with no container yet: waiting for admission, or ended waiting.
  std::erase_if(files, [&](const queue_file& q) { return q.state == "started" || by_job.count(q.job); });
  std::map<std::string, int> place;
  if (std::any_of(files.begin(), files.end(), [](const queue_file& q) { return q.state == "queued"; })) {
    auto plan = co_await impl_->queue_plan(files);
    for (const auto& w : plan.queue) place[w.job] = w.position;
  }
  for (const auto& q : files) {
    std::optional<int> pos;
    if (auto it = place.find(q.job); it != place.end()) pos = it->second;
    auto j = impl_->queued_job(q, pos);
    if (!runtime || j.runtime == *runtime) out.push_back(std::move(j));
  }
  std::stable_sort(out.begin(), out.end(), [](const train_job& a, const train_job& b) {
    return a.creation_timestamp < b.creation_timestamp;
  });
  co_return out;
}
asio::awaitable<log_stream> backend::get_job_logs(std::string name, log_options options) {
  co_return co_await impl_->logs(name, options);
}
asio::awaitable<std::unique_ptr<detail::job_watch>> backend::watch_job(std::string name) {
  co_return std::make_unique<container_watch>(impl_, std::move(name));
}

namespace {

// The daemon's event stream wakes b->waiters on every container and network
// event; it is connected before the first read, so nothing after is missed.
class container_changes final : public detail::change_watch {
 public:
  explicit container_changes(std::shared_ptr<backend::impl> b)
      : b_(std::move(b)), sig_(b_->ctx.ex), reg_(b_->waiters, &sig_) {}

  asio::awaitable<void> start() { co_await b_->connect_events(sig_, steady::time_point::max()); }

  asio::awaitable<bool> changed(steady::time_point deadline) override {
    if (b_->stopping) fail(errc::shut_down, "the engine is shutting down");
    // Jobs that wait for admission change in files only (another process's
    // cancel, its owner's end): while any waits, look again each second.
    std::error_code ec;
    if (!fs::is_empty(b_->ctx.home / "containers" / ".queue", ec) && !ec)
      deadline = std::min(deadline, steady::now() + std::chrono::seconds(1));
    if (co_await sig_.wait_until(deadline)) co_return true;
    co_return !ec && steady::now() < deadline;
  }

 private:
  std::shared_ptr<backend::impl> b_;
  detail::wake_signal sig_;
  detail::wake_registration reg_;
};

}  // namespace

asio::awaitable<std::unique_ptr<detail::change_watch>> backend::watch_all() {
  auto w = std::make_unique<container_changes>(impl_);
  co_await w->start();
  co_return w;
}
asio::awaitable<void> backend::cancel_job(std::string name, cancel_options options) {
  co_await impl_->cancel(name, options.force);
}
asio::awaitable<void> backend::delete_job(std::string name) { co_await impl_->remove(name); }
asio::awaitable<std::vector<event>> backend::get_job_events(std::string name) {
  co_return co_await impl_->job_events(name);
}
asio::awaitable<void> backend::shutdown() { co_await impl_->shutdown(); }
asio::awaitable<std::vector<queue_entry>> backend::queue() { co_return co_await impl_->queue_view(); }

}  // namespace tjob::container