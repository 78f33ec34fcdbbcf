#include "adapters/slurm/slurm_impl.hpp"

#include "core/fail.hpp"
#include "core/messages.hpp"
#include "core/names.hpp"
#include "core/secrets.hpp"
#include "core/trainer_checks.hpp"

#include <tjob/spec.hpp>

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

extern char** environ;

namespace tjob::slurm {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using detail::fail;
using detail::quote;
using detail::who;
using steady = std::chrono::steady_clock;

namespace {

// The poll's shortest interval, after a change; it doubles up to the
// configured one while nothing changes.
constexpr std::chrono::milliseconds fastest_poll{200};

bool same_row(const queue_row& a, const queue_row& b) {
  return a.state == b.state && a.reason == b.reason && a.start == b.start && a.end == b.end;
}

bool same_queue(const queue_snapshot& a, const queue_snapshot& b) {
  if (a.by_id.size() != b.by_id.size()) return false;
  for (const auto& [id, row] : a.by_id) {
    auto it = b.by_id.find(id);
    if (it == b.by_id.end() || !same_row(row, it->second)) return false;
  }
  return true;
}

}  // namespace

// --- construction ---------------------------------------------------------------

backend::impl::impl(detail::backend_context c)
    : ctx(std::move(c)),
      cfg(config_of(ctx.cfg.backend_config, [](std::string_view m) { return std::string(m); })),
      tasks(ctx.ex, ctx.log),
      poll_now(ctx.ex) {
  shared = cfg.shared_dir.empty() ? ctx.home / "slurm" : fs::path(cfg.shared_dir);
  if (!cfg.slurm_conf.empty()) command_env.push_back("SLURM_CONF=" + cfg.slurm_conf);
  if (ctx.cfg.clean_job_environment) {
    for (char** e = environ; e && *e; ++e) {
      std::string_view entry(*e);
      auto key = entry.substr(0, entry.find('='));
      if (detail::job_environment_allowed(key) || key == "SLURM_CONF") clean_env.emplace_back(entry);
    }
    for (auto& e : clean_env) clean_envp.push_back(e.data());
    clean_envp.push_back(nullptr);
  }
}

failure backend::impl::not_found(const std::string& name) const {
  return detail::not_found_failure(name, where(), "tjob list --backend slurm");
}

void backend::impl::check_running() const {
  if (stopping) fail(errc::shut_down, "the engine is shutting down");
}

// --- Slurm's commands -------------------------------------------------------------

asio::awaitable<outcome<process::run_result>> backend::impl::command(std::vector<std::string> argv,
                                                                    std::vector<std::string> env, bool clean) {
  const auto program = argv.at(0);
  std::vector<std::string> overlay = command_env;
  overlay.insert(overlay.end(), env.begin(), env.end());
  auto ran = co_await process::run(ctx.ex, std::move(argv), std::move(overlay), cfg.command_timeout, 64u << 20,
                                   clean ? clean_envp.data() : nullptr);
  if (!ran) {
    if (ran.error().code == errc::executable_not_found)
      co_return detail::make_failure(
          errc::executable_not_found,
          program + " is not installed on this machine: the slurm backend runs Slurm's own commands (sbatch, "
                    "squeue, scancel, scontrol); install Slurm's client (Debian: slurm-client) with the "
                    "cluster's slurm.conf, or give it with --slurm-conf");
    co_return ran.error();
  }
  auto err = trimmed(ran->err);
  if (ran->timed_out)
    co_return detail::make_failure(
        errc::timeout,
        program + " did not answer in " + std::to_string(cfg.command_timeout.count() / 1000) +
            " s; is the cluster's slurmctld up? (command_timeout_ms sets the limit)",
        err);
  if (ran->status.code != 0 || ran->status.signal != 0)
    co_return detail::make_failure(errc::backend_error,
                                   program + " failed (" + process::describe(ran->status) + ")" +
                                       (err.empty() ? std::string() : ": " + err),
                                   err);
  co_return std::move(*ran);
}

asio::awaitable<outcome<queue_snapshot>> backend::impl::read_queue() {
  if (auto under_way = reading) {
    boost::system::error_code ec;
    co_await under_way->done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (under_way->result) co_return *under_way->result;
  }
  auto mine = std::make_shared<queue_read>(ctx.ex);
  mine->done.expires_at(steady::time_point::max());
  reading = mine;
  // Whatever ends this read (its answer, an exception, the frame destroyed
  // at shutdown), those waiting on it go on: without a result, to a read of
  // their own.
  struct release {
    impl& self;
    std::shared_ptr<queue_read> r;
    ~release() {
      if (self.reading == r) self.reading.reset();
      r->done.cancel();
    }
  } released{*this, mine};
  auto q = co_await read_queue_now();
  if (q && (!last_queue || last_queue->taken < q->taken)) {
    last_queue = *q;
    last_queue_at = steady::now();
  }
  mine->result = q;
  co_return q;
}

asio::awaitable<outcome<queue_snapshot>> backend::impl::read_queue_now() {
  std::vector<std::string> argv{"squeue", "--me", "--noheader", "--states=all", "--format", queue_format};
  std::vector<std::string> env{"SLURM_TIME_FORMAT=%s"};
  const auto taken = clock::now();
  auto ran = co_await command(std::move(argv), std::move(env));
  if (!ran) co_return ran.error();
  queue_snapshot q;
  q.taken = taken;
  const auto dir = shared.string();
  for (auto& row : parse_queue(ran->out)) {
    auto name = name_in_comment(row.comment, dir);
    if (!name) continue;
    q.ids_by_name.emplace(*name, row.id);
    auto id = row.id;
    q.by_id.emplace(std::move(id), std::move(row));
  }
  co_return q;
}

// --- reading ----------------------------------------------------------------------

namespace {

// A job whose sbatch went through but whose id was not written (tjob ended
// in between): its row names it; only a row submitted after the job was
// made is taken, not an earlier job's of the same name.
void adopt(const fs::path& dir, job_files& f, const queue_snapshot& q) {
  if (!f.slurm_id.empty() || !f.never.empty()) return;
  auto [from, to] = q.ids_by_name.equal_range(f.record.name);
  for (auto it = from; it != to; ++it) {
    const auto& row = q.by_id.at(it->second);
    if (row.submit && *row.submit + std::chrono::seconds(5) < f.record.created) continue;
    f.slurm_id = row.id;
    write_file(dir / "slurm-id", row.id + "\n");
    return;
  }
}

}  // namespace

asio::awaitable<outcome<train_job>> backend::impl::find(const std::string& name, bool polled) {
  auto f = read_files(name);
  if (!f) co_return not_found(name);
  std::optional<queue_snapshot> q;
  // The poll's last read serves a waiter while the poll runs, and any other
  // caller while it is fresh (a thousand gets, one squeue). A job submitted
  // after it was read is folded from its files until the next read.
  const auto age = steady::now() - last_queue_at;
  if (last_queue && (polled ? age < 2 * cfg.poll_interval + std::chrono::seconds(1) : age < std::chrono::seconds(1)))
    q = last_queue;
  // None fresh, or it should list the job and does not: a read of our own
  // (before the job is taken for one that Slurm forgot).
  if (!q || (!row_of_id(*q, f->slurm_id) && knows_of(*q, *f))) {
    auto read = co_await read_queue();
    if (read)
      q = std::move(*read);
    else
      ctx.log->warn("{}: cannot read Slurm's queue: {}", who(name), read.error().message);
  }
  // read again: the job may have changed between its files and the queue
  f = read_files(name);
  if (!f) co_return not_found(name);
  if (q) adopt(dir_of(name), *f, *q);
  auto row = q ? row_of_id(*q, f->slurm_id) : std::nullopt;
  co_return fold(*f, row, q && knows_of(*q, *f));
}

asio::awaitable<train_job> backend::impl::get(const std::string& name) {
  auto j = co_await find(name);
  co_return std::move(j).value();
}

asio::awaitable<std::vector<train_job>> backend::impl::list(std::optional<std::string> runtime) {
  auto q = co_await read_queue();
  if (!q) detail::raise(detail::prefixed(q.error(), "cannot list the jobs " + where() + ": "));
  std::vector<train_job> out;
  for (const auto& name : job_names()) {
    auto f = read_files(name);
    if (!f || (runtime && f->record.runtime != *runtime)) continue;
    adopt(dir_of(name), *f, *q);
    out.push_back(fold(*f, row_of_id(*q, f->slurm_id), knows_of(*q, *f)));
  }
  std::stable_sort(out.begin(), out.end(), [](const train_job& a, const train_job& b) {
    return a.creation_timestamp != b.creation_timestamp ? a.creation_timestamp < b.creation_timestamp
                                                        : a.name < b.name;
  });
  co_return out;
}

asio::awaitable<std::vector<event>> backend::impl::events(const std::string& name) {
  if (!read_files(name)) detail::raise(not_found(name));
  auto q = co_await read_queue();
  auto f = read_files(name, true);
  if (!f) detail::raise(not_found(name));
  std::optional<queue_row> row;
  if (q) row = row_of_id(*q, f->slurm_id);
  co_return events_of(*f, row, q && knows_of(*q, *f));
}

// --- waiting ----------------------------------------------------------------------

backend::impl::watcher::watcher(std::shared_ptr<impl> bk) : b(std::move(bk)) {
  ++b->watchers;
  if (!b->polling) {
    b->polling = true;
    b->tasks.spawn(b->poll_loop(), "reading Slurm's queue");
  } else {
    b->poll_now.notify();
  }
}

backend::impl::watcher::~watcher() { --b->watchers; }

asio::awaitable<void> backend::impl::poll_loop() {
  auto self = shared_from_this();
  auto interval = std::min<std::chrono::milliseconds>(fastest_poll, cfg.poll_interval);
  std::optional<queue_snapshot> before;  // the poll's own previous read: what changed since
  while (!stopping && watchers > 0) {
    auto q = co_await read_queue();
    bool changed = false;
    if (q) {  // (read_queue made it last_queue, unless a newer read had come first)
      changed = !before || !same_queue(*before, *q);
      before = std::move(*q);
      queue_trouble.clear();
    } else {
      if (queue_trouble.empty()) ctx.log->warn("cannot read Slurm's queue: {}", q.error().message);
      queue_trouble = q.error().message;
      last_queue.reset();
    }
    waiters.notify_all();  // the nodes' files may have changed too
    interval = changed ? std::min<std::chrono::milliseconds>(fastest_poll, cfg.poll_interval)
                       : std::min<std::chrono::milliseconds>(interval * 2, cfg.poll_interval);
    if (co_await poll_now.wait_until(steady::now() + interval))
      interval = std::min<std::chrono::milliseconds>(fastest_poll, cfg.poll_interval);
  }
  polling = false;
}

asio::awaitable<bool> backend::impl::wait_until(const std::string& name, steady::time_point deadline,
                                                const std::function<bool(const std::optional<train_job>&)>& done) {
  watcher w(shared_from_this());
  detail::wake_signal sig(ctx.ex);
  detail::wake_registration reg(waiters, &sig);
  for (;;) {
    check_running();
    auto j = co_await find(name, true);
    if (j && done(*j)) co_return true;
    if (!j && j.error().code == errc::job_not_found && done(std::nullopt)) co_return true;
    if (!co_await sig.wait_until(deadline) && steady::now() >= deadline) co_return false;
  }
}

namespace {

// A waiter's view of one job: each read of the shared poll wakes it, and it
// returns once the job reads differently.
class slurm_watch final : public detail::job_watch {
 public:
  slurm_watch(std::shared_ptr<backend::impl> b, std::string name)
      : b_(b), name_(std::move(name)), w_(b), sig_(b->ctx.ex), reg_(b->waiters, &sig_) {}

