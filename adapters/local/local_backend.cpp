#include "adapters/local/local_backend.hpp"

#include "adapters/local/local_impl.hpp"
#include "adapters/local/log_files.hpp"
#include "core/log_stream_impl.hpp"
#include "core/messages.hpp"
#include "core/times.hpp"

#include <boost/asio/cancellation_type.hpp>

#include <algorithm>
#include <set>

namespace tjob::local {

namespace {

venv_cache_entry to_entry(const detail::venv_cache::entry_info& e) {
  venv_cache_entry v;
  v.key = e.key;
  v.python = e.from.python;
  v.python_version = e.python_version;
  v.packages = e.from.packages;
  v.index_urls = e.from.index_urls;
  v.system_site_packages = e.from.system_site_packages;
  v.bytes = e.bytes;
  v.created = from_ms(e.created_ms);
  v.last_used = from_ms(e.last_used_ms);
  v.problem = e.problem;
  return v;
}

// A waiter's view of one job: this engine's own jobs wake it by their
// transitions; another process's through the store, its log and its owner's
// pidfd (foreign_watch).
class local_watch final : public detail::job_watch {
 public:
  local_watch(std::shared_ptr<engine_state> e, std::string name, std::shared_ptr<job_rec> j)
      : e_(std::move(e)), name_(std::move(name)), owned_(std::move(j)), wake_(e_->ex) {
    if (owned_) reg_.emplace(owned_->watchers, &wake_);
  }

  asio::awaitable<std::optional<train_job>> current() override {
    if (owned_) {
      e_->check_recordable(*owned_);  // a store that fails for long ends the wait, saying why
      co_return e_->snapshot(*owned_);
    }
    auto row = e_->load_fresh(name_);
    if (!row) e_->throw_not_found(name_);
    if (!foreign_) foreign_ = std::make_unique<foreign_watch>(*e_, *row, false);
    co_return to_job(*row);
  }

  asio::awaitable<bool> changed(steady::time_point deadline) override {
    if (owned_) co_return co_await wake_.wait_until(deadline);
    co_return co_await foreign_->wait_until(deadline);
  }

 private:
  std::shared_ptr<engine_state> e_;
  std::string name_;
  std::shared_ptr<job_rec> owned_;
  detail::wake_signal wake_;
  std::optional<detail::wake_registration> reg_;
  std::unique_ptr<foreign_watch> foreign_;
};

// Every commit, by any process on this store, ends with a write of the wake
// file (store::commit): one inotify watch on $TJOB_HOME sees them all.
class local_changes final : public detail::change_watch {
 public:
  explicit local_changes(std::shared_ptr<engine_state> e)
      : e_(std::move(e)), wake_(e_->ex), ours_(e_->committed, &wake_) {
    wd_ = e_->watch.add(e_->home, &wake_, e_->store_wake_file);
  }
  ~local_changes() override { e_->watch.remove(wd_, &wake_); }

  asio::awaitable<bool> changed(steady::time_point deadline) override {
    e_->check_running();
    co_return co_await wake_.wait_until(deadline);
  }

 private:
  std::shared_ptr<engine_state> e_;
  detail::wake_signal wake_;
  detail::wake_registration ours_;  // this engine's commits, without waiting for inotify
  int wd_ = -1;
};

}  // namespace

namespace {

// Records the step's log as it is now (log_clock) when this engine runs the
// job (`j` is null otherwise): what is read next then has its final times.
void mark_times(const std::shared_ptr<job_rec>& j, const std::string& step) {
  if (!j) return;
  for (auto& s : j->steps)
    if (s.row.name == step) s.times.mark();
}

}  // namespace

struct local_log final : log_stream::impl {
  std::shared_ptr<engine_state> e;
  std::string job, step;
  bool follow = false;
  std::shared_ptr<job_rec> owned;  // null when another process runs the job
  detail::log_cursor cursor;
  detail::line_buffer buf;
  bool ending = false;
  std::unique_ptr<foreign_watch> foreign;
  std::unique_ptr<detail::wake_signal> wake;
  std::unique_ptr<detail::wake_registration> reg;
  int log_wd = -1;
  // With timestamps or since: each line's time, from the step's times file
  std::optional<detail::log_times> times;
  bool show_times = false;
  std::optional<clock::time_point> since;
  std::uint64_t handed = 0;  // offset past the last byte handed out
  // An earlier attempt's part of the log ends here (log_options::attempt)
  std::uint64_t limit = std::numeric_limits<std::uint64_t>::max();
  std::optional<int> attempt;  // the attempt followed, when one was asked for

