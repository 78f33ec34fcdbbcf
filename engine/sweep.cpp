// Sweeps (tjob/sweep.hpp): starting one (its supervisor, `tjob __sweep`),
// and what any process does to a sweep (read, wait, cancel, delete, resume).
// The owner's loop is sweep_owner.cpp's.
#include "core/names.hpp"
#include "core/sweep_search.hpp"
#include "engine/supervise.hpp"
#include "engine/sweep_record.hpp"
#include "engine/sweep_trials.hpp"

#include <tjob/sweep.hpp>
#include <tjob/wire.hpp>

#include <boost/json.hpp>

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

namespace tjob {

namespace json = boost::json;
using namespace detail;

namespace {

constexpr std::int64_t protocol_version = 1;

std::uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

// A new sweep's record, its name checked free among sweeps and jobs.
std::string create_sweep(trainer_client& client, sweep_request r) {
  if (r.objectives.empty()) r.objectives.push_back(objective{});
  if (!r.seed) r.seed = fresh_seed();
  if (r.name.empty()) r.name = generate_job_name();
  check_sweep_request(r);
  const auto last = r.name + "-" + std::to_string(sweep_trial_count(r) - 1);
  if (auto problem = job_name_problem(last))
    throw error(errc::invalid_name, "sweep " + r.name + ": name: its last trial's name " + last + " " +
                                        *problem + "; give a shorter name");
  std::filesystem::create_directories(sweeps_dir(client.home()));
  const auto dir = sweep_dir(client.home(), r.name);
  std::error_code ec;
  if (!std::filesystem::create_directory(dir, ec))
    throw error(errc::duplicate_name, "sweep " + r.name + ": name: a sweep of that name exists; give another, "
                                      "or tjob delete " + r.name);
  for (const auto& j : client.list_jobs())
    if (j.name == r.name || j.array == r.name) {
      std::filesystem::remove(dir, ec);
      throw error(errc::duplicate_name, "sweep " + r.name +
                                            ": name: a job or job array of that name exists; "
                                            "give the sweep another name");
    }
  sweep_job s;
  s.name = r.name;
  s.request = std::move(r);
  s.creation_timestamp = clock::now();
  write_record(dir, s);
  return s.name;
}

json::value supervisor_body(const engine_config& cfg, const sweep_request* request, const std::string& resume) {
  json::object o;
  o["protocol"] = protocol_version;
  o["config"] = to_json(cfg);
  o["request"] = request ? json::value(detail::to_json(*request)) : json::value(nullptr);
  o["resume"] = resume;
  return o;
}

engine_config absolute_home(engine_config cfg) {
  if (cfg.home.empty()) cfg.home = default_home();
  cfg.home = std::filesystem::absolute(cfg.home);
  return cfg;
}

std::filesystem::path home_of(const engine_config& cfg) { return absolute_home(cfg).home; }

// An owner that has seen a cancel ends within a round (its trials' ends wake
// it); at most `limit` is waited for one that does not.
void wait_owner_gone(const std::filesystem::path& dir,
                     std::chrono::seconds limit = std::chrono::seconds(30)) {
  for (auto until = std::chrono::steady_clock::now() + limit;
       has_owner(dir) && std::chrono::steady_clock::now() < until;)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

}  // namespace

std::string sweep_request_to_json(const sweep_request& r) { return json::serialize(detail::to_json(r)); }

sweep_request sweep_request_from_json(std::string_view text) {
  json::value v;
  try {
    v = json::parse(text);
  } catch (const std::exception& e) {
    throw error(errc::invalid_argument, std::string("sweep request: not JSON: ") + e.what());
  }
  return sweep_request_from(v);
}

std::string sweep_to_json(const sweep_job& s) { return json::serialize(record_to_json(s)); }

std::string optimize(sweep_request request, engine_config config) {
  if (request.objectives.empty()) request.objectives.push_back(objective{});
  if (!request.seed) request.seed = fresh_seed();
  if (request.name.empty()) request.name = generate_job_name();
  check_sweep_request(request);  // before any process is started
  config = absolute_home(std::move(config));
  const auto program = supervisor_program(config, "optimize");
  auto answer = ask_supervisor(program, "__sweep", json::serialize(supervisor_body(config, &request, {})),
                               "optimize");
  return json::value_to<std::string>(answer.at("name"));
}

void resume_sweep(const std::string& name, engine_config config) {
  config = absolute_home(std::move(config));
  auto s = get_sweep(name, config);
  if (sweep_ended(s.status))
    throw error(errc::invalid_argument, "sweep " + name + " has ended (" + s.status + "); nothing to resume");
  if (s.owned)
    throw error(errc::invalid_argument, "sweep " + name + " has an owner already; tjob get " + name + " follows it");
  const auto program = supervisor_program(config, "resume_sweep");
  ask_supervisor(program, "__sweep", json::serialize(supervisor_body(config, nullptr, name)), "resume_sweep");
}

sweep_job run_sweep(trainer_client& client, const std::string& name) { return drive_sweep(client, name, {}); }

sweep_job get_sweep(const std::string& name, const engine_config& config) {
  const auto dir = sweep_dir(home_of(config), name);
  // The owner first: one that writes its last record and goes between the
  // two looks is then seen owning an ended sweep, never gone from a running one.
  const bool owned = !job_name_problem(name) && has_owner(dir);
  std::optional<sweep_job> s;
  if (!job_name_problem(name)) s = read_record(dir);
  if (!s) throw error(errc::job_not_found, "sweep " + name + ": no such sweep");
  s->owned = owned && !sweep_ended(s->status);
  return *s;
}

std::vector<sweep_job> list_sweeps(const engine_config& config) {
  std::vector<sweep_job> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(sweeps_dir(home_of(config)), ec)) {
    const bool owned = has_owner(entry.path());
    if (auto s = read_record(entry.path())) {
      s->owned = owned && !sweep_ended(s->status);
      out.push_back(std::move(*s));
    }
  }
  std::sort(out.begin(), out.end(), [](const sweep_job& a, const sweep_job& b) {
    return std::tie(a.creation_timestamp, a.name) < std::tie(b.creation_timestamp, b.name);
  });
  return out;
}

sweep_job wait_for_sweep_change(const std::string& name, const sweep_job& known,
                                std::chrono::milliseconds timeout, const engine_config& config) {
  const auto dir = sweep_dir(home_of(config), name);
  const auto until = std::chrono::steady_clock::now() + timeout;
  const auto was = sweep_to_json(known);
  int fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd >= 0 && ::inotify_add_watch(fd, dir.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_CREATE) < 0) {
    ::close(fd);
    fd = -1;
  }
  struct closer {
    int fd;
    ~closer() {
      if (fd >= 0) ::close(fd);
    }
  } guard{fd};
  for (;;) {
    auto now = get_sweep(name, config);  // (after the watch: no change is missed between)
    if (sweep_to_json(now) != was) return now;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return now;
    if (fd < 0) {  // no inotify here: look again in a while
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(200)));
      continue;
    }
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 60'000)));
    char buf[4096];
    while (::read(fd, buf, sizeof buf) > 0) {
    }
  }
}