  asio::awaitable<std::optional<train_job>> current() override {
    auto j = co_await b_->find(name_, true);
    if (!j && j.error().code == errc::job_not_found) {
      if (!read_) detail::raise(j.error());
      fail(errc::job_not_found,
           "TrainJob " + quote(name_) + " was deleted " + b_->where() + " while it was waited for");
    }
    read_ = true;
    if (!j) co_return std::nullopt;
    last_ = *j;
    co_return std::move(*j);
  }

  asio::awaitable<bool> changed(steady::time_point deadline) override {
    for (;;) {
      b_->check_running();
      if (!co_await sig_.wait_until(deadline) && steady::now() >= deadline) co_return false;
      auto j = co_await b_->find(name_, true);
      if (!j || !same_state(*j, last_)) co_return true;
    }
  }

  std::string trouble() const override {
    return b_->queue_trouble.empty() ? std::string() : " (reading Slurm's queue fails: " + b_->queue_trouble + ")";
  }

 private:
  std::shared_ptr<backend::impl> b_;
  std::string name_;
  backend::impl::watcher w_;
  detail::wake_signal sig_;
  detail::wake_registration reg_;
  train_job last_;
  bool read_ = false;
};

class slurm_changes final : public detail::change_watch {
 public:
  explicit slurm_changes(std::shared_ptr<backend::impl> b)
      : b_(b), w_(b), sig_(b->ctx.ex), reg_(b->waiters, &sig_) {}