  local_log(std::shared_ptr<engine_state> eng, std::string j, const log_options& o,
            std::filesystem::path path, std::uint64_t offset)
      : e(std::move(eng)),
        job(std::move(j)),
        step(o.step),
        follow(o.follow),
        cursor(path, offset),
        show_times(o.timestamps),
        since(o.since),
        handed(offset),
        attempt(o.attempt) {
    if (o.timestamps || o.since) times.emplace(detail::times_path_of(path));
  }

  // Whether the step has ended (or the job is gone): after that, what the file
  // holds is all there will be, because output is written before the status.
  bool step_ended() {
    if (owned) {
      for (const auto& s : owned->steps)
        if (s.row.name == step) return attempt_ended(s.row.attempt) || is_terminal(s.row.status);
      return true;
    }
    auto row = e->load_fresh(job);
    if (!row) return true;
    for (const auto& s : row->steps)
      if (s.name == step) return attempt_ended(s.attempt) || is_terminal(s.status);
    return true;
  }

  // Following one attempt (log_options::attempt) that the job has since
  // restarted from: its part of the log ends where the next begins.
  bool attempt_ended(int now) {
    if (!attempt || now <= *attempt) return false;
    auto starts = detail::attempt_starts(e->attempts_path(job, step));
    if (auto it = starts.find(*attempt + 1); it != starts.end()) limit = it->second;
    return true;
  }

  // Woken by the log growing (the job writes it directly: inotify on its
  // directory) and by the step's end (a transition here, or through the
  // store's watch for another process's job).
  asio::awaitable<void> wait_for_more() {
    if (owned) {
      if (!wake) {
        wake = std::make_unique<detail::wake_signal>(e->ex);
        reg = std::make_unique<detail::wake_registration>(owned->watchers, wake.get());
        log_wd = e->watch.add(e->log_dir(job), wake.get());
        co_return;  // re-check once the watch is in place: nothing can slip between
      }
      co_await wake->wait_until(steady::time_point::max());
      co_return;
    }
    if (!foreign) {
      auto row = e->db->load_job(job);
      if (!row) co_return;
      foreign = std::make_unique<foreign_watch>(*e, *row, true);
      co_return;  // re-check once the watch is in place: nothing can slip between
    }
    co_await foreign->wait_until(steady::time_point::max());
  }

  ~local_log() override {
    if (wake) e->watch.remove(log_wd, wake.get());
  }

  // Reads what was appended; the engine that runs the step records its times
  // first, so what is handed out has its final time.
  std::size_t read_more() {
    if (cursor.offset() >= limit) {
      ending = true;  // an earlier attempt: all there will be
      return 0;
    }
    std::size_t n = cursor.read_more(buf.bytes(), static_cast<std::size_t>(std::min<std::uint64_t>(
                                                      std::uint64_t(1) << 16, limit - cursor.offset())));
    if (n > 0 && times) mark_times(owned, step);
    return n;
  }

  // `line` (what ends at `handed`) with its time in front, or nothing when
  // it is older than `since`.
  void add_timed(std::string& out, std::string_view line) {
    auto t = times->time_of(handed);
    if (!t) t = cursor.modified();  // not recorded yet: the last write is the latest it can be
    if (!t) t = clock::now();
    if (since && *t < *since) return;
    if (show_times) {
      out += detail::format_rfc3339_nano(*t);
      out += ' ';
    }
    out.append(line);
  }

