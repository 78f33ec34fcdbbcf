// Admission of container jobs (docs/scheduling.md). The daemon has no queue,
// so a job that must wait has no container yet: its place is a file of the
// home, $TJOB_HOME/containers/.queue/<job>.json, which every process on the
// home reads (once its containers are made, the file moves to its work dir,
// admission.json in its state, job_dir.hpp, for its events). What the running jobs hold is read from the daemon (the
// labels tjob puts on their containers); the decision is made under a lock
// file of the home (containers/.queue.lock), so two processes never admit
// into the same room. The process that submitted a waiting job (its owner:
// tjob run, tjob serve, a supervisor) keeps what it needs to create its
// containers, and creates them when the job is admitted; a job whose owner is
// gone is lost (shown Failed, reason lost) and never started.
#include "adapters/container/container_impl.hpp"

#include "adapters/process/proc_info.hpp"
#include "core/job_state.hpp"
#include "core/json_fields.hpp"
#include "core/names.hpp"
#include "core/times.hpp"
#include "core/trainer_checks.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>

namespace tjob::container {

using detail::quote;
using detail::str_of;
using detail::who;

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock::now().time_since_epoch()).count();
}

namespace {

std::int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now().time_since_epoch()).count();
}

clock::time_point from_ms(std::int64_t ms) { return clock::time_point(std::chrono::milliseconds(ms)); }

json::array names_json(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return a;
}

std::vector<std::string> names_of(const json::object& o, const char* key) {
  std::vector<std::string> out;
  if (auto* a = o.if_contains(key); a && a->is_array())
    for (const auto& v : a->as_array())
      if (v.is_string()) out.emplace_back(v.as_string());
  return out;
}

std::int64_t int_of(const json::object& o, const char* key) {
  auto* v = o.if_contains(key);
  return v && v->is_number() ? v->to_number<std::int64_t>() : 0;
}

