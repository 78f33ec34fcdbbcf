// Submitting a TrainJob as one Slurm job: the checks, the job's directory
// with its fixed scripts and its own files, then one sbatch.
#include "adapters/progress/home_tls.hpp"
#include "adapters/python/python_plan.hpp"
#include "adapters/python/python_setup.hpp"
#include "adapters/slurm/slurm_impl.hpp"
#include "core/fail.hpp"
#include "core/names.hpp"
#include "core/trainer_checks.hpp"

#include <tjob/spec.hpp>

#include <boost/json.hpp>

#include <spdlog/spdlog.h>

#include <sys/stat.h>
#include <cerrno>
#include <cstring>

namespace tjob::slurm {

namespace asio = boost::asio;
namespace fs = std::filesystem;
namespace json = boost::json;
using detail::fail;
using detail::quote;
using detail::who;

namespace {

// What Slurm or tjob sets on the nodes, which a job's env must not override.
bool reserved(std::string_view key) {
  for (auto p : {"SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "PET_", "TJOB_JOB_DIR", "TJOB_PYTHON", "TJOB_PROGRESS_FILE"})
    if (key.starts_with(p)) return true;
  return false;
}

void check_env(const std::string& me, const std::map<std::string, std::string>& env) {
  detail::check_env(me, env);
  for (const auto& [k, v] : env)
    if (reserved(k))
      fail(errc::invalid_argument, me + ": env " + k +
                                       " is Slurm's or tjob's own on a Slurm job (SLURM_*, SBATCH_*, SRUN_*, "
                                       "SALLOC_*, PET_*); remove it from the env, or give an sbatch option in "
                                       "the backend's sbatch_options");
}

std::string check_workdir(const std::string& me, const std::string& dir) {
  if (!dir.empty() && dir.front() != '/')
    fail(errc::invalid_argument, me + ": working_dir " + quote(dir) +
                                     " is relative; on a Slurm job it is a directory of the nodes: give an "
                                     "absolute path, or leave it empty for the job's own directory");
  return dir;
}

// What one job needs beyond the submission: its files and environment.
struct job_plan {
  submission sub;
  std::vector<std::pair<std::string, std::string>> files;  // name in the job dir, text
  std::vector<std::string> env;                            // sbatch's (and so the job's) environment
};

void plan_command(const std::string& me, const command_trainer& ct, job_plan& p) {
  detail::check_command(me, ct);
  if (!ct.image.empty())
    fail(errc::invalid_argument, me + ": image " + quote(ct.image) +
                                     ": the slurm backend runs commands on the nodes as they are, not in "
                                     "images; leave the image empty, or use the container backend");
  check_env(me, ct.env);
  if (ct.cpus < 1) fail(errc::invalid_argument, me + ": cpus=" + std::to_string(ct.cpus) + ": give 1 or more");
  p.sub.command = ct.command;
  p.sub.cpus_per_task = ct.cpus;
  p.sub.memory_per_node = ct.memory;
  if (!ct.working_dir.empty()) p.sub.chdir = check_workdir(me, ct.working_dir);
  for (const auto& [k, v] : ct.env) p.env.push_back(k + "=" + v);
}

// A Python job: its code and plan as files, a venv built once before the
// nodes start when it has packages, then the shared entry script on every
// node (torchrun for a torch runtime, meeting on the first node).
void plan_python(const std::string& me, python_trainer pt, const runtime& rt, const fs::path& dir, job_plan& p) {
  auto source = python::check_remote_trainer(me, pt);
  if (!pt.image.empty())
    fail(errc::invalid_argument, me + ": image " + quote(pt.image) +
                                     ": the slurm backend runs Python on the nodes, not in images; leave the "
                                     "image empty, or use the container backend");
  check_env(me, pt.env);
  if (!pt.working_dir.empty()) p.sub.chdir = check_workdir(me, pt.working_dir);
  std::vector<std::string> packages;
  try {
    packages = python::merge_packages(rt.trainer.packages, pt.packages_to_install);
  } catch (const error& e) {
    fail(errc::invalid_argument, me + ": " + e.what());
  }
  const bool torch = rt.trainer.framework == "torch";
  const int procs = pt.gpus > 0 ? pt.gpus : pt.procs_per_node;
  for (auto& [file, text] : python::shipped_files(pt, source)) p.files.emplace_back(file, std::move(text));
  const std::string python = pt.python.empty() ? "python3" : pt.python;
  std::string node_python = python;
  if (!packages.empty()) {
    const auto venv = (dir / "venv").string();
    json::array pkgs, pip_args;
    for (const auto& x : packages) pkgs.emplace_back(x);
    for (auto& a : python::pip_install_args(packages)) pip_args.emplace_back(std::move(a));
    json::object pip_env;
    for (auto& [k, v] : python::pip_index_environment(python::index_urls(pt.pip_index_urls))) pip_env[k] = v;
    json::object setup{{"venv", venv},
                       {"system_site_packages", pt.system_site_packages},
                       {"packages", std::move(pkgs)},
                       {"pip_args", std::move(pip_args)},
                       {"pip_env", std::move(pip_env)},
                       {"bootstrap", std::string(python::pip_bootstrap_code())}};
    p.files.emplace_back("setup.json", json::serialize(setup));
    node_python = venv + "/bin/python";
  }
  pt.packages_to_install.clear();  // installed before the nodes start
  auto plan = python::entry_plan(pt, source, torch, false, (dir / "train.py").string());
  // The directory sent with the job is its work dir, and importable.
  if (!pt.code_dir.empty()) plan["python_path"] = json::array{(dir / "work").string()};
  if (torch) {
    python::torch_from_environment(plan, procs);
    p.files.emplace_back("torch", "\n");
  }
  p.files.emplace_back("plan.json", json::serialize(plan));
  p.files.emplace_back("entry.py", std::string(python::entry_script()));
  p.sub.command = {node_python, (dir / "entry.py").string(), (dir / "plan.json").string()};
  p.sub.cpus_per_task = procs;
  p.sub.memory_per_node = pt.memory_limit;
  p.sub.gpus_per_node = pt.gpus;
  for (const auto& [k, v] : pt.env) p.env.push_back(k + "=" + v);
  p.env.push_back("PYTHONUNBUFFERED=1");
  p.env.push_back("TJOB_PYTHON=" + python);
}

// What the slurm backend refuses of a request beyond its trainer's checks.
void check_request(const std::string& me, const train_request& r) {
  for (const auto* m : {&r.labels, &r.annotations})
    for (const auto& [k, v] : *m)
      if (k.empty() || detail::has_nul(k) || detail::has_nul(v))
        fail(errc::invalid_argument, me + ": " + (m == &r.labels ? "label" : "annotation") +
                                         " keys must not be empty and neither keys nor values may hold NUL");
}

// The job's record (job.json), as tjob reads it back.
job_record record_of(const train_request& r, const std::string& runtime) {
  job_record rec;
  rec.name = r.name;
  rec.runtime = runtime;
  rec.num_nodes = r.num_nodes;
  rec.created = clock::now();
  rec.labels = r.labels;
  rec.annotations = r.annotations;
  rec.array = r.array;
  rec.retry = r.retry;
  rec.warning = r.warning;
  return rec;
}

// Progress: the nodes reach no endpoint of ours, so tjob.report writes the
// job's progress file, and the helper package that has it goes on the
// PYTHONPATH, after the job's own (or, but through tjob serve, sbatch's).
void add_progress_environment(const fs::path& dir, std::vector<std::string>& env, bool clean) {
  auto helper = progress::python_helper(dir).string();
  std::string base;
  auto given = std::find_if(env.begin(), env.end(), [](const std::string& e) { return e.starts_with("PYTHONPATH="); });
  if (given != env.end()) {
    base = given->substr(11);
    env.erase(given);
  } else if (const char* e = std::getenv("PYTHONPATH"); e && !clean) {
    base = e;
  }
  env.push_back("PYTHONPATH=" + (base.empty() ? helper : base + ":" + helper));
  env.push_back("TJOB_PROGRESS_FILE=" + (dir / progress_file).string());
}

// What tjob submits for a job: sbatch's options, the files of its
// directory, its environment and its command.
job_plan plan_of(const std::string& me, train_request& r, const runtime& rt, const fs::path& dir) {
  check_request(me, r);
  job_plan p;
  p.sub.job_dir = dir.string();
  p.sub.chdir = (dir / "work").string();
  p.sub.num_nodes = r.num_nodes;
  p.sub.time_limit = r.active_deadline;
  p.sub.nice = -r.priority;
  p.sub.warning = r.warning;  // the engine checked it against the deadline
  if (r.begin) {              // whole seconds, rounded up: never before the time asked
    auto left = std::chrono::ceil<std::chrono::seconds>(*r.begin - clock::now());
    if (left.count() > 0) p.sub.begin_after = left;
  }
  // A restart runs every node again (a gang), in the job's allocation; a
  // job that may restart is requeued by Slurm when a node fails.
  p.sub.requeue = r.retry.max_restarts > 0;
  if (p.sub.requeue) p.files.emplace_back(restart_plan_file, restart_plan(r.retry));
  if (auto* ct = std::get_if<command_trainer>(&r.job_trainer))
    plan_command(me, *ct, p);
  else
    plan_python(me, std::get<python_trainer>(r.job_trainer), rt, dir, p);
  return p;
}

// The environment every node of the job gets, beside its own.
void add_job_environment(const std::string& me, const train_request& r, const fs::path& dir,
                         std::vector<std::string>& env, const detail::backend_context& ctx) {
  env.push_back("TJOB_JOB_DIR=" + dir.string());
  // A Python job's processes handle it (python::line_hook_module); a command learns its name.
  if (r.warning) env.push_back("TJOB_STOP_SIGNAL=" + signal_name(r.warning->signal));
  env.push_back("TJOB_CHECKPOINT_DIR=" + (dir / "checkpoints").string());
  try {
    add_progress_environment(dir, env, ctx.cfg.clean_job_environment);
  } catch (const std::exception& e) {
    ctx.log->warn("{}: cannot report progress: {}", me, e.what());
  }
}

}  // namespace

// The dependencies, on the Slurm ids of the jobs named. One that has ended
// already is decided here: Slurm may have forgotten it.
asio::awaitable<backend::impl::dependencies> backend::impl::dependencies_of(const std::string& me,
                                                                          const train_request& r) {
  dependencies out;
  if (r.after_ok.empty() && r.after_any.empty() && r.after_not_ok.empty()) co_return out;
  auto q = co_await read_queue();
  if (!q) detail::raise(detail::prefixed(q.error(), me + ": cannot read the jobs it depends on: "));
  for (const auto& [kind, list] : {std::pair{"afterok", &r.after_ok}, std::pair{"afterany", &r.after_any},
                                   std::pair{"afternotok", &r.after_not_ok}}) {
    for (const auto& dep : *list) {
      auto f = read_files(dep);
      if (!f)
        fail(errc::invalid_argument, me + ": it depends on " + quote(dep) + ", and there is no such job " +
                                         where() + "; give the name of an existing job");
      auto row = row_of_id(*q, f->slurm_id);
      auto job = fold(*f, row, knows_of(*q, *f));
      if (is_terminal(job.status)) {
        bool ok = job.status == job_status::complete;
        bool met = std::string_view(kind) == "afterany" || (std::string_view(kind) == "afterok" && ok) ||
                   (std::string_view(kind) == "afternotok" && !ok);
        if (!met && out.never.empty())
          out.never = "job " + quote(dep) + " ended " + std::string(to_string(job.status)) + ", and this job needs it " +
                      (std::string_view(kind) == "afterok" ? "Complete" : "Failed");
        continue;
      }
      if (f->slurm_id.empty())
        fail(errc::invalid_argument, me + ": it depends on " + quote(dep) +
                                         ", which is not submitted to Slurm; wait until it is, or leave it out");
      out.ids.push_back(std::string(kind) + ":" + f->slurm_id);
    }
  }
  co_return out;
}

// The job's directory, made once (a name taken is a duplicate), with its
// fixed scripts and the job's own files; nothing of it is left when a write fails.
void backend::impl::make_job_dir(const std::string& me, const fs::path& dir,
                                 const std::vector<std::pair<std::string, std::string>>& files) {
  std::error_code ec;
  fs::create_directories(shared, ec);
  if (::mkdir(dir.c_str(), 0700) != 0) {
    if (errno == EEXIST)
      fail(errc::duplicate_name, me + " exists already " + where() + "; delete it (tjob delete) or choose another name");
    fail(errc::backend_error, me + ": cannot make " + dir.string() + ": " + std::strerror(errno) +
                                  "; the shared directory (--shared-dir) must be writable");
  }
  ::mkdir((dir / "work").c_str(), 0700);
  ::mkdir((dir / "checkpoints").c_str(), 0700);  // TJOB_CHECKPOINT_DIR: every node and attempt sees it
  const std::pair<std::string, std::string> fixed[] = {{batch_script_file, std::string(batch_script())},
                                                       {node_script_file, std::string(node_script())},
                                                       {helper_file, std::string(helper_script())}};
  auto write = [&](const std::string& file, const std::string& text) {
    if (write_file(dir / file, text, file == batch_script_file || file == node_script_file ? 0700 : 0600)) return;
    auto why = std::string(std::strerror(errno));
    fs::remove_all(dir, ec);
    fail(errc::backend_error, me + ": cannot write " + (dir / file).string() + ": " + why);
  };
  for (const auto& [file, text] : fixed) write(file, text);
  for (const auto& [file, text] : files) write(file, text);
}

// At most `limit` members of an array run at once: Slurm's singleton, one
// job of each slot name at a time, the members dealt to the slots in turn.
// The count of members is read from the directory once per array and kept.
std::string backend::impl::array_slot(const std::string& array, int limit) {
  auto [it, first] = array_members.try_emplace(array, 0);
  if (first)
    for (const auto& other : job_names())
      if (auto f = read_files(other); f && f->record.array == array) ++it->second;
  return array + ".slot" + std::to_string(it->second++ % limit);
}

asio::awaitable<std::string> backend::impl::train(detail::checked_request c) {
  check_running();
  auto& r = c.request;
  const auto name = r.name;
  const auto me = who(name);
  const auto dir = dir_of(name);
  auto p = plan_of(me, r, c.rt, dir);

  auto rec = record_of(r, c.rt.name);
  p.sub.job_name = name;
  p.sub.comment = comment_of(rec, shared.string());

  auto needs = co_await dependencies_of(me, r);
  auto& deps = needs.ids;
  const auto& never = needs.never;
  if (!r.array.empty() && r.array_limit > 0) {
    p.sub.job_name = array_slot(r.array, r.array_limit);
    deps.push_back("singleton");
  }
  for (std::size_t i = 0; i < deps.size(); ++i) p.sub.dependency += (i ? "," : "") + deps[i];

  p.files.emplace_back("job.json", json::serialize(to_json(rec)));
  make_job_dir(me, dir, p.files);
  std::error_code ec;
  auto undo = [&] { fs::remove_all(dir, ec); };
  // The directory sent with the job (its snapshot) is the work dir's content:
  // in the shared directory, so every node sees it.
  if (const auto& from = detail::code_dir_of(r); !from.empty()) {
    fs::copy(from, dir / "work", fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
    if (ec) {
      auto why = ec.message();
      undo();
      fail(errc::backend_error,
           me + ": cannot copy its working_dir into " + (dir / "work").string() + ": " + why);
    }
  }
  if (!never.empty()) {
    write_file(dir / "never", never + "\n");
    waiters.notify_all();
    co_return name;
  }
  add_job_environment(me, r, dir, p.env, ctx);
  auto sent = co_await command(sbatch_argv(cfg, p.sub), p.env, ctx.cfg.clean_job_environment);
  if (!sent) {
    undo();
    detail::raise(detail::prefixed(sent.error(), me + ": Slurm refused it: "));
  }
  auto id = sent->out.substr(0, sent->out.find_first_of(";\n"));
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
    undo();
    fail(errc::backend_error, me + ": sbatch answered " + quote(sent->out) + ", not a job id");
  }
  if (!write_file(dir / "slurm-id", id + "\n"))
    ctx.log->warn("{}: cannot record its Slurm id {} in {}: {}; it is found again by its comment", me, id,
                  dir.string(), std::strerror(errno));
  ctx.log->info("{}: submitted to Slurm as job {}", me, id);
  poll_now.notify();
  co_return name;
}

}  // namespace tjob::slurm
