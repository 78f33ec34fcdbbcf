#include "cli/supervise.hpp"

#include <tjob/client.hpp>
#include <tjob/spec.hpp>

#include <boost/json.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

extern char** environ;

namespace tjob::cli {

namespace json = boost::json;

json::value request_to_json(const train_request& req, const engine_config& cfg) {
  json::object o;
  o["name"] = req.name;
  o["runtime"] = req.runtime;
  o["num_nodes"] = req.num_nodes;
  o["trainer"] = json::parse(trainer_to_json(req.job_trainer));
  o["home"] = cfg.home.string();
  o["grace_ms"] = cfg.grace_period.count();
  o["venv_cache"] = cfg.venv_cache;
  o["venv_cache_ttl_s"] = cfg.venv_cache_unpinned_ttl.count();
  json::array dirs;
  for (const auto& d : cfg.runtime_dirs) dirs.emplace_back(d.string());
  o["runtime_dirs"] = std::move(dirs);
  return o;
}

void request_from_json(const json::value& v, train_request& req, engine_config& cfg) {
  const auto& o = v.as_object();
  req.name = json::value_to<std::string>(o.at("name"));
  req.runtime = json::value_to<std::string>(o.at("runtime"));
  req.num_nodes = static_cast<int>(o.at("num_nodes").to_number<std::int64_t>());
  req.job_trainer = trainer_from_json(json::serialize(o.at("trainer")));
  cfg.home = json::value_to<std::string>(o.at("home"));
  cfg.grace_period = std::chrono::milliseconds(o.at("grace_ms").to_number<std::int64_t>());
  cfg.venv_cache = o.at("venv_cache").as_bool();
  cfg.venv_cache_unpinned_ttl = std::chrono::seconds(o.at("venv_cache_ttl_s").to_number<std::int64_t>());
  for (const auto& d : o.at("runtime_dirs").as_array())
    cfg.runtime_dirs.emplace_back(json::value_to<std::string>(d));
}

namespace {

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "tjob";
  return std::string(buf, static_cast<std::size_t>(n));
}

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
}

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

void respond(const json::object& o) { write_all(STDOUT_FILENO, json::serialize(o) + "\n"); }

}  // namespace

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

submit_result submit_detached(const train_request& req, const engine_config& cfg) {
  submit_result result;
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
    result.error = std::string("cannot create a pipe: ") + std::strerror(errno);
    return result;
  }
  // In a session of its own: the shell's hang-up and Ctrl-C do not reach it.
  const std::string exe = self_exe();
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  char arg0[] = "tjob", arg1[] = "__supervise";
  char* argv[] = {arg0, arg1, nullptr};
  pid_t pid = 0;
  int err = ::posix_spawn(&pid, exe.c_str(), &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(in[0]);
  ::close(out[1]);
  if (err != 0) {
    ::close(in[1]);
    ::close(out[0]);
    result.error = "cannot start the supervisor " + exe + ": " + std::strerror(err);
    return result;
  }
  write_all(in[1], json::serialize(request_to_json(req, cfg)));
  ::close(in[1]);
  std::string answer = read_all(out[0]);
  ::close(out[0]);
  try {
    auto v = json::parse(answer).as_object();
    if (auto* n = v.if_contains("name")) {
      result.name = json::value_to<std::string>(*n);
      return result;
    }
    result.error = json::value_to<std::string>(v.at("error"));
    result.usage = v.at("usage").as_bool();
  } catch (const std::exception&) {
    result.error = "the supervisor (pid " + std::to_string(pid) + ") ended before it accepted the job" +
                   (answer.empty() ? std::string() : ": " + answer);
  }
  return result;
}

int supervise_main() {
  std::atomic<trainer_client*> client_ptr{nullptr};
  std::string name;
  std::atomic<bool> named{false}, cancel_wanted{false};
  handle_signals([&](int) {
    cancel_wanted = true;
    if (named && client_ptr) {
      try {
        client_ptr.load()->cancel_job(name);
      } catch (...) {
      }
    }
  });

  train_request req;
  engine_config cfg;
  std::unique_ptr<trainer_client> client;
  try {
    request_from_json(json::parse(read_all(STDIN_FILENO)), req, cfg);
    client = std::make_unique<trainer_client>(cfg);
    name = client->train(req);
  } catch (const error& e) {
    respond({{"error", e.what()}, {"usage", is_usage_error(e.code())}});
    return 2;
  } catch (const std::exception& e) {
    respond({{"error", e.what()}, {"usage", false}});
    return 1;
  }
  client_ptr = client.get();
  named = true;
  respond({{"name", name}});
  // From here on nobody reads our output: the supervisor's own messages go to
  // the job directory.
  int logfd = ::open((client->home() / "jobs" / name / "supervisor.log").c_str(),
                     O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  ::dup2(null, STDIN_FILENO);
  ::dup2(logfd >= 0 ? logfd : null, STDOUT_FILENO);
  ::dup2(logfd >= 0 ? logfd : null, STDERR_FILENO);
  if (cancel_wanted) {
    try {
      client->cancel_job(name);
    } catch (...) {
    }
  }
  try {
    client->wait_for_job_status(name, {job_status::complete, job_status::failed},
                                std::chrono::hours(24 * 365 * 10));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tjob supervisor: %s\n", e.what());
  }
  client_ptr = nullptr;
  client.reset();
  return 0;
}

}  // namespace tjob::cli