// The lock of the home's container queue: held from reading what runs to
// writing who is admitted. flock, so a process that dies lets go of it.
struct queue_lock {
  int fd = -1;
  queue_lock() = default;
  queue_lock(queue_lock&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  queue_lock& operator=(queue_lock&&) = delete;
  ~queue_lock() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

json::object to_json(const queue_file& q) {
  return {{"job", q.job},
          {"state", q.state},
          {"runtime", q.runtime},
          {"num_nodes", q.num_nodes},
          {"priority", q.priority},
          {"array", q.array},
          {"array_limit", q.array_limit},
          {"cpus", q.need.cpus},
          {"memory", q.need.memory},
          {"gpus", q.need.gpus},
          {"created_ms", q.created_ms},
          {"since_ms", q.since_ms},
          {"seq", q.seq},
          {"admitted_ms", q.admitted_ms},
          {"ended_ms", q.ended_ms},
          {"owner_pid", q.owner_pid},
          {"owner_start", q.owner_start},
          {"after_ok", names_json(q.after_ok)},
          {"after_any", names_json(q.after_any)},
          {"after_not_ok", names_json(q.after_not_ok)},
          {"begin_ms", q.begin_ms},
          {"reason", q.reason},
          {"message", q.message}};
}

std::optional<queue_file> queue_file_of(const json::object& o) {
  queue_file q;
  q.job = str_of(o, "job");
  q.state = str_of(o, "state");
  if (q.job.empty() || q.state.empty()) return std::nullopt;
  q.runtime = str_of(o, "runtime");
  q.num_nodes = std::max<int>(1, static_cast<int>(int_of(o, "num_nodes")));
  q.priority = static_cast<int>(int_of(o, "priority"));
  q.array = str_of(o, "array");
  q.array_limit = static_cast<int>(int_of(o, "array_limit"));
  q.need.cpus = static_cast<int>(int_of(o, "cpus"));
  q.need.memory = static_cast<std::uint64_t>(int_of(o, "memory"));
  q.need.gpus = static_cast<int>(int_of(o, "gpus"));
  q.created_ms = int_of(o, "created_ms");
  q.since_ms = int_of(o, "since_ms");
  q.seq = int_of(o, "seq");
  q.admitted_ms = int_of(o, "admitted_ms");
  q.ended_ms = int_of(o, "ended_ms");
  q.owner_pid = int_of(o, "owner_pid");
  q.owner_start = static_cast<std::uint64_t>(int_of(o, "owner_start"));
  q.after_ok = names_of(o, "after_ok");
  q.after_any = names_of(o, "after_any");
  q.after_not_ok = names_of(o, "after_not_ok");
  q.begin_ms = int_of(o, "begin_ms");
  q.reason = str_of(o, "reason");
  q.message = str_of(o, "message");
  return q;
}

fs::path backend::impl::queue_path(const std::string& job) const {
  return ctx.home / "containers" / ".queue" / (job + ".json");
}

std::optional<queue_file> backend::impl::read_queue(const std::string& job) const {
  std::ifstream in(queue_path(job), std::ios::binary);
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  boost::system::error_code ec;
  auto v = json::parse(text, ec);
  if (ec || !v.is_object()) {
    ctx.log->warn("{}: {} is not what tjob writes; it is left as it is", who(job), queue_path(job).string());
    return std::nullopt;
  }
  auto q = queue_file_of(v.as_object());
  if (q && q->job != job) return std::nullopt;
  return q;
}

void backend::impl::write_queue(const queue_file& q) const {
  // Replaced whole (a rename), so a reader sees the old file or the new one.
  auto path = queue_path(q.job);
  auto tmp = path;
  tmp += ".new";
  write_file(tmp, json::serialize(to_json(q)));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) fail(errc::invalid_argument, "cannot write " + path.string() + ": " + ec.message());
}

std::vector<queue_file> backend::impl::read_queues() const {
  std::vector<queue_file> out;
  std::error_code ec;
  for (fs::directory_iterator it(ctx.home / "containers" / ".queue", ec), end; !ec && it != end;
       it.increment(ec)) {
    const auto& p = it->path();
    if (p.extension() != ".json") continue;
    if (auto q = read_queue(p.stem().string())) out.push_back(std::move(*q));
  }
  return out;
}

bool backend::impl::owner_alive(const queue_file& q) const {
  if (q.owner_pid == self_pid && q.owner_start == self_start) return true;
  return process::is_same_process(static_cast<pid_t>(q.owner_pid), q.owner_start);
}

const detail::admission_budget& backend::impl::admission_budget() {
  if (!budget_file)
    budget_file.emplace(ctx.cfg.admission, ctx.home, static_cast<int>(detail::gpu_devices(ctx.cfg).size()));
  auto r = budget_file->refresh();
  if (!r.warning.empty()) ctx.log->warn("{}", r.warning);
  return budget_file->budget();
}

bool backend::impl::waits(const queue_file& q) const {
  return q.state == "waiting" || q.state == "queued" || q.state == "admitted";
}

train_job backend::impl::queued_job(const queue_file& q, std::optional<int> position) const {
  train_job j;
  j.name = q.job;
  j.runtime = q.runtime;
  j.num_nodes = q.num_nodes;
  j.creation_timestamp = clock::time_point(std::chrono::seconds(q.created_ms / 1000));
  j.array = q.array;
  j.status = job_status::created;
  if (q.state == "failed") {
    j.status = job_status::failed;
    j.reason = q.reason;
  } else if (cancelled(q.job)) {
    j.status = job_status::failed;
    j.reason = "cancelled";
  } else if (!owner_alive(q)) {
    j.status = job_status::failed;
    j.reason = "lost";
  } else if (q.state == "waiting") {
    j.reason = std::string(detail::waiting_reason);
  } else if (q.state == "queued") {
    j.reason = std::string(detail::queued_reason);
    j.queue_position = position;
  }
  if (j.status == job_status::failed && q.ended_ms > 0) j.end_time = from_ms(q.ended_ms);
  for (int node = 0; node < q.num_nodes; ++node) {
    step s;
    s.name = "node-" + std::to_string(node);
    s.status = j.status;
    if (j.status == job_status::failed) s.reason = j.reason;
    j.steps.push_back(std::move(s));
  }
  return j;
}

// What the running jobs of this home hold, from their containers' labels
// (one list, no inspect), and the jobs admitted whose containers are being
// made (their queue files). A container of the home made before these labels
// counts 1 CPU; a container of another home or tool counts nothing.
asio::awaitable<outcome<detail::admitted_usage>> backend::impl::held(docker_api& d,
                                                                     const std::vector<queue_file>& files) {
  std::vector<std::string> filter{label_job};
  auto list = co_await d.container_list(filter);
  if (!list) co_return list.error();
  const auto prefix = (ctx.home / "containers").string() + "/";
  struct running {
    detail::admission_need need;
    bool labelled = false;
    int live = 0;
    std::string array;
  };
  std::map<std::string, running> jobs;
  for (const auto& v : *list) {
    if (!v.is_object()) continue;
    auto labels = labels_of(v.as_object());
    auto job = labels[label_job];
    if (job.empty() || !labels[label_workdir].starts_with(prefix)) continue;
    auto state = str_of(v.as_object(), "State");
    auto& r = jobs[job];
    if (labels.count(label_cpus)) {
      r.labelled = true;
      r.need.cpus = std::atoi(labels[label_cpus].c_str());
      r.need.memory = std::strtoull(labels[label_memory].c_str(), nullptr, 10);
      r.need.gpus = std::atoi(labels[label_gpus].c_str());
      r.array = labels[label_array];
    }
    if (state != "exited" && state != "dead" && state != "stopped") ++r.live;
  }
  detail::admitted_usage used;
  auto hold = [&](const std::string& job, const detail::admission_need& need, const std::string& array) {
    detail::queue_row row;
    row.job = job;
    row.need = need;
    row.group = array;
    row.admitted = true;
    used.add(row);
  };
  for (const auto& [job, r] : jobs) {
    if (r.live == 0) continue;
    detail::admission_need need = r.need;
    if (!r.labelled) need = {r.live, 0, 0};
    hold(job, need, r.array);
  }
  for (const auto& q : files)
    if (q.state == "admitted" && !jobs.count(q.job) && owner_alive(q) && !cancelled(q.job))
      hold(q.job, q.need, q.array);
  co_return used;
}

// The plan of the home's queue as it stands (no lock: for showing it).
asio::awaitable<detail::admission_plan> backend::impl::queue_plan(const std::vector<queue_file>& files) {
  auto daemon_ = co_await daemon();
  auto& d = *daemon_.value();
  auto used = co_await held(d, files);
  std::vector<detail::queue_row> rows;
  for (const auto& q : files)
    if (q.state == "queued" && owner_alive(q) && !cancelled(q.job)) rows.push_back(row_of(q));
  co_return detail::plan_admission(std::move(rows), admission_budget(), std::move(used).value());
}

detail::queue_row backend::impl::row_of(const queue_file& q) {
  detail::queue_row r;
  r.job = q.job;
  r.priority = q.priority;
  r.seq = q.seq;
  r.need = q.need;
  r.group = q.array;
  r.group_limit = q.array_limit;
  r.since_ms = q.since_ms;
  return r;
}

asio::awaitable<std::vector<queue_entry>> backend::impl::queue_view() {
  auto files = read_queues();
  auto plan = co_await queue_plan(files);
  std::vector<detail::queue_row> rows;
  std::map<std::string, std::int64_t> owner;
  for (const auto& q : files) {
    rows.push_back(row_of(q));
    owner[q.job] = q.owner_pid;
  }
  auto out = detail::queue_entries(plan, rows);
  // Each owner admits its jobs by its own budgets: what this process judges
  // is by its own, and it says so for another's (issue 42, as the local queue).
  detail::note_judged_by(out, owner, self_pid, admission_budget());
  co_return out;
}

// Where a waiting job that was not read with its queue stands: its place.
asio::awaitable<std::optional<int>> backend::impl::position_of(const std::string& job) {
  auto plan = co_await queue_plan(read_queues());
  for (const auto& w : plan.queue)
    if (w.job == job) co_return w.position;
  co_return std::nullopt;
}

// Why a dependency can never be met ("" while it may be); `met` when it is.
asio::awaitable<std::string> backend::impl::dependency_state(const std::string& dep, std::string_view kind,
                                                             bool& met) {
  auto found = co_await find(dep);
  std::optional<job_status> status;
  if (found)
    status = found->status;
  else if (!detail::means(found.error().code, errc::job_not_found))
    raise(found.error());
  co_return detail::dependency_verdict(dep, kind, status, met);
}

// One look at the queue: this process's waiting jobs that were cancelled or
// deleted leave it, those whose dependencies are met join it (or fail when
// they never can be), and those of its jobs that fit are admitted (moved from
// `pending` to the answer; their containers are made after, without the lock).
namespace {

// Takes the queue's lock (flock, LOCK_NB and a short timer: never blocking
// the reactor), giving up after 30 s.
asio::awaitable<void> lock_queue(queue_lock& lock, const fs::path& lock_file,
                                 const asio::any_io_executor& ex) {
  lock.fd = ::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lock.fd < 0)
    fail(errc::invalid_argument, "cannot open " + lock_file.string() + ": " + std::strerror(errno));
  asio::steady_timer timer(ex);
  const auto give_up = steady::now() + std::chrono::seconds(30);
  while (::flock(lock.fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR)
      fail(errc::invalid_argument, "cannot lock " + lock_file.string() + ": " + std::strerror(errno));
    if (steady::now() > give_up)
      fail(errc::store_locked, "another process has held " + lock_file.string() +
                                   " for 30 s; find it (fuser " + lock_file.string() + ") or try again");
    timer.expires_after(std::chrono::milliseconds(2));
    co_await timer.async_wait(asio::use_awaitable);
  }
}

}  // namespace

