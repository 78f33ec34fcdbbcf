#include "cli/run_job.hpp"

#include "cli/job_request.hpp"
#include "cli/status_line.hpp"

#include <CLI/CLI.hpp>

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <system_error>
#include <thread>

namespace tjob::cli {

bool write_out(std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::write(STDOUT_FILENO, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

bool write_log(std::string_view s) {
  if (auto* line = active_status_line()) return line->write_log(s);
  return write_out(s);
}

int tjob_args_end(CLI::App& app, int argc, char** argv) {
  CLI::App* sub = nullptr;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--") return argc;
    if (a.size() > 1 && a[0] == '-') {
      auto eq = a.find('=');
      std::string name(a.substr(0, eq));
      const CLI::Option* opt = sub ? sub->get_option_no_throw(name) : nullptr;
      if (!opt) opt = app.get_option_no_throw(name);
      if (opt && opt->get_expected_min() > 0 && eq == std::string_view::npos) ++i;  // its value
      continue;
    }
    if (sub) return i + 1;  // FILE.py
    auto named = app.get_subcommands([&](CLI::App* s) { return s->check_name(std::string(a)); });
    if (named.empty() || (named[0]->get_name() != "run" && named[0]->get_name() != "train" &&
                          named[0]->get_name() != "optimize"))
      return argc;
    sub = named[0];
  }
  return argc;
}

namespace {

// Each line of `lines` (whole lines; a last one without '\n' gets one) after `prefix`.
std::string prefixed_lines(std::string_view lines, const std::string& prefix) {
  std::string text;
  std::size_t at = 0;
  while (at < lines.size()) {
    auto nl = lines.find('\n', at);
    auto end = nl == std::string_view::npos ? lines.size() : nl + 1;
    text += prefix;
    text += lines.substr(at, end - at);
    if (nl == std::string_view::npos) text += '\n';
    at = end;
  }
  return text;
}

// Output shared by followers on threads: whole lines, one writer at a time,
// until the reader goes away.
struct shared_out {
  std::mutex mu;
  std::atomic<bool> reader_gone{false};

  void emit(std::string_view lines, const std::string& prefix) {
    std::lock_guard lock(mu);
    auto text = prefixed_lines(lines, prefix);
    if (!text.empty() && !reader_gone && !write_log(text)) reader_gone = true;
  }
};

// Follows one step's log to its end, each whole line after `prefix`.
void follow_step(trainer_client& client, const std::string& name, log_options options,
                 const std::string& prefix, shared_out& out) {
  std::string partial;
  try {
    auto reader = client.get_job_logs(name, options);
    while (!out.reader_gone) {
      auto chunk = reader.read_some();
      if (!chunk) break;
      partial += *chunk;
      auto last = partial.rfind('\n');
      if (last == std::string::npos) continue;
      out.emit(std::string_view(partial).substr(0, last + 1), prefix);
      partial.erase(0, last + 1);
    }
    if (!partial.empty()) out.emit(partial, prefix);
  } catch (const std::exception& e) {
    std::lock_guard lock(out.mu);
    std::fprintf(stderr, "tjob: cannot follow %s of %s: %s\n", options.step.c_str(), name.c_str(), e.what());
  }
}

// Starts `f` on a thread of its own, or says the OS would not give one
// (ulimit -u reached, issue 43): the caller then does that work itself. A
// follower that cannot be had must never end the run that owns the jobs.
bool start_thread(std::vector<std::thread>& threads, const std::function<void()>& f) {
  try {
    threads.emplace_back(f);
    return true;
  } catch (const std::system_error& e) {
    if (e.code() != std::errc::resource_unavailable_try_again) throw;
    return false;
  }
}

std::vector<std::string> step_names(trainer_client& client, const std::string& name) {
  std::vector<std::string> steps;
  for (const auto& s : client.get_job(name).steps) steps.push_back(s.name);
  if (steps.empty()) steps.push_back("node-0");
  return steps;
}

}  // namespace

std::vector<std::string> job_steps(trainer_client& client, const std::string& name) {
  return step_names(client, name);
}

void stream_array(trainer_client& client, const std::vector<std::string>& names, std::size_t followers) {
  shared_out out;
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> threads;
  followers = std::clamp<std::size_t>(followers, 1, names.size());
  auto follow_members = [&] {
    for (auto i = next++; i < names.size() && !out.reader_gone; i = next++) {
      const auto& name = names[i];
      std::vector<std::string> steps;
      try {
        steps = step_names(client, name);
      } catch (const std::exception& e) {  // deleted meanwhile
        std::lock_guard lock(out.mu);
        std::fprintf(stderr, "tjob: cannot follow %s: %s\n", name.c_str(), e.what());
        continue;
      }
      for (const auto& step : steps)
        follow_step(client, name, {.step = step, .follow = true},
                    steps.size() == 1 ? "[" + name + "] " : "[" + name + " " + step + "] ", out);
    }
  };
  // Fewer followers when the OS gives fewer threads; with none, this one.
  for (std::size_t t = 0; t < followers && start_thread(threads, follow_members); ++t) {
  }
  if (threads.empty()) follow_members();
  for (auto& t : threads) t.join();
}

void stream_steps(trainer_client& client, const std::string& name, const std::vector<std::string>& steps,
                  log_options options) {
  if (steps.size() == 1) {
    options.step = steps.front();
    auto reader = client.get_job_logs(name, options);
    while (auto chunk = reader.read_some())
      if (!write_log(*chunk)) break;  // nobody reads our output; the job goes on, and we wait for it
    return;
  }
  if (!options.follow) {  // what is stored, step after step
    for (const auto& step : steps) {
      options.step = step;
      auto text = client.get_job_logs(name, options).read_all();
      if (!write_log(prefixed_lines(text, "[" + step + "] "))) return;
    }
    return;
  }
  shared_out out;
  std::vector<std::thread> followers;
  std::vector<std::string> left;  // those no thread could be had for: followed here, after
  for (const auto& step : steps) {
    auto follow = [&, step] {
      auto mine = options;
      mine.step = step;
      follow_step(client, name, mine, "[" + step + "] ", out);
    };
    if (!start_thread(followers, follow)) left.push_back(step);
  }
  for (const auto& step : left) {
    auto mine = options;
    mine.step = step;
    follow_step(client, name, mine, "[" + step + "] ", out);
  }
  for (auto& t : followers) t.join();
}

restart_notices::restart_notices(trainer_client& client, std::string job) {
  auto run = [this, &client, job = std::move(job)] {
    try {
      auto attempt_of = [](const train_job& j) {
        int a = 1;
        for (const auto& s : j.steps) a = std::max(a, s.attempt);
        return a;
      };
      // Every Restarting event, once, in order: those before this thread began too.
      std::size_t said = 0;
      int shown = 1;
      auto say_new = [&] {
        std::size_t seen = 0;
        for (const auto& e : client.get_job_events(job))
          // (one line per restart: the steps that only went with the failed one are not said)
          if (e.reason == "Restarting" && e.message.find("(it went with the others)") == std::string::npos &&
              ++seen > said)
            std::fprintf(stderr, "tjob: job %s: %s\n", job.c_str(), e.message.c_str());
        said = std::max(said, seen);
      };
      auto known = client.get_job(job);
      for (;;) {
        if (attempt_of(known) > shown) {
          say_new();
          shown = attempt_of(known);
        }
        if (stop_ || is_terminal(known.status)) break;
        // (a bounded wait: the destructor's stop is seen within it)
        known = client.wait_for_job_change(job, known, std::chrono::seconds(2));
      }
    } catch (const std::exception&) {
      // deleted meanwhile, or the server gone: the run says what it finds itself
    }
  };
  try {
    thread_ = std::thread(run);
  } catch (const std::system_error&) {
    // no thread to be had (ulimit -u): the run goes on without these lines
  }
}

restart_notices::~restart_notices() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

int run_array(trainer_client& client, const train_request& req, const std::string& spec,
              const std::string& stream_step, run_interrupts& interrupts) {
  if (!stream_step.empty())
    throw usage_error("--step with --array: every member's log is streamed; read one with tjob logs NAME-i");
  auto reqs = array_requests(req, spec);
  auto started = std::chrono::steady_clock::now();
  std::vector<std::string> names;
  names.reserve(reqs.size());
  try {
    for (const auto& r : reqs) names.push_back(client.train(r));
  } catch (...) {
    for (const auto& n : names) {  // undo: none of the array is left behind
      try {
        client.delete_job(n);
      } catch (...) {
      }
    }
    throw;
  }
  const std::string label = "array " + req.name + " (" + std::to_string(names.size()) + " jobs)";
  interrupts.attach(client, names, label);
  const int limit = reqs.front().array_limit;
  std::fprintf(stderr, "tjob: %s submitted: %s ... %s%s\n", label.c_str(), names.front().c_str(),
               names.back().c_str(),
               limit ? (", at most " + std::to_string(limit) + " at once").c_str() : "");
  stream_array(client, names, limit ? static_cast<std::size_t>(limit) : 16);
  std::vector<train_job> ended;
  for (const auto& n : names) {
    try {
      ended.push_back(client.wait_for_job_status(n, {job_status::complete, job_status::failed},
                                                 std::chrono::hours(24 * 365)));
    } catch (const error& e) {
      if (e.code() != errc::job_not_found) throw;  // deleted by someone else: not counted
    }
  }
  interrupts.detach();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::vector<const train_job*> failed;
  for (const auto& j : ended)
    if (j.status == job_status::failed) failed.push_back(&j);
  const auto complete = ended.size() - failed.size();
  const auto gone = names.size() - ended.size();
  const std::string deleted = gone ? ", " + std::to_string(gone) + " deleted before they ended" : "";
  if (failed.empty()) {
    std::fprintf(stderr, "tjob: array %s: %zu Complete%s in %.2f s\n", req.name.c_str(), complete,
                 deleted.c_str(), secs);
    return gone ? 1 : 0;
  }
  std::string which;
  for (std::size_t i = 0; i < failed.size() && i < 5; ++i) which += (i ? ", " : "") + failed[i]->name;
  if (failed.size() > 5) which += ", ...";
  std::fprintf(stderr, "tjob: array %s: %zu Complete, %zu Failed (%s)%s in %.2f s; first failure: %s: %s\n",
               req.name.c_str(), complete, failed.size(), which.c_str(), deleted.c_str(), secs,
               failed.front()->name.c_str(), failed.front()->reason.c_str());
  if (int sig = interrupts.first_signal(); sig && failed.front()->reason == "cancelled") return 128 + sig;
  return exit_code_of(*failed.front());
}

int exit_code_of(const train_job& job) {
  for (const auto& s : job.steps)  // the step the job's failure is (its reason is the job's)
    if (s.status == job_status::failed && s.reason == job.reason && s.exit_code && *s.exit_code > 0)
      return std::min(*s.exit_code, 255);
  for (const auto& s : job.steps)
    if (s.status == job_status::failed && s.exit_code && *s.exit_code > 0) return std::min(*s.exit_code, 255);
  return 1;
}

void run_interrupts::on_signal(int sig) {
  std::lock_guard lock(mu_);
  if (count_++ == 0) first_ = sig;
  if (client_) cancel(count_ >= 2);
}

void run_interrupts::attach(trainer_client& c, std::vector<std::string> names, std::string label) {
  std::lock_guard lock(mu_);
  client_ = &c;
  names_ = std::move(names);
  label_ = label.empty() && !names_.empty() ? names_.front() : std::move(label);
  if (count_ > 0) cancel(count_ >= 2);
}

void run_interrupts::detach() {
  std::vector<std::thread> running;
  {
    std::lock_guard lock(mu_);
    client_ = nullptr;
    running.swap(threads_);
  }
  for (auto& t : running) t.join();
}

int run_interrupts::first_signal() const {
  std::lock_guard lock(mu_);
  return count_ > 0 ? first_ : 0;
}

void run_interrupts::cancel(bool force) {
  if (force)
    std::fprintf(stderr, "tjob: killing %s now (SIGKILL)\n", label_.c_str());
  else
    std::fprintf(stderr,
                 "tjob: cancelling %s (SIGTERM to its processes, SIGKILL after %.0f s); "
                 "press Ctrl-C again to kill it now\n",
                 label_.c_str(), grace_);
  // A graceful cancel waits for its job's end, so it runs on a thread of its
  // own; an array's members are cancelled side by side (cancel_jobs), the
  // ones already gone skipped.
  threads_.emplace_back([c = client_, names = names_, label = label_, force] {
    try {
      if (names.size() == 1)
        c->cancel_job(names.front(), {.force = force});
      else
        c->cancel_jobs(names, {.force = force});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tjob: cannot cancel %s: %s\n", label.c_str(), e.what());
    }
  });
}

void handle_signals(std::function<void(int)> on_signal) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, on_signal = std::move(on_signal)] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) == 0) on_signal(sig);
    }
  }).detach();
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "/proc/self/exe";
  return std::string(buf, static_cast<std::size_t>(n));
}

}  // namespace tjob::cli