  asio::awaitable<std::optional<std::string>> next(bool whole_lines) override {
    std::string timed;
    for (;;) {
      if (!times) {
        if (auto out = buf.take(whole_lines)) co_return out;
      } else {
        while (auto line = buf.take(false)) {
          handed += line->size();
          add_timed(timed, *line);
          if (!whole_lines && !timed.empty()) co_return timed;
        }
        if (!timed.empty()) co_return timed;
      }
      if (read_more() > 0) continue;
      if (ending || !follow) {
        auto rest = buf.take_rest();
        if (!rest || !times) co_return rest;
        handed += rest->size();
        add_timed(timed, *rest);
        if (timed.empty()) co_return std::nullopt;
        co_return timed;
      }
      if (step_ended()) {
        ending = true;  // one more read takes whatever was written before the end
        continue;
      }
      if (e->stopping) fail(errc::shut_down, "the engine is shutting down");
      co_await wait_for_more();
    }
  }
};

backend::backend(detail::backend_context ctx)
    : detail::backend(ctx), impl_(std::make_shared<engine_state>(ctx_)) {}

backend::~backend() = default;

namespace {

backend_capabilities capabilities_of() {
  backend_capabilities c;
  c.id = "local";
  c.runs_here = true;
  c.needs_owner = true;
  c.admission = true;
  c.restarts = true;
  c.arrays = true;
  c.venv_cache = true;
  c.takes_code_dir = true;
  c.stop_warning = true;
  c.begin_time = true;
  c.job_files = "jobs";
  return c;
}

}  // namespace

backend_capabilities backend::capabilities() const { return capabilities_of(); }

detail::backend_registration registration() {
  detail::backend_registration r;
  r.description.id = "local";
  r.description.summary = "local (default; $TJOB_BACKEND)";
  r.description.capabilities = capabilities_of();
  r.check = [](const boost::json::object& c, const std::function<std::string(std::string_view)>& name_of) {
    detail::config_reader{c, name_of, "local"}.only({});
  };
  r.make = [](detail::backend_context ctx) -> std::shared_ptr<detail::backend> {
    return std::make_shared<backend>(std::move(ctx));
  };
  return r;
}

asio::awaitable<std::string> backend::train(detail::checked_request request) {
  impl_->check_writable("run a job");
  co_return co_await impl_->train(std::move(request));
}

namespace {

// A read-only store cannot record that a job's owner died (reconcile_rows
// appends a Lost event for each step that had not ended); it is shown as the
// fold of those events would record it, and the store is left as it is.
train_job view_of(const engine_state& e, detail::job_row row) {
  if (!e.read_only.empty() && !is_terminal(row.status) && !e.owner_alive(row)) {
    detail::folded_job state{row.status, row.reason, {}};
    for (const auto& s : row.steps)
      state.steps.push_back({s.name, s.status, s.exit_code, s.reason, s.attempt});
    for (const auto& s : row.steps)
      if (!is_terminal(s.status)) detail::fold_event(state, {s.name, log_event::lost, std::nullopt, "lost"});
    row.status = state.status;
    row.reason = state.reason;
    for (std::size_t i = 0; i < row.steps.size(); ++i) {
      row.steps[i].status = state.steps[i].status;
      row.steps[i].reason = state.steps[i].reason;
    }
  }
  return to_job(row);
}

}  // namespace

namespace {

// The places of queued jobs in the queue (a job is Created with reason Queued
// while it waits for admission).
bool is_queued(const train_job& j) {
  return j.status == job_status::created && j.reason == detail::queued_reason;
}

void set_positions(engine_state& e, std::vector<train_job>& jobs) {
  if (std::none_of(jobs.begin(), jobs.end(), is_queued)) return;
  std::map<std::string, int> place;
  for (const auto& q : e.queue_view()) place[q.name] = q.position;
  for (auto& j : jobs)
    if (auto it = place.find(j.name); it != place.end() && is_queued(j)) j.queue_position = it->second;
}

}  // namespace

asio::awaitable<train_job> backend::get_job(std::string name) {
  auto& e = *impl_;
  std::vector<train_job> one;
  if (auto j = e.owned(name)) {
    one.push_back(e.snapshot(*j));
  } else {
    auto row = e.load_fresh(name);
    if (!row) e.throw_not_found(name);
    one.push_back(view_of(e, std::move(*row)));
  }
  set_positions(e, one);
  co_return std::move(one.front());
}

asio::awaitable<std::vector<queue_entry>> backend::queue() { co_return impl_->queue_view(); }

asio::awaitable<std::vector<train_job>> backend::list_jobs(std::optional<std::string> runtime) {
  auto& e = *impl_;
  std::vector<train_job> out;
  for (auto& row : e.db->load_jobs()) {
    if (runtime && row.runtime != *runtime) continue;
    if (auto j = e.owned(row.name)) {
      out.push_back(e.snapshot(*j));
      continue;
    }
    if (!is_terminal(row.status) && !e.owner_alive(row) && e.reconcile_row(row))
      if (auto fresh = e.db->load_job(row.name)) row = std::move(*fresh);
    out.push_back(view_of(e, std::move(row)));
  }
  set_positions(e, out);
  co_return out;
}

asio::awaitable<std::unique_ptr<detail::job_watch>> backend::watch_job(std::string name) {
  auto j = impl_->owned(name);
  co_return std::make_unique<local_watch>(impl_, std::move(name), std::move(j));
}

asio::awaitable<std::unique_ptr<detail::change_watch>> backend::watch_all() {
  co_return std::make_unique<local_changes>(impl_);
}

asio::awaitable<void> backend::cancel_job(std::string name, cancel_options options) {
  auto& e = *impl_;
  e.check_running();
  e.check_writable("cancel a job");
  if (auto j = e.owned(name)) {
    if (options.checkpoint) co_await e.warn_owned(j, options.grace);
    co_await e.cancel_owned(j, options.force, options.grace);
    co_return;
  }
  co_await e.cancel_foreign(name, options.force, options.grace, options.checkpoint);
}

asio::awaitable<void> backend::delete_job(std::string name) {
  auto& e = *impl_;
  e.check_running();
  e.check_writable("delete a job");
  // Said first, so that its dependents, here or in another process, see a
  // job deleted before it ended and not the end its cancel gives it.
  if (auto row = e.owned(name) ? std::optional<detail::job_row>() : e.load_fresh(name);
      e.owned(name) || (row && !is_terminal(row->status))) {
    e.transact([&](detail::store& db) {
      db.append_event(name, "", now_ms(), log_event::delete_requested,
                      "delete requested by process " + std::to_string(e.self_pid));
    });
  }
  if (auto j = e.owned(name)) {
    co_await e.cancel_owned(j, false, std::nullopt);
  } else {
    auto row = e.load_fresh(name);
    if (!row) e.throw_not_found(name);
    if (!is_terminal(row->status)) co_await e.cancel_foreign(name, false, std::nullopt);
  }
  // Its directory is moved out of the name's way first: a job of the same
  // name made as soon as the record is gone must not find it there (that is
  // refused as another job's leftover). A dot name is no job's.
  const auto dir = e.jobs_dir / name;
  const auto doomed = e.jobs_dir / ("." + name + ".deleted-" + std::to_string(e.self_pid));
  bool moved = false;
  co_await e.blocking([&] { moved = ::rename(dir.c_str(), doomed.c_str()) == 0; });
  // The job's last writes must land before its rows go. (An ended job is no
  // longer in the job table: its record went with the commit of its end.)
  e.transact([&](detail::store& db) { db.delete_job(name); });
  e.progress.forget(name);
  co_await e.remove_tree(moved ? doomed : dir, name);
}

asio::awaitable<std::vector<event>> backend::get_job_events(std::string name) {
  auto& e = *impl_;
  e.flush();
  if (!e.owned(name) && !e.load_fresh(name)) e.throw_not_found(name);
  std::vector<event> out;
  for (auto& r : e.db->load_events(name)) {
    out.push_back(event{r.seq, from_ms(r.time_ms), r.step, r.reason, r.message});
    if (r.reason == detail::to_string(log_event::progress))
      detail::apply_progress(out.back(), detail::progress_from_json(r.detail));
  }
  co_return out;
}

asio::awaitable<std::vector<venv_cache_entry>> backend::list_venv_cache() {
  auto& e = *impl_;
  std::vector<detail::venv_cache::entry_info> found;
  co_await e.blocking([&] { found = e.venv_store.list(); });
  std::vector<venv_cache_entry> out;
  for (const auto& f : found) out.push_back(to_entry(f));
  co_return out;
}

asio::awaitable<std::vector<venv_cache_entry>> backend::prune_venv_cache(std::chrono::seconds unused_for) {
  auto& e = *impl_;
  e.check_writable("prune the venv cache");
  std::vector<detail::venv_cache::entry_info> removed;
  co_await e.blocking([&] { removed = e.venv_store.prune(unused_for); });
  std::vector<venv_cache_entry> out;
  for (const auto& f : removed) out.push_back(to_entry(f));
  co_return out;
}

namespace {

// Whether SQLite's problem line is an index that disagrees with its table
// (the rows are all in the table; REINDEX rebuilds the index from them).
bool index_problem(const std::string& line) {
  for (const char* what :
       {"missing from index ", "wrong # of entries in index ", "non-unique entry in index "})
    if (line.find(what) != std::string::npos) return true;
  return false;
}

std::string meaning_of(const store_check& c, bool repair) {
  if (c.repaired)
    return "the indexes were damaged (lookups through them missed rows); they were rebuilt from the tables "
           "and the store is now sound: nothing was lost";
  if (c.problems.empty()) return "the store is sound";
  if (c.indexes_only && !repair)
    return "an index of the store disagrees with its table: every row is still in the tables, but lookups "
           "through the index miss some or find them twice, so a job, its steps or its events can be "
           "missing from get, list, events and wait, and the queue can pass a job over. Nothing is lost: "
           "`tjob doctor --repair` rebuilds the indexes from the tables (jobs may go on running)";
  return std::string(repair ? "rebuilding the indexes did not mend it: " : "") +
         "the store's tables are damaged: the rows on the damaged pages cannot be read and may be lost, "
         "and writing to it can spread the damage. Stop every tjob that uses " +
         c.store +
         ", copy it (with its -wal file) aside, and recover what can be read with the sqlite3 "
         "shell's .recover command (https://sqlite.org/recovery.html) or restore it from a backup; the job "
         "directories beside it are not touched";
}

}  // namespace

asio::awaitable<store_check> backend::check_store(bool repair) {
  auto& e = *impl_;
  if (repair) e.check_writable("repair the store");
  store_check out;
  out.store = e.db->path().string();
  detail::store::integrity found;
  co_await e.blocking(
      [&] { found = detail::store::check_file(e.db->path(), repair, e.cfg.store_busy_timeout); });
  out.problems = std::move(found.problems);
  out.repaired = found.repaired;
  out.indexes_only =
      !out.problems.empty() && std::all_of(out.problems.begin(), out.problems.end(), index_problem);
  out.meaning = meaning_of(out, repair);
  // (the names in the store, then the directories: one made between the two is not taken for a stray)
  std::set<std::string> recorded;
  for (const auto& row : e.db->load_jobs()) recorded.insert(row.name);
  co_await e.blocking([&] {
    std::error_code ec;
    for (std::filesystem::directory_iterator it(e.jobs_dir, ec), end; !ec && it != end; it.increment(ec)) {
      auto name = it->path().filename().string();
      if (it->is_directory(ec) && !recorded.count(name)) out.unrecorded_dirs.push_back(it->path().string());
    }
  });
  std::sort(out.unrecorded_dirs.begin(), out.unrecorded_dirs.end());
  co_return out;
}

asio::awaitable<void> backend::shutdown() {
  auto self = impl_;
  auto& e = *impl_;
  if (!e.stopping) {
    e.stopping = true;
    for (auto& [name, j] : e.jobs) {
      j->stop.emit(asio::cancellation_type::terminal);
      j->op_stop.emit(asio::cancellation_type::terminal);
      j->wake_inbox(asio::error::operation_aborted);
      for (auto& st : j->steps) st.stop->emit(asio::cancellation_type::terminal);
      j->watchers.notify_all();
    }
    if (e.admitter_wake) e.admitter_wake->notify();
    e.progress.stop();
    e.watch.close();
    e.log_times.close();
  }
  co_await e.tasks.join();
  e.flush();
  co_await e.remove_busy_cgroups();
  e.pool.join();
  if (e.checkpoint_thread) e.checkpoint_thread->join();
}

asio::awaitable<log_stream> backend::get_job_logs(std::string name, log_options options) {
  auto& e = *impl_;
  std::vector<std::string> steps;
  int attempts = 1;  // the step's attempts so far
  auto j = e.owned(name);
  if (j) {
    for (const auto& s : j->steps) {
      steps.push_back(s.row.name);
      if (s.row.name == options.step) attempts = s.row.attempt;
    }
  } else {
    auto row = e.load_fresh(name);
    if (!row) e.throw_not_found(name);
    for (const auto& s : row->steps) {
      steps.push_back(s.name);
      if (s.name == options.step) attempts = s.attempt;
    }
  }
  if (std::find(steps.begin(), steps.end(), options.step) == steps.end())
    detail::throw_step_not_found(name, options.step, steps);
  auto path = e.step_log(name, options.step);
  // One log holds every attempt, one after another; an attempt is its part.
  std::uint64_t start = 0, limit = std::numeric_limits<std::uint64_t>::max();
  if (options.attempt) {
    if (*options.attempt > attempts)
      detail::throw_attempt_not_found(name, options.step, *options.attempt, attempts);
    auto starts = detail::attempt_starts(e.attempts_path(name, options.step));
    if (auto it = starts.find(*options.attempt); it != starts.end()) start = it->second;
    if (auto it = starts.find(*options.attempt + 1); it != starts.end()) limit = it->second;
  }
  std::uint64_t offset =
      std::max(start, options.tail ? detail::tail_offset(path, *options.tail, limit) : std::uint64_t(0));
  if (options.since) {
    // Lines up to the last record older than `since` are older; the line
    // that record ends inside may not be (each line is checked again).
    mark_times(j, options.step);
    detail::log_times times(detail::times_path_of(path));
    offset = std::max(offset, detail::line_start(path, times.older_than(*options.since)));
  }
  auto p = std::make_unique<local_log>(impl_, name, options, path, offset);
  p->owned = j;
  p->limit = limit;
  co_return log_stream(std::move(p));
}

}  // namespace tjob::local