// Each job of this process that waits: gone, cancelled, never to start (a
// dependency that cannot be met), or, its dependencies met, in the queue.
// True when one of them changed.
asio::awaitable<bool> backend::impl::settle_pending(std::int64_t t) {
  bool changed = false;
  for (auto it = pending.begin(); it != pending.end();) {
    const std::string name = it->first;  // (a copy: the entry may be erased)
    auto q = read_queue(name);
    if (!q || q->state == "failed") {  // deleted (or ended by someone else)
      it = pending.erase(it);
      ++generation[name];
      changed = true;
      continue;
    }
    if (cancelled(name)) {
      q->state = "failed";
      q->reason = "cancelled";
      q->message = "cancelled while it waited";
      q->ended_ms = t;
      write_queue(*q);
      it = pending.erase(it);
      ++generation[name];
      changed = true;
      continue;
    }
    if (q->state == "waiting") {
      std::string never;
      bool all_met = q->begin_ms <= t;
      for (const auto& [list, kind] : {std::pair{&q->after_ok, "after_ok"},
                                       {&q->after_any, "after_any"},
                                       {&q->after_not_ok, "after_not_ok"}}) {
        for (const auto& dep : *list) {
          bool met = false;
          never = co_await dependency_state(dep, kind, met);
          if (!never.empty()) break;
          all_met = all_met && met;
        }
        if (!never.empty()) break;
      }
      if (!never.empty()) {
        q->state = "failed";
        q->reason = "DependencyNeverSatisfied";
        q->message = "dependency never satisfied: " + never;
        q->ended_ms = t;
        write_queue(*q);
        ctx.log->info("{}: {}", who(name), q->message);
        it = pending.erase(it);
        ++generation[name];
        changed = true;
        continue;
      }
      if (all_met) {
        // It joins the queue now, behind whoever is there.
        q->state = "queued";
        q->since_ms = t;
        q->seq = wall_ns();
        write_queue(*q);
        ++generation[name];
        changed = true;
      }
    }
    ++it;
  }
  co_return changed;
}