namespace {
void cancel_sweep_as(const std::string& name, const engine_config& config, bool owner_is_me);
}

void cancel_sweep(const std::string& name, const engine_config& config) {
  cancel_sweep_as(name, config, false);
}

namespace {

// `owner_is_me`: the owner's own signal handler cancels; it records the end.
void cancel_sweep_as(const std::string& name, const engine_config& config, bool owner_is_me) {
  const auto dir = sweep_dir(home_of(config), name);
  (void)get_sweep(name, config);
  std::vector<std::string> open;
  {
    record_lock lock(dir);
    auto s = read_record(dir);
    if (!s) throw error(errc::job_not_found, "sweep " + name + ": no such sweep");
    if (sweep_ended(s->status)) return;
    s->status = "Failed";
    s->reason = "cancelled";
    s->end_time = clock::now();
    // (the owner looks for the marker, not into the record, on every round)
    if (FILE* f = std::fopen((dir / "cancelled").c_str(), "w")) std::fclose(f);
    for (const auto& t : s->trials)
      if (!trial_ended(t.status)) open.push_back(t.name);
    write_record(dir, *s);
  }
  // Every trial's job that has not ended, whatever the record says of it (a
  // Pending trial may have been submitted since), and any job of its array.
  trainer_client client(config);
  std::vector<std::string> cancel;
  for (const auto& j : client.list_jobs())
    if (!is_terminal(j.status) &&
        (j.array == name || std::find(open.begin(), open.end(), j.name) != open.end()))
      cancel.push_back(j.name);
  try {
    client.cancel_jobs(cancel);
  } catch (const error&) {
  }
  // The owner records how its trials ended, and goes: what this returns to
  // is then the sweep as it ended.
  if (owner_is_me) return;
  wait_owner_gone(dir);
  record_lock lock(dir);
  auto s = read_record(dir);
  if (!s) return;
  for (auto& t : s->trials) {
    if (trial_ended(t.status)) continue;
    try {
      auto job = client.get_job(t.name);
      if (is_terminal(job.status)) finish_trial(client, s->request, t, job);
    } catch (const error&) {
      t.status = "Failed";
      t.reason = t.status == "Pending" ? "cancelled before it was submitted" : "its job was deleted";
    }
  }
  write_record(dir, *s);
}

}  // namespace