  asio::awaitable<bool> changed(steady::time_point deadline) override {
    b_->check_running();
    co_return co_await sig_.wait_until(deadline);
  }

 private:
  std::shared_ptr<backend::impl> b_;
  backend::impl::watcher w_;
  detail::wake_signal sig_;
  detail::wake_registration reg_;
};

bool ended_or_gone(const std::optional<train_job>& j) { return !j || is_terminal(j->status); }

}  // namespace

// --- cancel, delete -----------------------------------------------------------------

// A cancel with checkpoint: the job's warning signal to every process of its
// steps (not the batch script, as sbatch --signal without B:), then up to the
// warning's lead time for it to save and end by itself (the cancel mark is
// written: its end is a cancel's, and the batch script restarts nothing).
// True when it ended.
asio::awaitable<bool> backend::impl::warn_before_cancel(const std::string& name, const job_files& f) {
  if (!f.record.warning) detail::throw_no_warning(name);
  const auto& w = *f.record.warning;
  std::vector<std::string> argv{"scancel", "--signal=" + signal_name(w.signal), f.slurm_id};
  auto sent = co_await command(std::move(argv));
  if (!sent)
    detail::raise(
        detail::prefixed(sent.error(), who(name) + ": cannot signal Slurm job " + f.slurm_id + ": "));
  ctx.log->info("{}: SIG{} sent by a cancel with checkpoint; scancel follows in {} s unless it ends first",
                who(name), signal_name(w.signal), w.before.count());
  const auto until = steady::now() + std::chrono::duration_cast<steady::duration>(w.before);
  const bool ended = co_await wait_until(name, until, ended_or_gone);
  co_return ended;
}

asio::awaitable<void> backend::impl::cancel(const std::string& name, bool force, bool checkpoint) {
  check_running();
  auto job = co_await get(name);
  if (is_terminal(job.status)) co_return;
  auto f = read_files(name);
  if (!f) detail::raise(not_found(name));
  if (!f->cancel_requested && !write_file(dir_of(name) / "cancel", "\n"))
    fail(errc::backend_error, who(name) + ": cannot write " + (dir_of(name) / "cancel").string() + ": " +
                                  std::strerror(errno));
  if (f->slurm_id.empty()) co_return;  // not submitted: the marker ends it as it is submitted
  if (checkpoint && job.status == job_status::running) {
    const bool ended = co_await warn_before_cancel(name, *f);
    if (ended) co_return;
  }
  std::vector<std::string> argv{"scancel"};
  // A running job's processes get SIGTERM, the batch script's too (--full);
  // a pending one is taken out of the queue.
  if (!force && job.status == job_status::running) argv.insert(argv.end(), {"--signal=TERM", "--full"});
  argv.push_back(f->slurm_id);
  auto sent = co_await command(std::move(argv));
  if (!sent) detail::raise(detail::prefixed(sent.error(), who(name) + ": cannot cancel Slurm job " + f->slurm_id + ": "));
  poll_now.notify();
  auto grace = std::chrono::duration_cast<steady::duration>(ctx.cfg.grace_period);
  if (co_await wait_until(name, steady::now() + grace, ended_or_gone)) co_return;
  std::vector<std::string> kill{"scancel", f->slurm_id};
  auto killed = co_await command(std::move(kill));
  if (!killed) detail::raise(detail::prefixed(killed.error(), who(name) + ": cannot cancel Slurm job " + f->slurm_id + ": "));
  poll_now.notify();
  if (co_await wait_until(name, steady::now() + std::chrono::seconds(60), ended_or_gone)) co_return;
  fail(errc::timeout, who(name) + " (Slurm job " + f->slurm_id +
                          ") was cancelled with scancel, and Slurm still shows it running after 60 s; see "
                          "`squeue -j " + f->slurm_id + "` and slurmctld's log");
}

asio::awaitable<void> backend::impl::remove(const std::string& name) {
  check_running();
  auto job = co_await get(name);
  if (!is_terminal(job.status)) co_await cancel(name, true, false);
  std::error_code ec;
  fs::remove_all(dir_of(name), ec);
  if (ec) fail(errc::backend_error, who(name) + ": cannot remove " + dir_of(name).string() + ": " + ec.message());
  waiters.notify_all();
}

// --- the backend ----------------------------------------------------------------------

backend::backend(detail::backend_context ctx) : detail::backend(ctx), impl_(std::make_shared<impl>(std::move(ctx))) {}

backend::~backend() {
  if (impl_) impl_->stopping = true;
}

namespace {

backend_capabilities capabilities_of() {
  backend_capabilities c;
  c.id = "slurm";
  c.queued_by = "Slurm cluster, whose queue squeue shows";
  c.keeps_labels = true;
  c.arrays = true;
  c.takes_code_dir = true;
  c.stop_warning = true;  // sbatch --signal
  c.begin_time = true;    // sbatch --begin
  c.restarts = true;  // every node again, in the job's allocation (docs/slurm.md)
  return c;
}

}  // namespace

backend_capabilities backend::capabilities() const { return capabilities_of(); }

detail::backend_registration registration() {
  using kind = backend_option::value_kind;
  detail::backend_registration r;
  r.description.id = "slurm";
  r.description.summary = "slurm";
  r.description.capabilities = capabilities_of();
  r.description.options = {
      {"slurm_conf", "--slurm-conf",
       "Slurm backend: the slurm.conf of Slurm's commands; default: Slurm's own lookup ($SLURM_CONF, else "
       "/etc/slurm/slurm.conf)",
       kind::path},
      {"partition", "--partition", "Slurm backend: the partition; default: the cluster's", kind::text},
      {"account", "--account", "Slurm backend: the account charged; default: yours", kind::text},
      {"qos", "--qos", "Slurm backend: the quality of service; default: the association's", kind::text},
      {"sbatch_options", "--sbatch-option", "Slurm backend: one more sbatch option, as --name=value (repeat it)",
       kind::texts},
      {"shared_dir", "--shared-dir",
       "Slurm backend: the jobs' files and logs, on a file system every node mounts at the same path; default: "
       "$TJOB_HOME/slurm",
       kind::path},
      {"pack_nodes", "--pack-nodes",
       "Slurm backend: a job's nodes are tasks on as few machines as Slurm gives, not one machine each",
       kind::flag},
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
  co_return co_await impl_->list(std::move(runtime));
}
asio::awaitable<log_stream> backend::get_job_logs(std::string name, log_options options) {
  co_return co_await impl_->logs(name, options);
}
asio::awaitable<std::unique_ptr<detail::job_watch>> backend::watch_job(std::string name) {
  co_return std::make_unique<slurm_watch>(impl_, std::move(name));
}
asio::awaitable<std::unique_ptr<detail::change_watch>> backend::watch_all() {
  co_return std::make_unique<slurm_changes>(impl_);
}
asio::awaitable<void> backend::cancel_job(std::string name, cancel_options options) {
  co_await impl_->cancel(name, options.force, options.checkpoint);
}
asio::awaitable<void> backend::delete_job(std::string name) { co_await impl_->remove(name); }
asio::awaitable<std::vector<event>> backend::get_job_events(std::string name) {
  co_return co_await impl_->events(name);
}
asio::awaitable<void> backend::shutdown() {
  impl_->stopping = true;
  impl_->poll_now.notify();
  impl_->waiters.notify_all();
  co_await impl_->tasks.join();
}

}  // namespace tjob::slurm
