#include "adapters/local/local_impl.hpp"

#include "adapters/python/python_plan.hpp"
#include "adapters/python/python_setup.hpp"
#include "core/secrets.hpp"
#include "core/retry.hpp"
#include "core/spec_json.hpp"
#include "core/trainer_checks.hpp"

#include <tjob/spec.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <boost/json.hpp>

#include <fcntl.h>
#include <unistd.h>

namespace tjob::local {

namespace json = boost::json;

namespace {

std::string spec_json(const command_trainer& t, const std::string& executable) {
  json::object spec;
  spec["trainer"] = detail::to_json(t);
  spec["executable"] = executable;
  return json::serialize(spec);
}

std::string check_working_dir(const std::string& who, const std::string& dir) {
  if (dir.empty()) return dir;
  std::error_code fec;
  auto wd = std::filesystem::absolute(dir, fec);
  if (fec || !std::filesystem::is_directory(wd, fec))
    fail(errc::invalid_argument, who + ": working_dir (--workdir) " + quote(dir) +
                                     " is not a directory; create it, or give a directory that exists");
  return wd.string();
}

std::string path_of(const std::map<std::string, std::string>& env) {
  if (auto it = env.find("PATH"); it != env.end()) return it->second;
  if (const char* p = std::getenv("PATH")) return p;
  return {};
}

std::string find_program(const std::string& who, const std::string& prog,
                         const std::map<std::string, std::string>& env, const std::string& cwd,
                         const char* hint) {
  auto path = path_of(env);
  auto exe = process::find_executable(prog, path, cwd.empty() ? "." : cwd);
  if (!exe) {
    if (prog.find('/') != std::string::npos)
      fail(errc::executable_not_found,
           who + ": " + quote(prog) +
               " is not an executable file; check the path (relative paths start from the "
               "working dir) and its execute permission");
    fail(errc::executable_not_found, who + ": cannot find executable " + quote(prog) + " on PATH (" +
                                         printable(path, 300) + "); " + hint);
  }
  std::error_code ec;
  return std::filesystem::absolute(*exe, ec).string();
}

}  // namespace

// The phases of a command job: the command itself.
void engine_state::plan_command(job_rec& j, const std::string& who, command_trainer& ct) {
  detail::check_command(who, ct);
  ct.working_dir = check_working_dir(who, ct.working_dir);
  j.make->code_snapshot = ct.code_dir;  // (its cwd then is the work dir, where the copy goes)
  phase ph;
  ph.name = "command";
  ph.final = true;
  // A program of the directory sent with the job is found in its snapshot,
  // and run from the job's copy of it.
  const auto& look_in = ct.code_dir.empty() ? ct.working_dir : ct.code_dir;
  ph.executable = find_program(who, ct.command.front(), ct.env, look_in, "give its full path or fix PATH");
  if (!ct.code_dir.empty() && ph.executable.starts_with(ct.code_dir + "/"))
    ph.executable = j.dir + "/work" + ph.executable.substr(ct.code_dir.size());
  ph.argv = ct.command;
  ph.env = ct.env;
  ph.cwd = ct.working_dir;
  // memory= is the node's limit as well as its reservation, as for a Python
  // job and in a container (issue 42: it was accepted and not enforced).
  ph.memory_limit = ct.memory;
  j.make->spec = spec_json(ct, ph.executable);
  j.node_phases.push_back(std::move(ph));
}

// The venv and pip phases of a Python job (pip only when there is something
// to install), as Kubeflow's local backend runs them, done right.
void engine_state::plan_setup(job_rec& j, const python_trainer& pt, const std::string& python,
                              const std::vector<std::string>& packages,
                              const std::map<std::string, std::string>& env, const std::string& cwd) {
  phase venv;
  venv.name = "venv";
  venv.title = "creating a virtual environment with " + python +
               (pt.system_site_packages ? " (with system site packages)" : "");
  venv.executable = python;
  venv.argv = {python, "-m", "venv", "--without-pip"};
  if (pt.system_site_packages) venv.argv.push_back("--system-site-packages");
  venv.argv.push_back(j.venv.string());
  venv.env = env;
  venv.cwd = cwd;
  j.phases.push_back(venv);
  if (packages.empty()) return;
  const auto venv_python = (j.venv / "bin" / "python").string();
  phase pip;
  pip.name = "pip install";
  pip.title = "installing " + std::to_string(packages.size()) + " package(s): " + join_argv(packages);
  pip.executable = venv_python;
  pip.argv = {venv_python, "-c", std::string(python::pip_bootstrap_code())};
  for (auto& a : python::pip_install_args(packages)) pip.argv.push_back(std::move(a));
  pip.env = env;
  for (auto& [k, v] : python::pip_index_environment(python::index_urls(pt.pip_index_urls))) pip.env[k] = v;
  pip.env.emplace("TJOB_PIP_CACHE", (home / "cache" / "pip").string());
  pip.cwd = cwd;
  j.phases.push_back(pip);
}

// The GPUs a job asks for, checked against this engine's list.
void engine_state::plan_gpus(job_rec& j, const std::string& who, const python_trainer& pt, int num_nodes) {
  python::check_gpus(who, pt);
  if (pt.gpus == 0) return;
  auto need = static_cast<std::size_t>(pt.gpus) * static_cast<std::size_t>(num_nodes);
  if (need > gpu_devices.size())
    fail(errc::invalid_argument,
         who + ": needs " + std::to_string(need) + " GPU(s) (gpu=" + std::to_string(pt.gpus) +
             " per node x " + std::to_string(num_nodes) + " node(s)) but this engine has " +
             std::to_string(gpu_devices.size()) +
             "; set the device list (engine_config.gpu_devices or TJOB_GPU_DEVICES) or ask for fewer");
  j.gpus_per_node = pt.gpus;
}

// Each node's phase: python, or torchrun with the nodes meeting on
// 127.0.0.1 at a port chosen free when the job starts.
void engine_state::plan_nodes(job_rec& j, const python_trainer& pt, const runtime& rt,
                              const std::map<std::string, std::string>& env, const std::string& cwd,
                              const std::string& file, int num_nodes) {
  const bool torch = rt.trainer.framework == "torch";
  phase code;
  code.name = torch ? "torchrun" : "python";
  code.final = true;
  code.memory_limit = pt.memory_limit;
  code.cpu_limit = pt.cpu_limit ? pt.procs_per_node : 0;
  code.executable = (j.venv / "bin" / "python").string();
  code.env = env;
  code.cwd = cwd;
  for (int node = 0; node < num_nodes; ++node) {
    python::torch_topology t;
    t.nnodes = std::to_string(num_nodes);
    t.node_rank = std::to_string(node);
    t.nproc_per_node = std::to_string(pt.procs_per_node);
    t.master_port = master_port_placeholder;
    phase ph = code;
    ph.argv = python::code_argv(code.executable, torch, t, file, pt.args);
    ph.torch_port = torch;
    j.torch_port |= torch;
    j.node_phases.push_back(std::move(ph));
  }
}

// The venv cache's key for the job's venv, and how old an entry it takes.
void engine_state::plan_venv_cache(job_rec& j, const python_trainer& pt, const std::string& python,
                                   const std::vector<std::string>& packages) {
  detail::venv_cache::inputs in;
  in.python = python;  // the real interpreter is found when the job starts
  in.packages = packages;
  if (!packages.empty()) in.index_urls = python::index_urls(pt.pip_index_urls);
  in.system_site_packages = pt.system_site_packages;
  // An entry older than the job (refresh) or than the expiry of its
  // unpinned requirements is rebuilt rather than copied.
  auto loose = detail::venv_cache::unpinned(in);
  j.venv_entry = std::make_unique<job_rec::cache_entry>();
  if (pt.refresh_venv) {
    j.venv_entry->not_before_ms = now_ms();
    j.venv_entry->stale_why = "before this job asked for a refresh";
  } else if (!loose.empty() && cfg.venv_cache_unpinned_ttl.count() > 0) {
    j.venv_entry->not_before_ms =
        now_ms() - std::chrono::duration_cast<std::chrono::milliseconds>(cfg.venv_cache_unpinned_ttl).count();
    j.venv_entry->stale_why = fmt::format("and {} not pinned to a version ({}) expire after {} s",
                                          loose.size() == 1 ? "its requirement" : "its requirements",
                                          fmt::join(loose, ", "), cfg.venv_cache_unpinned_ttl.count());
  }
  j.venv_inputs = std::make_unique<detail::venv_cache::inputs>(std::move(in));
}

// The phases of a Python job: venv, pip, then each node's code (python, or
// torchrun with the nodes meeting on 127.0.0.1 at a port chosen free when
// the job starts). A function or script text is written into the work dir;
// a script file runs where it is.
void engine_state::plan_python(job_rec& j, const std::string& who, python_trainer& pt, const runtime& rt,
                               int num_nodes) {
  std::string source = python::check_python_code(who, pt);
  pt.working_dir = check_working_dir(who, pt.working_dir);
  // A script of the directory sent with the job runs as the job's copy of it
  // (its text is read: what the job runs is that copy's, made at its start).
  if (!pt.code_dir.empty() && pt.source_file.starts_with(pt.code_dir + "/"))
    pt.source_file = j.dir + "/work/" + pt.source_file.substr(pt.code_dir.size() + 1);
  std::vector<std::string> packages;
  try {
    packages = python::merge_packages(rt.trainer.packages, pt.packages_to_install);
  } catch (const error& e) {
    fail(errc::invalid_argument, who + ": " + e.what());
  }
  auto python = find_program(who, pt.python.empty() ? "python3" : pt.python, pt.env, {},
                             "install python3 or pass the interpreter (--python)");
  j.venv = std::filesystem::path(j.dir) / "venv";
  j.remove_venv = cfg.cleanup_venv && !pt.keep_venv;
  auto work = std::filesystem::path(j.dir) / "work";
  auto cwd = pt.working_dir.empty() ? work.string() : pt.working_dir;
  std::map<std::string, std::string> env = pt.env;
  j.make->code_snapshot = pt.code_dir;
  if (!pt.code_dir.empty()) {
    // The directory sent with the job is its work dir, and importable.
    const char* outer = std::getenv("PYTHONPATH");
    auto inherited = env.count("PYTHONPATH") ? env["PYTHONPATH"] : std::string(outer ? outer : "");
    env["PYTHONPATH"] = work.string() + (inherited.empty() ? "" : ":" + inherited);
  }
  env.emplace("PIP_DISABLE_PIP_VERSION_CHECK", "1");
  env.emplace("PYTHONUNBUFFERED", "1");  // progress reaches the log as it is printed
  std::string file = pt.source_file;
  // The code first, then its keyword arguments, in the work dir.
  const std::string stem = "train_" + j.row.name;
  for (auto& [name, text] : python::training_files(pt, source, stem))
    j.make->files.emplace_back((work / name).string(), std::move(text));
  if (!j.make->files.empty()) file = j.make->files.front().first;
  // The code the job runs: the user's file, or the text written for it.
  std::string code_file = python::code_file_of(pt, stem);
  if (std::filesystem::path(code_file).is_relative()) code_file = (work / code_file).string();
  // A syntax error is found before a venv is built for nothing: the first
  // setup phase compiles the code (no import, nothing of it runs). A job
  // whose venv comes from the cache skips it with the other setup phases.
  phase check;
  check.name = "check";
  check.title = "checking the syntax of " + code_file;
  check.executable = python;
  check.argv = {python, "-c", "import sys; compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec')",
                code_file};
  check.env = env;
  check.cwd = cwd;
  j.phases.push_back(std::move(check));
  plan_setup(j, pt, python, packages, env, cwd);
  plan_gpus(j, who, pt, num_nodes);
  plan_nodes(j, pt, rt, env, cwd, file, num_nodes);
  if (cfg.venv_cache) plan_venv_cache(j, pt, python, packages);
  j.make->spec = json::serialize(json::object{{"trainer", detail::to_json(pt)}, {"python", python}});
}

// The phases of the job `name` of `req` (its paths hold the name).
void engine_state::plan_job(job_rec& j, const std::string& name, train_request& req, const runtime& rt) {
  j.phases.clear();
  j.node_phases.clear();
  j.make = std::make_unique<job_rec::making>();
  j.dir = (jobs_dir / name).string();
  j.row.name = name;
  auto who = detail::who(name);
  if (auto* ct = std::get_if<command_trainer>(&req.job_trainer))
    plan_command(j, who, *ct);
  else
    plan_python(j, who, std::get<python_trainer>(req.job_trainer), rt, req.num_nodes);
  const auto need = detail::need_of(req);
  // An admitter that runs reads config.yaml's changes each second; with none
  // running, this submit looks (one stat).
  if (!admitter_wake) refresh_budget();
  detail::check_fits(who, need, budget, home);
  j.admission = std::make_unique<detail::queue_row>();
  j.admission->priority = req.priority;
  j.admission->need = need;
  j.admission->group = req.array;
  j.admission->group_limit = req.array_limit;
  j.deadline = req.active_deadline;
  j.warning.reset();
  if (req.warning) {
    j.warning = std::make_unique<job_rec::warning_rec>(job_rec::warning_rec{*req.warning, nullptr});
    // its code's processes handle it (python::line_hook_module); a command learns its name
    for (auto& ph : j.node_phases)
      ph.env.insert_or_assign("TJOB_STOP_SIGNAL", signal_name(req.warning->signal));
  }
  j.retry.reset();
  if (req.retry.max_restarts > 0) j.retry = std::make_unique<retry_policy>(req.retry);
  auto waits = std::make_unique<job_rec::wait_rec>();
  for (const auto& [list, kind] : {std::pair{&req.after_ok, "after_ok"},
                                   {&req.after_any, "after_any"},
                                   {&req.after_not_ok, "after_not_ok"}})
    for (const auto& d : *list) {
      if (d == name)
        fail(errc::invalid_argument,
             who + ": " + kind + " names the job itself; a job cannot wait for its own end");
      if (!owned(d) && !db->load_job(d))
        fail(errc::invalid_argument, who + ": " + kind + " " + quote(d) + ": no such job in " +
                                         home.string() +
                                         "; name a job that exists (tjob list), submitted before this one");
      waits->deps.push_back({d, kind});
    }
  if (req.begin && *req.begin > clock::now())  // (one already past: at once)
    waits->begin_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(req.begin->time_since_epoch()).count();
  j.waits.reset();
  if (!waits->deps.empty() || waits->begin_ms > 0) j.waits = std::move(waits);
}

namespace {

// The request's JSON with the job's grace period (what a cancel from another
// process uses when it is given none: grace_of) and its warning (what a
// cancel with checkpoint from another process sends: warning_of).
std::string with_grace(std::string spec, std::chrono::milliseconds grace,
                       const std::optional<stop_warning>& w) {
  if (spec.size() < 2 || spec.back() != '}') return spec;
  spec.pop_back();
  spec += (spec.size() > 1 ? ",\"grace_ms\":" : "\"grace_ms\":") + std::to_string(grace.count());
  if (w) spec += ",\"warning\":" + json::serialize(detail::to_json(*w));
  return spec + "}";
}

}  // namespace

// Records the job, Created, in the store. A generated name that is taken is
// replaced (and the job planned again: its paths hold the name); a given one
// is an error.
asio::awaitable<void> engine_state::record_job(std::shared_ptr<job_rec> j, detail::checked_request& c) {
  auto& req = c.request;
  std::string name = req.name;
  for (;;) {
    std::string spec = with_grace(j->make->spec, cfg.grace_period, req.warning);
    j->row = {};
    j->row.name = name;
    j->row.runtime = req.runtime;  // empty for a command job given no runtime
    j->row.num_nodes = req.num_nodes;
    j->row.created_ms = now_ms();
    j->row.spec = spec;
    j->row.status = job_status::created;
    j->row.owner_pid = self_pid;
    j->row.owner_start = self_start;
    j->row.array = req.array;
    for (int node = 0; node < req.num_nodes; ++node) {
      detail::step_row st;
      st.name = "node-" + std::to_string(node);
      j->row.steps.push_back(st);
    }
    std::string created =
        "created by process " + std::to_string(self_pid) + ": " + join_argv(detail::masked_args(j->node_phases[0].argv));
    if (j->retry) created += " (restarts: " + detail::describe_retry(*j->retry) + ")";
    detail::job_row row = j->row;
    std::string deps;
    if (const auto* w = j->waits.get()) {
      for (const auto& d : w->deps) deps += (deps.empty() ? "" : ", ") + std::string(d.kind) + " " + d.job;
      if (w->begin_ms > 0)
        deps += (deps.empty() ? "its begin time " : ", and its begin time ") +
                format_time(clock::time_point(std::chrono::milliseconds(w->begin_ms)));
    }
    bool inserted =
        co_await insert_job(std::move(row), std::move(created), j->admission.get(), &j->queue_note, deps);
    if (inserted) {
      j->queued = !j->queue_note.empty();
      j->queued_ms = j->row.created_ms;
      if (j->queued) j->row.reason = detail::queued_reason;
      if (j->waits_to_queue()) j->row.reason = detail::waiting_reason;
      if (!j->waits_to_queue()) j->admission.reset();  // else it joins the queue later
      // The request is in the store now; a running job does not keep a copy.
      std::string().swap(j->make->spec);  // (in the store now)
      std::string().swap(j->row.spec);
      req.name = name;
      co_return;
    }
    if (!c.generated_name)
      fail(errc::duplicate_name, "TrainJob " + quote(name) +
                                     " already exists; choose another name, or delete it first "
                                     "(tjob delete " +
                                     name + ")");
    name = detail::generate_job_name();
    plan_job(*j, name, req, c.rt);
  }
}

// The job's directories, its files and its (empty) logs, made on the pool:
// on a disk filesystem each new inode costs tens of microseconds, which the
// reactor spends on other jobs. The job's own work dir is made only when
// something runs or is written in it (a command given a working dir needs
// none: a directory less per job).
namespace {

// The job's directory and what goes in it before it starts (on the pool);
// false when the directory was there already, left by a job whose record
// is gone.
bool make_job_tree(const job_rec& j, const std::string& work, bool needs_work) {
  if (::mkdir(j.dir.c_str(), 0700) != 0) {
    if (errno == EEXIST) {
      return false;
    }
    make_private_dirs(j.dir);  // (its parents are gone)
  }
  if (needs_work) make_private_dirs(work);
  if (j.checkpoints() && ::mkdir((j.dir + "/checkpoints").c_str(), 0700) != 0 && errno != EEXIST)
    throw std::system_error(errno, std::generic_category(), "cannot create " + j.dir + "/checkpoints");
  if (!j.make->code_snapshot.empty()) {
    std::error_code ec;
    std::filesystem::copy(
        j.make->code_snapshot, work,
        std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks, ec);
    if (ec)
      throw std::system_error(ec.value(), std::generic_category(),
                              "cannot copy its working_dir into " + work);
  }
  for (const auto& [path, text] : j.make->files) {
    if (auto ec = detail::append_file(path, text))
      throw std::system_error(ec.value(), std::generic_category(), "cannot write " + path);
  }
  if (!j.make->progress_token.empty()) {
    const auto path = j.dir + "/progress-token";
    if (auto ec = detail::append_file(path, j.make->progress_token))
      throw std::system_error(ec.value(), std::generic_category(), "cannot write " + path);
  }
  for (const auto& s : j.steps) {
    int fd = ::open(s.log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot create " + s.log_path);
    ::close(fd);
  }
  return true;
}

}  // namespace

// What make_job_tree made, undone after a failure.
void engine_state::remove_job_tree(const job_rec& j, const std::string& work) const {
  // Undone by name, file by file: unlink and rmdir need no descriptor, so
  // this works when the failure was running out of them (EMFILE), where a
  // tree walk cannot (issue 43: refused jobs left their directories).
  std::vector<std::string> made;
  for (const auto& [path, text] : j.make->files) made.push_back(path);
  made.push_back(j.dir + "/progress-token");
  for (const auto& s : j.steps) made.push_back(s.log_path);
  for (const auto& path : made) ::unlink(path.c_str());
  ::rmdir((j.dir + "/checkpoints").c_str());
  if (::rmdir(work.c_str()) != 0 && !j.make->code_snapshot.empty()) {
    std::error_code rec;
    std::filesystem::remove_all(work, rec);  // the copy of its working_dir
  }
  if (::rmdir(j.dir.c_str()) != 0 && errno != ENOENT) {
    std::error_code rec;
    std::filesystem::remove_all(j.dir, rec);
    if (rec)
      log->warn("job {}: cannot remove {} after its failed start: {}", j.row.name, j.dir, rec.message());
  }
}

asio::awaitable<void> engine_state::make_job_files(std::shared_ptr<job_rec> j) {
  const std::string work = j->dir + "/work";
  bool needs_work = !j->make->files.empty() || !j->make->code_snapshot.empty();
  for (auto* list : {&j->phases, &j->node_phases})
    for (auto& ph : *list) {
      if (ph.cwd.empty()) ph.cwd = work;
      needs_work |= ph.cwd == work;
    }
  for (auto& s : j->row.steps) {
    step_rec sr;
    sr.row = s;
    sr.log_path = j->dir + "/" + s.name + ".log";  // (step_log, without looking for an old layout)
    j->steps.push_back(std::move(sr));
  }
  std::optional<std::system_error> made_not;
  bool left_behind = false;  // the directory was there already: another job's, whose record is gone
  try {
    co_await blocking([&] { left_behind = !make_job_tree(*j, work, needs_work); });
  } catch (const std::system_error& x) {
    made_not = x;
  }
  if (left_behind) {
    const auto name = j->row.name;
    transact([&](detail::store& db) { db.delete_job(name); });
    fail(errc::duplicate_name,
         "TrainJob " + quote(name) + ": its directory " + j->dir +
             " already exists and belongs to no job in the store (a job whose record was lost, or whose "
             "removal failed, left it); nothing in it was changed. Move it aside or remove it, or choose "
             "another name");
  }
  if (made_not) {
    const auto name = j->row.name;
    transact([&](detail::store& db) { db.delete_job(name); });
    remove_job_tree(*j, work);
    fail(errc::store_unavailable, "TrainJob " + quote(name) + ": " + made_not->what() + "; " +
                                      detail::fix_for_errno(made_not->code().value(), jobs_dir.string()));
  }
  // Made: what it was made from is not kept while the job runs.
  j->make.reset();
}

// The progress endpoint (made with the home's TLS files at the first job)
// gets the job: its token goes into a file of the job's (0600), and the
// variables Kubeflow's client reads into its code's environment.
asio::awaitable<void> engine_state::open_progress(std::shared_ptr<job_rec> j) {
  if (!progress.started() && progress_off.empty()) {
    try {
      progress::tls_files files;
      std::filesystem::path helper;
      co_await blocking([&] {
        files = progress::home_tls(home / "progress");
        helper = progress::python_helper(home / "progress");
      });
      progress.start(files);
      progress_ca = files.ca_cert.string();
      progress_pythonpath = helper.string();
    } catch (const std::exception& e) {
      progress_off = e.what();
      log->warn("jobs of this engine cannot report progress: {}", progress_off);
    }
  }
  if (!progress.started()) co_return;
  j->make->progress_token =
      progress::new_token();  // (written by make_job_files; not in `files`, which make work/)
  const std::string& token = j->make->progress_token;
  progress.add(j->row.name, token,
               [w = weak_from_this()](std::string name, detail::progress_report r,
                                      bool record) -> asio::awaitable<std::string> {
                 auto self = w.lock();
                 co_return self ? self->take_progress(name, r, record)
                                : std::string("the engine has stopped");
               });
  j->reports_progress = true;  // (its variables are made at each spawn: progress.url)
}

std::string engine_state::take_progress(const std::string& name, const detail::progress_report& r,
                                        bool record) {
  auto j = owned(name);
  if (!j || is_terminal(j->row.status)) return "the job has ended";
  check_writable("record the job's progress");
  const auto t = now_ms();
  j->row.progress = detail::progress_json(r);
  j->row.progress_ms = t;
  queue_write(
      [name, t, data = j->row.progress, message = record ? detail::progress_message(r) : std::string(),
       record](detail::store& db) { db.record_progress(name, t, data, message, record); },
      [weak = std::weak_ptr<job_rec>(j)] {
        if (auto jr = weak.lock()) jr->watchers.notify_all();
      });
  return {};
}

asio::awaitable<std::string> engine_state::train(detail::checked_request c) {
  check_running();
  auto& req = c.request;
  if (req.num_nodes != 1 && std::holds_alternative<command_trainer>(req.job_trainer))
    fail(errc::invalid_argument, detail::who(req.name) + ": num_nodes=" + std::to_string(req.num_nodes) +
                                     ": a command job runs one node; use a Python trainer on a "
                                     "torch runtime for several");
  auto j = std::make_shared<job_rec>();
  j->grace = cfg.grace_period;
  plan_job(*j, req.name, req, c.rt);
  co_await record_job(j, c);
  co_await open_progress(j);
  co_await make_job_files(j);
  j->row.steps.clear();
  const std::string name = req.name;
  jobs.emplace(name, j);
  start_job(j);
  co_return name;
}

}  // namespace tjob::local