asio::awaitable<std::vector<backend::impl::pending_job>> backend::impl::admission_round() {
  std::vector<pending_job> admitted;
  if (pending.empty()) co_return admitted;
  auto daemon_ = co_await daemon();
  auto& d = *daemon_.value();
  // The lock: LOCK_NB and a short timer, never blocking the reactor.
  queue_lock lock;
  const auto lock_file = ctx.home / "containers" / ".queue.lock";
  co_await lock_queue(lock, lock_file, ctx.ex);
  const auto t = wall_ms();
  bool changed = co_await settle_pending(t);  // a job's state: its watchers (and list watchers) look again
  auto files = read_queues();
  auto used = co_await held(d, files);
  std::vector<detail::queue_row> rows;
  for (const auto& q : files)
    if (q.state == "queued" && owner_alive(q) && !cancelled(q.job)) rows.push_back(row_of(q));
  auto plan = detail::plan_admission(std::move(rows), admission_budget(), std::move(used).value());
  for (const auto& name : plan.admit) {
    auto it = pending.find(name);
    if (it == pending.end()) continue;  // another process's: its owner starts it
    auto q = std::find_if(files.begin(), files.end(), [&](const queue_file& f) { return f.job == name; });
    q->state = "admitted";
    q->admitted_ms = t;
    write_queue(*q);
    ++generation[name];
    changed = true;
    admitted.push_back(std::move(it->second));
    pending.erase(it);
  }
  if (changed) waiters.notify_all();
  co_return admitted;
}