void delete_sweep(const std::string& name, const engine_config& config) {
  const auto dir = sweep_dir(home_of(config), name);
  auto s = get_sweep(name, config);
  if (!sweep_ended(s.status)) cancel_sweep(name, config);
  wait_owner_gone(dir);  // then nothing submits a trial any more
  trainer_client client(config);
  for (const auto& j : client.list_jobs())
    if (j.array == name || std::any_of(s.trials.begin(), s.trials.end(),
                                       [&](const sweep_trial& t) { return t.name == j.name; })) {
      try {
        client.delete_job(j.name);
      } catch (const error& e) {
        if (e.code() != errc::job_not_found) throw;
      }
    }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec)
    throw error(errc::store_unavailable, "sweep " + name + ": its trials are deleted, but " + dir.string() +
                                             " cannot be removed: " + ec.message());
}

namespace {

// What a sweep supervisor shares with its signal thread.
struct supervisor_state {
  std::mutex m;
  engine_config cfg;
  std::string name;  // once the sweep is recorded
  bool cancel_wanted = false;

  void cancel() {  // (m held)
    try {
      cancel_sweep_as(name, cfg, true);
    } catch (...) {
    }
  }
};

// What optimize() or resume_sweep() wrote on the supervisor's stdin: the
// engine's settings and a new sweep's request, or the name of one to resume.
void read_supervisor_body(engine_config& cfg, std::optional<sweep_request>& request, std::string& name) {
  try {
    auto v = json::parse(read_all(STDIN_FILENO));
    const auto& o = v.as_object();
    if (o.at("protocol").to_number<std::int64_t>() != protocol_version)
      throw error(errc::invalid_argument,
                  "the sweep supervisor and the program that started it are of different tjob versions; "
                  "point engine_config::supervisor (or $TJOB_SUPERVISOR) at the tjob built with the library");
    cfg = engine_config_from_json(o.at("config"));
    if (!o.at("request").is_null()) request = sweep_request_from(o.at("request"));
    name = json::value_to<std::string>(o.at("resume"));
  } catch (const error&) {
    throw;
  } catch (const std::exception& e) {
    throw error(errc::invalid_argument,
                std::string("sweep supervisor: the request is not what optimize writes: ") + e.what());
  }
}

}  // namespace

int sweep_supervisor_main() {
  if (!leave_asker()) return 1;
  // SIGTERM, SIGINT or SIGHUP cancels the sweep (the owner then ends it).
  auto state = std::make_shared<supervisor_state>();
  on_stop_signals([state] {
    std::lock_guard lock(state->m);
    state->cancel_wanted = true;
    if (!state->name.empty()) state->cancel();
  });
  engine_config cfg;
  std::optional<sweep_request> request;
  std::string name;
  try {
    read_supervisor_body(cfg, request, name);
  } catch (const error& e) {
    respond_error(e);
    return 2;
  }
  std::unique_ptr<trainer_client> client;
  bool answered = false;
  try {
    client = std::make_unique<trainer_client>(cfg);
    if (request) name = create_sweep(*client, *request);
    {
      std::lock_guard lock(state->m);
      state->cfg = cfg;
      state->name = name;
    }
    drive_sweep(*client, name, [&] {
      respond({{"name", name}});
      answered = true;
      redirect_output(sweep_dir(client->home(), name) / "owner.log");
      std::lock_guard lock(state->m);
      if (state->cancel_wanted) state->cancel();
    });
  } catch (const error& e) {
    if (answered) {
      std::fprintf(stderr, "tjob sweep owner: %s\n", e.what());
      return 1;
    }
    if (request && !name.empty()) {  // refused before it started: nothing of it stays
      std::error_code ec;
      std::filesystem::remove_all(sweep_dir(client->home(), name), ec);
    }
    respond_error(e);
    return 2;
  } catch (const std::exception& e) {
    if (!answered) respond_error(error(errc::backend_error, e.what()));
    return 1;
  }
  return 0;
}

}  // namespace tjob
