#include "adapters/local/local_impl.hpp"

#include "adapters/process/cgroup.hpp"
#include "adapters/process/proc_info.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/json/parse.hpp>

#include <sys/syscall.h>
#include <unistd.h>
#include <csignal>
#include <set>

namespace tjob::local {

// Kills what is left of a step whose owner died: the leader if it is still
// the process we recorded, else any members left in its process group.
void kill_orphan_group(std::int64_t pid, std::uint64_t start) {
  if (pid <= 0) return;
  auto p = static_cast<pid_t>(pid);
  if (process::is_same_process(p, start)) {
    ::killpg(p, SIGKILL);
  } else if (!process::start_time(p) && process::count_group_members(p) > 0) {
    ::killpg(p, SIGKILL);  // the leader is gone; nobody else can own that group id
  }
}

// A cancel is an input of the job's state machine, which stops what runs
// (SIGTERM, then SIGKILL after the grace period); this waits for its end.
asio::awaitable<void> engine_state::cancel_owned(std::shared_ptr<job_rec> j, bool force,
                                                 std::optional<std::chrono::milliseconds> grace) {
  if (is_terminal(j->row.status)) co_return;
  if (grace) j->grace = *grace;
  j->post(job_input::cancel(force));
  detail::wake_signal w(ex);
  detail::wake_registration reg(j->watchers, &w);
  while (!is_terminal(j->row.status)) {
    check_running();
    co_await w.wait_until(steady::time_point::max());
  }
}

std::chrono::milliseconds engine_state::grace_of(const detail::job_row& row) const {
  boost::system::error_code ec;
  auto spec = boost::json::parse(row.spec, ec);
  if (!ec && spec.is_object())
    if (const auto* g = spec.as_object().if_contains("grace_ms"); g && g->is_int64() && g->as_int64() >= 0)
      return std::chrono::milliseconds(g->as_int64());
  return cfg.grace_period;  // a job made before tjob recorded it
}

int engine_state::signal_running_steps(const detail::job_row& r, int sig,
                                       std::set<std::int64_t>* once) const {
  int sent = 0;
  for (const auto& s : r.steps) {
    if (s.status != job_status::running) continue;
    if (once && !once->insert(s.pid).second) continue;
    if (process::is_same_process(static_cast<pid_t>(s.pid), s.pid_start) &&
        ::killpg(static_cast<pid_t>(s.pid), sig) == 0)
      ++sent;
    // and what left the group: the cgroup that holds the step's tree (local_tree.cpp)
    if (auto dir = process::tree_cgroup_dir(job_token(r) + "-" + s.name); !dir.empty())
      process::signal_all(dir, sig);
  }
  return sent;
}

asio::awaitable<void> engine_state::cancel_foreign(const std::string& name, bool force,
                                                   std::optional<std::chrono::milliseconds> grace_given,
                                                   bool checkpoint) {
  auto row = load_fresh(name);
  if (!row) throw_not_found(name);
  if (is_terminal(row->status)) co_return;
  const auto grace = grace_given ? *grace_given : grace_of(*row);
  if (checkpoint) {
    co_await warn_foreign(*row, grace);
    row = load_fresh(name);
    if (!row || is_terminal(row->status)) co_return;
  }
  transact([&](detail::store& db) {
    db.append_event(name, "", now_ms(), log_event::cancel_requested,
                    "cancel requested by process " + std::to_string(self_pid) +
                        (force ? std::string(": SIGKILL to the process group now")
                               : ": SIGTERM to the process group, SIGKILL after " +
                                     std::to_string(grace.count()) + " ms"));
  });
  // Each step's process once with SIGTERM: one that starts while the cancel
  // waits (a queued job its owner had just admitted) gets its own at once
  // rather than running until the grace period's SIGKILL.
  std::set<std::int64_t> terminated;
  auto signal_steps = [&](const detail::job_row& r, int sig) {
    signal_running_steps(r, sig, sig == SIGTERM ? &terminated : nullptr);
  };
  signal_steps(*row, force ? SIGKILL : SIGTERM);
  foreign_watch fw(*this, *row, false);
  auto wait_for_end = [&](steady::time_point deadline) -> asio::awaitable<bool> {
    for (;;) {
      check_running();
      auto r = load_fresh(name);
      if (!r || is_terminal(r->status)) co_return true;
      if (!force) signal_steps(*r, SIGTERM);  // (only steps started since)
      if (!co_await fw.wait_until(deadline)) co_return false;
    }
  };
  if (!force) {  // a forced cancel sent its SIGKILL above
    if (co_await wait_for_end(steady::now() + grace)) co_return;
    if (auto r = db->load_job(name)) signal_steps(*r, SIGKILL);
  }
  if (!co_await wait_for_end(steady::now() + std::chrono::seconds(30)))
    fail(errc::timeout, "TrainJob " + quote(name) + " did not end after SIGKILL; its owner (pid " +
                            std::to_string(row->owner_pid) + ") is not answering");
}

// ---------------------------------------------------------------------------
// reconciliation

// At open, jobs found lost mean a tjob ended uncleanly (a crash, kill -9, the
// machine's end): said once, with where to check what else it may have hurt.
void engine_state::reconcile_all() {
  if (auto n = reconcile_rows(db->load_unfinished()))
    log->warn(
        "{} job(s) marked Failed, lost: the tjob that owned them ended without recording how they "
        "ended, and what was left of their processes was stopped; `tjob doctor` checks the store for "
        "damage such an end can leave",
        n);
}

bool engine_state::reconcile_row(const detail::job_row& row) { return reconcile_rows({row}) > 0; }

std::string engine_state::job_token(const detail::job_row& row) const {
  return fmt::format("{:016x}-{}-{}", std::hash<std::string>{}(home.string()), row.name, row.created_ms);
}

// A job recorded as unfinished whose owner is gone is Failed, reason `lost`:
// nobody saw how it ended. What is left of its processes is killed: the
// process groups on record, and any process carrying the job's token in its
// environment (that covers a child started just before its pid was committed).
std::size_t engine_state::reconcile_rows(const std::vector<detail::job_row>& rows) {
  if (!read_only.empty()) return 0;  // nothing can be recorded (get and list show them lost: view_of)
  std::vector<const detail::job_row*> orphaned;
  std::set<std::string> tokens;
  for (const auto& row : rows) {
    if (owner_alive(row)) continue;
    orphaned.push_back(&row);
    tokens.insert(std::string(token_variable) + "=" + job_token(row));
    for (const auto& s : row.steps)
      if (!is_terminal(s.status)) kill_orphan_group(s.pid, s.pid_start);
  }
  if (orphaned.empty()) return 0;
  for (const auto& [pid, entry] : process::find_by_environment(tokens)) {
    log->info("killing process {} left behind by a lost job ({})", pid, entry);
    ::kill(pid, SIGKILL);
  }
  for (const auto* row : orphaned)
    for (const auto& s : row->steps)
      for (const auto& dir : process::cgroup_dirs_for(job_token(*row) + "-" + s.name)) {
        if (auto n = process::signal_all(dir, SIGKILL))  // what left the process group and the token behind
          log->info("killed {} process(es) left in cgroup {} by a lost job", n, dir);
        process::remove_cgroup(dir);
      }
  std::size_t marked = 0;
  for (const auto* row : orphaned) {
    bool done = transact([&](detail::store& db) {
      auto cur = db.load_job(row->name);
      if (!cur || is_terminal(cur->status) || cur->owner_pid != row->owner_pid ||
          cur->owner_start != row->owner_start)
        return false;
      // The log is the truth: what it says of each step decides which steps
      // are lost, and the columns are written again from its fold.
      auto state = db.fold_log(*cur);
      for (auto& s : state.steps) {
        if (is_terminal(s.status)) continue;
        std::string was(to_string(s.status));
        detail::logged_event lost{s.name, log_event::lost, std::nullopt, "lost"};
        db.append_event(cur->name, s.name, now_ms(), log_event::lost,
                        "the process that supervised the job (pid " + std::to_string(cur->owner_pid) +
                            ") ended while the step was " + was + "; nobody saw how it ended",
                        std::nullopt, lost.detail);
        detail::fold_event(state, lost);
      }
      for (std::size_t i = 0; i < cur->steps.size(); ++i) {
        auto& s = cur->steps[i];
        s.status = state.steps[i].status;
        s.exit_code = state.steps[i].exit_code;
        s.reason = state.steps[i].reason;
        s.attempt = state.steps[i].attempt;
        db.update_step(cur->name, s);
      }
      db.update_job_status(cur->name, state.status, state.reason);
      return true;
    });
    if (done) ++marked;
  }
  return marked;
}

// ---------------------------------------------------------------------------
// foreign jobs

foreign_watch::foreign_watch(engine_state& e, const detail::job_row& row, bool logs)
    : e_(e), name_(row.name), logs_(logs), wake_(e.ex) {
  store_wd_ = e_.watch.add(e_.home, &wake_, e_.store_wake_file);
  if (logs) log_wd_ = e_.watch.add(e_.log_dir(row.name), &wake_);
  if (row.owner_pid > 0) {
    int fd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(row.owner_pid), 0));
    if (fd >= 0) {
      owner_.emplace(e_.ex, fd);
      // The pid may have been reused between the check and the open.
      if (!e_.owner_alive(row)) owner_.reset();
    }
  }
}

foreign_watch::~foreign_watch() {
  e_.watch.remove(store_wd_, &wake_);
  e_.watch.remove(log_wd_, &wake_);
}

asio::awaitable<bool> foreign_watch::wait_until(steady::time_point deadline) {
  // The log directory appears just after the job's row; watch it once it is there.
  if (logs_ && log_wd_ < 0) log_wd_ = e_.watch.add(e_.log_dir(name_), &wake_);
  if (!owner_ || !owner_->is_open()) co_return co_await wake_.wait_until(deadline);
  using namespace asio::experimental::awaitable_operators;
  auto r = co_await (wake_.wait_until(deadline) ||
                     owner_->async_wait(asio::posix::descriptor_base::wait_read, asio::use_awaitable));
  if (r.index() == 1) {
    owner_.reset();
    if (auto row = e_.db->load_job(name_)) e_.reconcile_row(*row);
    co_return true;
  }
  co_return std::get<0>(r);
}

}  // namespace tjob::local
