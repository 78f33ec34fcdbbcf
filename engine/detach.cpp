// train_detached and the supervisor it starts (see client.hpp, "Lifetime").
//
// The submitter starts the supervisor program (`<program> __supervise`) in a
// session of its own, writes the request and the engine's settings to its
// stdin as one JSON object, and reads one JSON answer from its stdout: the
// job's name, or the error (code, message, diagnostics). The supervisor then
// owns the job until it ends.
#include <tjob/client.hpp>
#include <tjob/spec.hpp>
#include <tjob/wire.hpp>

#include <boost/json.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

extern char** environ;

namespace tjob {

namespace json = boost::json;

namespace {

// Both sides must read the same fields; an old supervisor refuses a new
// submitter (and the reverse) by this number rather than by a missing field.
// 2: priority, active deadline, dependencies, admission budgets; 3: the retry policy;
// 4: a list of requests (a job array's members, one supervisor for them all), the backend
// and the container backend's settings (a container job's active deadline)
constexpr std::int64_t protocol_version = 5;

json::object request_to_json(const train_request& req) {
  json::object o;
  o["name"] = req.name;
  o["runtime"] = req.runtime;
  o["num_nodes"] = req.num_nodes;
  o["priority"] = req.priority;
  o["active_deadline_s"] = req.active_deadline.count();
  o["array"] = req.array;
  o["array_limit"] = req.array_limit;
  for (const auto& [key, list] : {std::pair{"after_ok", &req.after_ok},
                                  {"after_any", &req.after_any},
                                  {"after_not_ok", &req.after_not_ok}}) {
    json::array a;
    for (const auto& n : *list) a.emplace_back(n);
    o[key] = std::move(a);
  }
  json::object retry;
  retry["max_restarts"] = req.retry.max_restarts;
  retry["backoff_ms"] = req.retry.backoff.count();
  retry["backoff_factor"] = req.retry.backoff_factor;
  retry["max_backoff_ms"] = req.retry.max_backoff.count();
  for (const auto& [key, codes] :
       {std::pair{"retry_on", &req.retry.retry_on}, {"never_retry", &req.retry.never_retry}}) {
    json::array a;
    for (int c : *codes) a.emplace_back(c);
    retry[key] = std::move(a);
  }
  o["retry"] = std::move(retry);
  o["trainer"] = json::parse(trainer_to_json(req.job_trainer));
  return o;
}

// The requests and the engine's settings, as the supervisor reads them: the
// engine's one config codec (tjob/wire.hpp), the backend's options its own.
json::value batch_to_json(const std::vector<train_request>& requests, const engine_config& cfg) {
  json::object o;
  o["protocol"] = protocol_version;
  json::array reqs;
  for (const auto& r : requests) reqs.emplace_back(request_to_json(r));
  o["requests"] = std::move(reqs);
  o["config"] = to_json(cfg);
  return o;
}

void config_from_json(const json::object& o, engine_config& cfg) {
  if (o.at("protocol").to_number<std::int64_t>() != protocol_version)
    throw error(errc::invalid_argument,
                "the supervisor and the program that started it are of different tjob versions; "
                "point engine_config::supervisor (or $TJOB_SUPERVISOR) at the tjob built with the library");
  cfg = engine_config_from_json(o.at("config"));
}

train_request request_from_json(const json::object& o) {
  train_request req;
  req.name = json::value_to<std::string>(o.at("name"));
  req.runtime = json::value_to<std::string>(o.at("runtime"));
  req.num_nodes = static_cast<int>(o.at("num_nodes").to_number<std::int64_t>());
  req.job_trainer = trainer_from_json(json::serialize(o.at("trainer")));
  req.priority = static_cast<int>(o.at("priority").to_number<std::int64_t>());
  req.active_deadline = std::chrono::seconds(o.at("active_deadline_s").to_number<std::int64_t>());
  req.array = json::value_to<std::string>(o.at("array"));
  req.array_limit = static_cast<int>(o.at("array_limit").to_number<std::int64_t>());
  for (const auto& [key, list] : {std::pair{"after_ok", &req.after_ok},
                                  {"after_any", &req.after_any},
                                  {"after_not_ok", &req.after_not_ok}})
    for (const auto& n : o.at(key).as_array()) list->push_back(json::value_to<std::string>(n));
  const auto& retry = o.at("retry").as_object();
  req.retry.max_restarts = static_cast<int>(retry.at("max_restarts").to_number<std::int64_t>());
  req.retry.backoff = std::chrono::milliseconds(retry.at("backoff_ms").to_number<std::int64_t>());
  req.retry.backoff_factor = retry.at("backoff_factor").to_number<double>();
  req.retry.max_backoff = std::chrono::milliseconds(retry.at("max_backoff_ms").to_number<std::int64_t>());
  for (const auto& [key, codes] :
       {std::pair{"retry_on", &req.retry.retry_on}, {"never_retry", &req.retry.never_retry}})
    for (const auto& c : retry.at(key).as_array())
      codes->push_back(static_cast<int>(c.to_number<std::int64_t>()));
  return req;
}

bool executable(const std::string& path) { return !path.empty() && ::access(path.c_str(), X_OK) == 0; }

// The program to start: the config's, $TJOB_SUPERVISOR, the tjob built with
// this library (its build tree, then where it is installed), then tjob on PATH.
std::string supervisor_program(const engine_config& cfg) {
  if (!cfg.supervisor.empty()) return cfg.supervisor.string();
  if (const char* e = std::getenv("TJOB_SUPERVISOR"); e && *e) return e;
#ifdef TJOB_BUILT_CLI
  if (executable(TJOB_BUILT_CLI)) return TJOB_BUILT_CLI;
#endif
#ifdef TJOB_INSTALLED_CLI
  if (executable(TJOB_INSTALLED_CLI)) return TJOB_INSTALLED_CLI;
#endif
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!rest.empty()) {
    auto colon = rest.find(':');
    auto dir = rest.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    if (dir.empty()) continue;
    auto candidate = std::string(dir) + "/tjob";
    if (executable(candidate)) return candidate;
  }
  throw error(errc::executable_not_found,
              "train_detached: no tjob program to supervise the job (it was not found where the library "
              "was built or installed, nor on PATH); set engine_config::supervisor or $TJOB_SUPERVISOR "
              "to the tjob binary");
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

void respond_error(const error& e) {
  respond({{"error", e.what()}, {"code", e.code().value()}, {"diagnostics", e.diagnostics()}});
}

struct fds {
  int v[2] = {-1, -1};
  ~fds() {
    for (int fd : v)
      if (fd >= 0) ::close(fd);
  }
  int take(int i) { return std::exchange(v[i], -1); }
};

// Submits every request, all or nothing: when one is refused, those already
// submitted are deleted (a delete cancels what runs) and its error is raised.
std::vector<std::string> train_all(trainer_client& client, const std::vector<train_request>& requests) {
  std::vector<std::string> names;
  names.reserve(requests.size());
  try {
    for (const auto& r : requests) names.push_back(client.train(r));
  } catch (...) {
    for (const auto& n : names) {
      try {
        client.delete_job(n);
      } catch (...) {  // already gone: nothing to undo
      }
    }
    throw;
  }
  return names;
}

}  // namespace

std::vector<std::string> train_detached(const std::vector<train_request>& requests, engine_config config) {
  if (requests.empty()) return {};
  // The cluster (or a tjob serve) runs and owns its jobs, and nothing here
  // needs to stay. A container job needs an owner until the engine has
  // admitted it (it may wait for the budget, its dependencies or its array:
  // the daemon has no queue) and, with an active deadline, until it ends (the
  // daemon has none): the supervisor.
  const auto backend = find_backend(config.backend);
  if (!backend)
    throw error(errc::invalid_argument, "backend '" + config.backend + "': no such backend");
  if (!backend->capabilities.needs_owner) {
    trainer_client client(config);
    return train_all(client, requests);
  }
  if (config.home.empty()) config.home = default_home();
  config.home = std::filesystem::absolute(config.home);
  const std::string program = supervisor_program(config);
  // The request goes through a socket, not a pipe: a supervisor that dies
  // before reading it must not kill this program with SIGPIPE (MSG_NOSIGNAL).
  fds in, out;
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in.v) != 0 || ::pipe2(out.v, O_CLOEXEC) != 0)
    throw error(errc::spawn_failed,
                std::string("train_detached: cannot create a pipe: ") + std::strerror(errno));
  // In a session of its own: the shell's hang-up and Ctrl-C do not reach it.
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in.v[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out.v[1], STDOUT_FILENO);
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  std::string arg0 = "tjob", arg1 = "__supervise";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = 0;
  int err = ::posix_spawn(&pid, program.c_str(), &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(in.take(0));
  ::close(out.take(1));
  if (err != 0)
    throw error(errc::spawn_failed, "train_detached: cannot start the supervisor " + program + ": " +
                                        std::strerror(err) +
                                        "; set engine_config::supervisor to the tjob binary");
  const std::string body = json::serialize(batch_to_json(requests, config));
  for (std::string_view rest = body; !rest.empty();) {
    ssize_t n = ::send(in.v[1], rest.data(), rest.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // it went away: its answer (or its absence) says why
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  ::close(in.take(1));
  std::string answer = read_all(out.v[0]);
  // The process started here forked the supervisor and ended at once (see
  // supervisor_main): reaped now, nothing of it is left as a zombie.
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  json::object o;
  try {
    auto v = json::parse(answer);
    o = v.as_object();
  } catch (const std::exception&) {
    throw error(errc::spawn_failed,
                "train_detached: the supervisor " + program + " (pid " + std::to_string(pid) +
                    ") ended before it accepted the job",
                answer);
  }
  if (auto* n = o.if_contains("names"); n && n->is_array()) {
    std::vector<std::string> names;
    for (const auto& v : n->get_array()) names.push_back(json::value_to<std::string>(v));
    return names;
  }
  auto text = [&](const char* k) {
    auto* v = o.if_contains(k);
    return v && v->is_string() ? std::string(v->as_string()) : std::string();
  };
  auto* c = o.if_contains("code");
  auto code = c && c->is_int64() ? static_cast<int>(c->as_int64()) : static_cast<int>(errc::backend_error);
  throw error(boost::system::error_code(code, category()), text("error"), text("diagnostics"));
}

std::string train_detached(const train_request& request, engine_config config) {
  std::vector<train_request> one{request};
  return train_detached(one, std::move(config)).front();
}

std::string trainer_client::train_detached(train_request request) {
  return tjob::train_detached(request, config());
}

std::vector<std::string> trainer_client::train_detached(const std::vector<train_request>& requests) {
  return tjob::train_detached(requests, config());
}

int supervisor_main() {
  // The supervisor is the grandchild of the program that asked: the child
  // ends at once, is reaped there, and the supervisor belongs to init (or a
  // subreaper) from then on, so a long-lived program that detaches many jobs
  // collects no zombies. No thread exists yet, so fork is safe here.
  if (pid_t p = ::fork(); p < 0) {
    respond_error(error(errc::spawn_failed, std::string("supervisor: cannot fork: ") + std::strerror(errno)));
    return 1;
  } else if (p > 0) {
    ::_exit(0);
  }
  std::signal(SIGPIPE, SIG_IGN);  // an asker gone before the answer must not take the job's owner with it
  // Signals are taken by a thread of their own: SIGTERM, SIGINT or SIGHUP
  // cancels the job (before it has a name: as soon as it has one). The
  // thread never returns, so what it shares with this function is on the heap.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  struct shared {
    std::mutex m;
    trainer_client* client = nullptr;  // set while the jobs are named and the client is alive
    std::vector<std::string> names;
    bool cancel_wanted = false;
  };
  auto state = std::make_shared<shared>();
  auto cancel_all = [](shared& st) {  // (st.m held)
    try {
      st.client->cancel_jobs(st.names);
    } catch (...) {  // ones that have ended already
    }
  };
  std::thread([set, state, cancel_all] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      std::lock_guard lock(state->m);
      state->cancel_wanted = true;
      if (state->client) cancel_all(*state);
    }
  }).detach();

  std::vector<train_request> reqs;
  engine_config cfg;
  std::unique_ptr<trainer_client> client;
  std::vector<std::string> names;
  try {
    try {
      auto v = json::parse(read_all(STDIN_FILENO));
      const auto& o = v.as_object();
      config_from_json(o, cfg);
      for (const auto& r : o.at("requests").as_array()) reqs.push_back(request_from_json(r.as_object()));
      if (reqs.empty()) throw std::invalid_argument("no request");
    } catch (const error&) {
      throw;
    } catch (const std::exception& e) {
      const std::string what = e.what();
      throw error(errc::invalid_argument,
                  "supervisor: the request is not what train_detached writes: " + what);
    }
    client = std::make_unique<trainer_client>(cfg);
    names = train_all(*client, reqs);
  } catch (const error& e) {
    respond_error(e);
    return 2;
  } catch (const std::exception& e) {
    respond_error(error(errc::backend_error, e.what()));
    return 1;
  }
  json::array answer;
  for (const auto& n : names) answer.emplace_back(n);
  respond({{"names", std::move(answer)}});
  // From here on nobody reads our output: the supervisor's own messages go to
  // the first job's directory.
  // (the job's own directory, which its code cannot write; O_NOFOLLOW all the same)
  const auto caps = client->job_backend();
  const auto job_dir = client->home() / (caps.job_files.empty() ? "jobs" : caps.job_files) / names.front();
  int logfd =
      ::open((job_dir / "supervisor.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  ::dup2(null, STDIN_FILENO);
  ::dup2(logfd >= 0 ? logfd : null, STDOUT_FILENO);
  ::dup2(logfd >= 0 ? logfd : null, STDERR_FILENO);
  {
    std::lock_guard lock(state->m);
    state->client = client.get();
    state->names = names;
    if (state->cancel_wanted) cancel_all(*state);
  }
  // Owns them all until the last has ended (a member deleted early is done);
  // a container job without a deadline only until its containers run.
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto& name = names[i];
    std::set<job_status> until{job_status::complete, job_status::failed};
    if (caps.owner_until_started && reqs.at(i).active_deadline.count() == 0)
      until.insert(job_status::running);
    try {
      client->wait_for_job_status(name, until, std::chrono::hours(24 * 365 * 10));
    } catch (const error& e) {
      if (e.code() != errc::job_not_found) std::fprintf(stderr, "tjob supervisor: %s\n", e.what());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tjob supervisor: %s\n", e.what());
    }
  }
  {
    std::lock_guard lock(state->m);
    state->client = nullptr;
  }
  client.reset();
  return 0;
}

}  // namespace tjob