asio::awaitable<void> backend::impl::run_admitter(std::shared_ptr<impl> self) {
  auto& b = *self;
  detail::wake_signal w(b.ctx.ex);
  detail::wake_registration reg(b.waiters, &w);
  b.ensure_events();  // a container's end wakes the admitter
  asio::steady_timer pace(b.ctx.ex);
  while (!b.stopping && !b.pending.empty()) {
    try {
      auto admitted = co_await b.admission_round();
      if (!admitted.empty()) b.waiters.notify_all();
      for (auto& job : admitted) {
        auto name = job.c.request.name;
        b.tasks.spawn(b.start_admitted(std::move(job)), "the containers of " + who(name));
      }
    } catch (const std::exception& e) {
      // The daemon is away or the home cannot be read: the next second tries again.
      b.ctx.log->warn("admission of container jobs: {}", e.what());
    }
    if (b.stopping || b.pending.empty()) break;
    // Each container's end wakes this (the daemon's events); a crashed owner
    // and a cancel from another process write only files: the second is for
    // those. A burst of events is taken as one look each 20 ms. A begin
    // time that comes sooner wakes it then.
    auto next = steady::now() + std::chrono::seconds(1);
    for (const auto& [name, job] : b.pending)
      if (auto begin = job.c.request.begin; begin && *begin > clock::now())
        next = std::min(next, steady::now() + std::chrono::duration_cast<std::chrono::milliseconds>(
                                                  *begin - clock::now()));
    co_await w.wait_until(next);
    pace.expires_after(std::chrono::milliseconds(20));
    co_await pace.async_wait(asio::use_awaitable);
  }
  b.admitter_running = false;
}

void backend::impl::ensure_admitter() {
  if (admitter_running || stopping || pending.empty()) return;
  admitter_running = true;
  tasks.spawn(run_admitter(shared_from_this()), "container admission");
}

// The containers of a job the admitter let in. A failure now has nobody to
// raise to: the job ends Failed, reason StartFailed, with the daemon's message.
asio::awaitable<void> backend::impl::start_admitted(pending_job job) {
  const auto name = job.c.request.name;
  std::exception_ptr failed;
  try {
    co_await create_job(job, true);
  } catch (...) {
    failed = std::current_exception();
  }
  if (failed) {
    std::string why;
    try {
      std::rethrow_exception(failed);
    } catch (const std::exception& e) {
      why = e.what();
    }
    ctx.log->warn("{}: cannot start after admission: {}", who(name), why);
    if (auto q = read_queue(name)) {
      q->state = "failed";
      q->reason = "StartFailed";
      q->message = why;
      q->ended_ms = wall_ms();
      write_queue(*q);
    }
  }
  ++generation[name];
  waiters.notify_all();
}

asio::awaitable<void> backend::impl::enqueue(pending_job job) {
  const auto& r = job.c.request;
  queue_file q;
  q.job = r.name;
  if (r.begin && *r.begin > clock::now())  // (one already past: at once)
    q.begin_ms = std::chrono::duration_cast<std::chrono::milliseconds>(r.begin->time_since_epoch()).count();
  q.state = r.after_ok.empty() && r.after_any.empty() && r.after_not_ok.empty() && q.begin_ms == 0
                ? "queued"
                : "waiting";
  q.runtime = job.c.rt.name;
  q.num_nodes = r.num_nodes;
  q.priority = r.priority;
  q.array = r.array;
  q.array_limit = r.array_limit;
  q.need = job.need;
  q.created_ms = q.since_ms = wall_ms();
  if (q.state == "queued") q.seq = wall_ns();  // (0 until it joins the queue)
  q.owner_pid = self_pid;
  q.owner_start = self_start;
  q.after_ok = r.after_ok;
  q.after_any = r.after_any;
  q.after_not_ok = r.after_not_ok;
  write_queue(q);
  const auto name = r.name;
  pending.emplace(name, std::move(job));
  // Decided now: a job that fits (the usual case) has its containers when
  // train returns, and a failure to make them is the caller's.
  auto admitted = co_await admission_round();
  std::optional<pending_job> mine;
  for (auto& a : admitted) {
    if (a.c.request.name == name) {
      mine.emplace(std::move(a));
      continue;
    }
    auto other = a.c.request.name;
    tasks.spawn(start_admitted(std::move(a)), "the containers of " + who(other));
  }
  if (mine) {
    co_await create_job(*mine, false);
    co_return;
  }
  ctx.log->info("{}: waits ({})", who(name),
                q.state == "waiting" ? "for its dependencies or begin time" : "in the queue");
  ensure_admitter();
}

}  // namespace tjob::container
