#include "cli/run_job.hpp"

#include <CLI/CLI.hpp>

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
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
    if (named.empty() || (named[0]->get_name() != "run" && named[0]->get_name() != "train")) return argc;
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

}  // namespace

void stream_steps(trainer_client& client, const std::string& name, const std::vector<std::string>& steps,
                  log_options options) {
  if (steps.size() == 1) {
    options.step = steps.front();
    auto reader = client.get_job_logs(name, options);
    while (auto chunk = reader.read_some())
      if (!write_out(*chunk)) break;  // nobody reads our output; the job goes on, and we wait for it
    return;
  }
  if (!options.follow) {  // what is stored, step after step
    for (const auto& step : steps) {
      options.step = step;
      auto text = client.get_job_logs(name, options).read_all();
      if (!write_out(prefixed_lines(text, "[" + step + "] "))) return;
    }
    return;
  }
  std::mutex out;
  std::atomic<bool> reader_gone{false};
  std::vector<std::thread> followers;
  for (const auto& step : steps)
    followers.emplace_back([&, step] {
      const std::string prefix = "[" + step + "] ";
      std::string partial;
      auto emit = [&](std::string_view lines) {
        std::lock_guard lock(out);
        auto text = prefixed_lines(lines, prefix);
        if (!text.empty() && !reader_gone && !write_out(text)) reader_gone = true;
      };
      try {
        auto mine = options;
        mine.step = step;
        auto reader = client.get_job_logs(name, mine);
        while (!reader_gone) {
          auto chunk = reader.read_some();
          if (!chunk) break;
          partial += *chunk;
          auto last = partial.rfind('\n');
          if (last == std::string::npos) continue;
          emit(std::string_view(partial).substr(0, last + 1));
          partial.erase(0, last + 1);
        }
        if (!partial.empty()) emit(partial);
      } catch (const std::exception& e) {
        std::lock_guard lock(out);
        std::fprintf(stderr, "tjob: cannot follow %s of %s: %s\n", step.c_str(), name.c_str(), e.what());
      }
    });
  for (auto& t : followers) t.join();
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

void run_interrupts::attach(trainer_client& c, const std::string& name) {
  std::lock_guard lock(mu_);
  client_ = &c;
  name_ = name;
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
    std::fprintf(stderr, "tjob: killing %s now (SIGKILL)\n", name_.c_str());
  else
    std::fprintf(stderr,
                 "tjob: cancelling %s (SIGTERM to its processes, SIGKILL after %.0f s); "
                 "press Ctrl-C again to kill it now\n",
                 name_.c_str(), grace_);
  threads_.emplace_back([c = client_, name = name_, force] {
    try {
      c->cancel_job(name, {.force = force});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tjob: cannot cancel %s: %s\n", name.c_str(), e.what());
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
