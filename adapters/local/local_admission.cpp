// Admission of local jobs (docs/scheduling.md): the queue is a table of the
// store, so every engine on one $TJOB_HOME shares it and its budgets. A new
// job joins it in the transaction that records it, and starts at once when it
// fits (insert_job). One that does not waits, Created with reason Queued, in
// its owner's admission_waiting. The owner's admitter looks again after each
// commit on the store (any process's, by inotify), and every second for
// owners that died without a commit: their jobs are reconciled (Failed, lost),
// which frees what they held.
#include "adapters/local/local_impl.hpp"

#include "adapters/process/cgroup.hpp"
#include "adapters/process/proc_info.hpp"

#include <tjob/spec.hpp>

#include <spdlog/spdlog.h>

#include <sys/stat.h>
#include <algorithm>
#include <map>
#include <set>

namespace tjob::local {

namespace {

// A job joins one of the admitter's lists: the admitter looks now, and is
// started when it is not running.
void enlist(engine_state& e, std::vector<std::shared_ptr<job_rec>>& list, const std::shared_ptr<job_rec>& j) {
  list.push_back(j);
  // A cancel from another process before now is in the log already; the
  // admitter reads only what comes after its last read (cancels_after).
  if (e.cancels_read >= 0) e.check_cancelled(*j);
  if (e.admitter_wake)
    e.admitter_wake->notify();
  else
    e.spawn_internal(e.run_admitter(), "admission");
}

}  // namespace

void engine_state::join_queue(const std::shared_ptr<job_rec>& j) {
  j->in_admission_list = true;
  enlist(*this, admission_waiting, j);
  // It waited at submit behind somebody; whoever is ahead may fit by now.
  schedule_admission();
}

void engine_state::wait_dependencies(const std::shared_ptr<job_rec>& j) {
  enlist(*this, dependency_waiting, j);
}

void engine_state::leave_queue(job_rec& j) {
  if (j.in_admission_list) std::erase_if(admission_waiting, [&](const auto& w) { return w.get() == &j; });
  j.in_admission_list = false;
  std::erase_if(dependency_waiting, [&](const auto& w) { return w.get() == &j; });
}

void engine_state::check_cancelled(job_rec& j) {
  try {
    if (db->has_event(j.row.name, log_event::cancel_requested)) j.post(job_input::cancel(false, true));
  } catch (const std::exception& e) {
    log->warn("job {}: cannot read its event log for a cancel: {}", j.row.name, e.what());
  }
}

std::vector<std::shared_ptr<job_rec>> engine_state::waiting_jobs() const {
  std::vector<std::shared_ptr<job_rec>> out;
  for (const auto* list : {&admission_waiting, &dependency_waiting, &backoff_waiting})
    out.insert(out.end(), list->begin(), list->end());
  return out;
}

void engine_state::end_backoff(const job_rec& j) {
  std::erase_if(backoff_waiting, [&](const auto& w) { return w.get() == &j; });
}

void engine_state::wait_backoff(const std::shared_ptr<job_rec>& j) { enlist(*this, backoff_waiting, j); }

std::string engine_state::dependency_state(const job_rec::dependency& dep, bool& met) {
  std::optional<job_status> status;
  if (auto o = owned(dep.job)) {
    status = o->row.status;
  } else if (auto row = load_fresh(dep.job)) {  // (a dead owner's job is recorded lost first)
    status = row->status;
  }
  if (status && is_terminal(*status) && db->has_event(dep.job, log_event::delete_requested))
    status.reset();  // ended by its delete's cancel: deleted before it ended
  return detail::dependency_verdict(dep.job, dep.kind, status, met);
}

void engine_state::dependency_round() {
  for (const auto& j : std::vector(dependency_waiting)) {
    std::string never;
    const auto& waits = *j->waits;  // (every job of the list waits for something)
    bool all_met = waits.begin_ms <= now_ms();
    for (const auto& d : waits.deps) {
      bool met = false;
      auto why = dependency_state(d, met);
      if (!why.empty()) {
        never = why;
        break;
      }
      all_met = all_met && met;
    }
    if (!never.empty()) {
      leave_queue(*j);
      j->post(job_input::dependency_never_satisfied("dependency never satisfied: " + never));
      continue;
    }
    if (!all_met) continue;
    // Met: it joins the admission queue now, behind whoever is there.
    const std::string met = waits.deps.empty()    ? "its begin time has come"
                            : waits.begin_ms == 0 ? "its dependencies are met"
                                                  : "its dependencies are met and its begin time has come";
    auto adm = *j->admission;
    adm.job = j->row.name;
    const auto t = now_ms();
    adm.since_ms = t;
    auto waiting = transact([&](detail::store& s) {
      auto w = join_admission_queue(s, adm, budget, t);  // Queued, with its place, when it does not fit
      if (w.empty()) {
        s.update_job_status(adm.job, job_status::created, "");
        s.append_event(adm.job, "", t, log_event::admitted, met + ", and it fits");
      }
      return w;
    });
    leave_queue(*j);
    j->admission.reset();
    j->waits.reset();
    j->row.reason.clear();
    if (waiting.empty()) {
      after_admission(j);
    } else {
      j->queued = true;
      j->row.reason = detail::queued_reason;
      j->queued_ms = t;
      j->in_admission_list = true;
      admission_waiting.push_back(j);
      schedule_admission();
    }
    j->watchers.notify_all();
  }
}

asio::awaitable<void> engine_state::run_admitter() {
  auto self = shared_from_this();
  detail::wake_signal w(ex);
  detail::wake_registration ours(committed, &w);
  struct unwatch {
    engine_state& e;
    detail::wake_signal* w;
    int wd;
    ~unwatch() {
      e.admitter_wake = nullptr;
      e.cancels_read = -1;
      e.watch.remove(wd, w);
    }
  } watching{*this, &w, watch.add(home, &w, store_wake_file)};
  admitter_wake = &w;
  // From here on the admitter reads the log's new cancels; those before are
  // looked up once for each job that waits (and for each that joins later).
  cancels_read = db->last_event_seq();
  for (const auto& j : waiting_jobs()) check_cancelled(*j);
  auto idle = [&] {
    return admission_waiting.empty() && dependency_waiting.empty() && backoff_waiting.empty();
  };
  bool timed_out = true;  // the first look is a whole one
  seen_data_version = -1;
  while (!idle() && !stopping) {
    try {
      dependency_round();
      admit_round(timed_out);
    } catch (const std::exception& e) {
      // The store is busy or failing: the next commit or second tries again.
      log->warn("admission: {}", e.what());
    }
    if (idle() || stopping) break;
    // A crashed owner writes nothing: the second is for those. A begin time
    // that comes sooner wakes it then.
    auto next = steady::now() + std::chrono::seconds(1);
    const auto t = now_ms();
    for (const auto& j : dependency_waiting)
      if (j->waits && j->waits->begin_ms > t)
        next = std::min(next, steady::now() + std::chrono::milliseconds(j->waits->begin_ms - t));
    timed_out = !co_await w.wait_until(next);
  }
}

void engine_state::admit_round(bool timed_out) {
  flush();
  const auto version = db->data_version();
  const bool foreign = version != seen_data_version;
  seen_data_version = version;
  if (!foreign && !timed_out) return;  // only this engine wrote: it decided as it wrote
  refresh_budget();
  // Another process's cancel of a waiting job is in its log; no process of
  // the job runs to be signalled, so the owner acts on it here. Only the
  // log's new rows are read.
  if (cancels_read >= 0) {
    auto cancelled = db->cancels_after(cancels_read);
    if (!cancelled.empty()) {
      std::set<std::string, std::less<>> names(cancelled.begin(), cancelled.end());
      for (const auto& j : waiting_jobs())
        if (names.count(j->row.name)) j->post(job_input::cancel(false, true));
    }
  }
  if (admission_waiting.empty()) return;
  // Only the head of the queue decides (plan_queue_head): a crashed owner's
  // job there is reconciled, which frees what it holds; one further back is
  // when it reaches the head, or when anybody lists it.
  std::vector<detail::queued_job> rows;
  auto plan = plan_queue_head(*db, budget, &rows);
  bool reconciled = false;
  for (const auto& q : rows)
    if (!owned(q.row.job) && !process::is_same_process(static_cast<pid_t>(q.owner_pid), q.owner_start))
      if (auto row = db->load_job(q.row.job)) reconciled |= reconcile_row(*row);
  if (reconciled) plan = plan_queue_head(*db, budget);
  if (std::none_of(plan.admit.begin(), plan.admit.end(),
                   [&](const std::string& n) { return waiting_here(n); }))
    return;
  schedule_admission();
}

// config.yaml is read when the engine opens the store and again by the
// admitter once it changes (a round runs at least once a second), so an edit
// reaches every process on the home without a restart. A file that became bad
// keeps the budgets read before, with a warning; the first read raises.
void engine_state::refresh_budget() {
  if (!budget_file) budget_file.emplace(cfg.admission, home, static_cast<int>(gpu_devices.size()));
  auto r = budget_file->refresh();
  budget = budget_file->budget();
  if (!r.warning.empty()) log->warn("{}", r.warning);
  if (r.read_again)
    log->info("admission budgets read again from {}: max_running {}, cpus {}, memory {}",
              (home / "config.yaml").string(), budget.max_running, budget.cpus, budget.memory);
}

bool engine_state::waiting_here(const std::string& name) const {
  auto j = owned(name);
  return j && j->in_admission_list;
}

// The decision is a write of the next group commit, so it is made again
// under the write lock (another process may have admitted its own jobs since
// any read), and a job's end and the admission it makes room for share one
// commit (apply queues this right after a job's last transition).
void engine_state::schedule_admission() {
  if (admission_scheduled || admission_waiting.empty()) return;
  admission_scheduled = true;
  auto admitted = std::make_shared<std::vector<std::string>>();
  auto cancelled = std::make_shared<std::vector<std::string>>();
  queue_write(
      [self = shared_from_this(), admitted, cancelled](detail::store& s) {
        self->admission_scheduled = false;
        admitted->clear();  // (a write retried after a failed commit decides afresh)
        cancelled->clear();
        const auto t0 = steady::now();
        const auto t = now_ms();
        auto plan = plan_queue_head(s, self->budget);
        std::vector<std::string> mine;
        for (auto& name : plan.admit)
          if (self->waiting_here(name)) mine.push_back(std::move(name));
        const auto decided = steady::now();
        for (const auto& name : mine) {
          // Another process's cancel that came after the admitter's last
          // read of the log, under this same write lock: the job is not let
          // in to run out the cancel's grace period (a sweep's cancel, as
          // its queued trials were admitted one by one), it ends cancelled.
          if (s.has_event(name, log_event::cancel_requested)) {
            cancelled->push_back(name);
            continue;
          }
          const std::int64_t since = self->owned(name)->queued_ms;
          s.admit(name);
          s.update_job_status(name, job_status::created, "");
          s.append_event(name, "", t, log_event::admitted,
                         fmt::format("admitted after {:.1f} s in the queue", (t - since) / 1000.0));
          admitted->push_back(name);
        }
        log_decision(*self->log, t0, std::max<std::size_t>(admitted->size(), 1),
                     self->admission_waiting.size(), decided);
      },
      [self = shared_from_this(), admitted, cancelled] {
        for (const auto& name : *cancelled)
          if (auto j = self->owned(name)) j->post(job_input::cancel(false, true));
        // Out of the waiting list in one pass (one erase each would move the
        // whole list each time: quadratic in a deep queue).
        std::vector<std::shared_ptr<job_rec>> let_in;
        for (const auto& name : *admitted) {
          auto j = self->owned(name);
          if (!j || !j->in_admission_list) continue;
          j->in_admission_list = false;
          let_in.push_back(std::move(j));
        }
        std::erase_if(self->admission_waiting, [](const auto& j) { return !j->in_admission_list; });
        for (const auto& j : let_in) self->after_admission(j);
      });
}

void engine_state::after_admission(const std::shared_ptr<job_rec>& j) {
  j->queued = false;
  j->row.reason.clear();
  j->watchers.notify_all();
  if (j->gpus_per_node > 0)
    start_op(j, lease_gpus(j), "waiting for GPUs");
  else
    j->post(job_input::lease_granted());
}

std::vector<queue_entry> engine_state::queue_view() {
  flush();
  std::vector<detail::queue_row> rows;
  std::map<std::string, std::int64_t> owner;
  for (const auto& q : db->load_queue()) {
    rows.push_back(q.row);
    owner[q.row.job] = q.owner_pid;
  }
  auto plan = detail::plan_admission(rows, budget);
  auto out = detail::queue_entries(plan, rows);
  // Each owner admits its jobs by its own budgets (its flags, or config.yaml
  // and the machine): what this process can judge is by its own (issue 42).
  detail::note_judged_by(out, owner, self_pid, budget);
  return out;
}

void engine_state::arm_deadline(const std::shared_ptr<job_rec>& j) {
  if (j->deadline.count() <= 0 || j->deadline_timer) return;
  j->deadline_timer = std::make_unique<asio::steady_timer>(ex, j->deadline);
  j->deadline_timer->async_wait([w = std::weak_ptr<job_rec>(j)](error_code ec) {
    if (auto jr = w.lock(); jr && !ec) jr->post(job_input::deadline_passed());
  });
  if (!j->warning) return;
  // (the engine checked that the warning comes after the start: before < deadline)
  auto& wr = *j->warning;
  wr.timer = std::make_unique<asio::steady_timer>(ex, j->deadline - wr.warning.before);
  wr.timer->async_wait([self = weak_from_this(), w = std::weak_ptr<job_rec>(j)](error_code ec) {
    auto e = self.lock();
    if (auto jr = w.lock(); e && jr && !ec && !e->stopping)
      e->send_warning(*jr, std::to_string(jr->warning->warning.before.count()) +
                               " s before its active deadline of " + std::to_string(jr->deadline.count()) +
                               " s");
  });
}

// A warning changes nothing of the job: its steps that run get the signal
// (each one's whole tree, as a stop would: a torch node's agent and
// workers), and the log says when. A Python job's processes all handle it
// (python::line_hook_module); a command must, or the signal's default action
// applies, as with Slurm's --signal.
int engine_state::send_warning(job_rec& j, const std::string& when) {
  const auto& w = j.warning->warning;
  int sent = 0;
  for (auto& s : j.steps) {
    if (!s.code_runs || !s.proc.signal_group(w.signal)) continue;
    if (const auto* tree = s.tree_cgroup()) process::signal_all(*tree, w.signal);
    ++sent;
  }
  if (sent == 0) return 0;  // none runs: it is ending anyway, or has no code running yet
  auto what = "SIG" + signal_name(w.signal) + " sent to the job's processes, " + when;
  if (!j.venv.empty())
    log_progress(j, j.steps[0], "[tjob] " + what + "\n");  // (a command's log stays its own)
  queue_write([name = j.row.name, t = now_ms(), what = std::move(what)](detail::store& db) {
    db.append_event(name, "", t, log_event::warned, what);
  });
  return sent;
}

// Waits (Created, without polling) until the job's GPUs are free, leases
// them and says so: lease_granted.
asio::awaitable<void> engine_state::lease_gpus(std::shared_ptr<job_rec> j) {
  std::size_t nodes = j->steps.size();
  std::size_t need = static_cast<std::size_t>(j->gpus_per_node) * nodes;
  detail::wake_signal w(ex);
  detail::wake_registration own(device_waiters, &w), mine(j->watchers, &w);
  int wd = -1;
  struct unwatch {
    detail::fs_watch& watch;
    int& wd;
    detail::wake_signal* w;
    ~unwatch() { watch.remove(wd, w); }
  } unwatch_home{watch, wd, &w};
  bool said = false;
  std::optional<std::vector<std::string>> got;
  for (;;) {
    check_running();
    got = transact([&](detail::store& db) { return db.lease_devices(j->row.name, gpu_devices, need); });
    if (got) break;
    if (!said) {
      said = true;
      // Another process's release changes the store: its inotify wakes us too.
      wd = watch.add(home, &w, store_wake_file);
      log_progress(*j, j->steps[0],
                   "[tjob] waiting for " + std::to_string(need) + " GPU(s); the engine's " +
                       std::to_string(gpu_devices.size()) + " are in use\n");
      j->row.reason = detail::queued_reason;
      queue_write([name = j->row.name, t = now_ms(), need](detail::store& db) {
        db.append_event(name, "", t, log_event::queued, "waiting for " + std::to_string(need) + " GPU(s)");
        db.update_job_status(name, job_status::created, std::string(detail::queued_reason));
      });
    }
    co_await w.wait_until(steady::time_point::max());
    if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none)
      co_return;  // abandoned: the job was cancelled
  }
  std::string summary;
  for (std::size_t i = 0; i < nodes; ++i) {
    std::string ids;
    for (int k = 0; k < j->gpus_per_node; ++k)
      ids += (k ? "," : "") + (*got)[i * static_cast<std::size_t>(j->gpus_per_node) + k];
    j->node_devices.push_back(ids);
    summary += (i ? "; " : "") + j->steps[i].row.name + ": " + ids;
  }
  log_progress(*j, j->steps[0], "[tjob] GPUs (CUDA_VISIBLE_DEVICES) " + summary + "\n");
  const bool was_queued = j->row.reason == detail::queued_reason;
  if (was_queued) j->row.reason.clear();
  queue_write([name = j->row.name, t = now_ms(), summary, was_queued](detail::store& db) {
    db.append_event(name, "", t, log_event::devices_leased, "CUDA_VISIBLE_DEVICES " + summary);
    if (was_queued) db.update_job_status(name, job_status::created, "");
  });
  j->post(job_input::lease_granted());
}

void engine_state::release_gpus(job_rec& j) {
  try {
    transact([&](detail::store& db) { db.release_devices(j.row.name); });
  } catch (const std::exception& e) {
    log->error("job {}: cannot release its GPUs: {}", j.row.name, e.what());
  }
  device_waiters.notify_all();
}

// Starts phase `index` of step `step` (code_phase: the node's code); its
// process writes its output straight into the step's log, so the log is
// complete whatever happens to the engine, and the engine holds no pipe. The
// answer is `spawned` or `spawn_failed`. Not a coroutine: nothing it builds
// (the environment, argv) stays in the job's frame while the process runs.
}  // namespace tjob::local
