// train_detached and the supervisor it starts (see client.hpp, "Lifetime").
//
// The submitter starts the supervisor program (`<program> __supervise`) in a
// session of its own, writes the request and the engine's settings to its
// stdin as one JSON object, and reads one JSON answer from its stdout: the
// job's name, or the error (code, message, diagnostics). The supervisor then
// owns the job until it ends.
#include "engine/supervise.hpp"

#include <tjob/client.hpp>
#include <tjob/wire.hpp>

#include <boost/json.hpp>

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

namespace tjob {

namespace json = boost::json;

namespace {

// Both sides must read the same fields; an old supervisor refuses a new
// submitter (and the reverse) by this number rather than by a missing field.
// 2: priority, active deadline, dependencies, admission budgets; 3: the retry policy;
// 4: a list of requests (a job array's members, one supervisor for them all), the backend
// and the container backend's settings (a container job's active deadline); 6: each request
// in the job spec's shape, by the one spec codec (tjob/wire.hpp), labels and annotations too
constexpr std::int64_t protocol_version = 6;

// The requests and the engine's settings, as the supervisor reads them: the
// engine's one config codec (tjob/wire.hpp), the backend's options its own.
json::value batch_to_json(const std::vector<train_request>& requests, const engine_config& cfg) {
  json::object o;
  o["protocol"] = protocol_version;
  json::array reqs;
  for (const auto& r : requests) reqs.emplace_back(to_json(r));
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

// What train_detached wrote on the supervisor's stdin: the engine's settings
// and the requests.
void read_batch(engine_config& cfg, std::vector<train_request>& reqs) {
  try {
    auto v = json::parse(detail::read_all(STDIN_FILENO));
    const auto& o = v.as_object();
    config_from_json(o, cfg);
    for (const auto& r : o.at("requests").as_array()) reqs.push_back(request_from_json(r, true));
    if (reqs.empty()) throw std::invalid_argument("no request");
  } catch (const error&) {
    throw;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw error(errc::invalid_argument, "supervisor: the request is not what train_detached writes: " + what);
  }
}

// Owns the jobs until the last has ended (a member deleted early is done); a
// container job without a deadline only until its containers run.
void own_until_ended(trainer_client& client, const backend_capabilities& caps,
                     const std::vector<std::string>& names, const std::vector<train_request>& reqs) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::set<job_status> until{job_status::complete, job_status::failed};
    if (caps.owner_until_started && reqs.at(i).active_deadline.count() == 0)
      until.insert(job_status::running);
    try {
      client.wait_for_job_status(names[i], until, std::chrono::hours(24 * 365 * 10));
    } catch (const error& e) {
      if (e.code() != errc::job_not_found) std::fprintf(stderr, "tjob supervisor: %s\n", e.what());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tjob supervisor: %s\n", e.what());
    }
  }
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
  const std::string program = detail::supervisor_program(config, "train_detached");
  const std::string body = json::serialize(batch_to_json(requests, config));
  auto o = detail::ask_supervisor(program, "__supervise", body, "train_detached");
  std::vector<std::string> names;
  if (auto* n = o.if_contains("names"); n && n->is_array())
    for (const auto& v : n->get_array()) names.push_back(json::value_to<std::string>(v));
  if (names.size() != requests.size())
    throw error(errc::spawn_failed, "train_detached: the supervisor " + program + " answered no job names",
                json::serialize(o));
  return names;
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
  // The supervisor is the grandchild of the program that asked (leave_asker).
  // No thread exists yet, so fork is safe here.
  if (!detail::leave_asker()) return 1;
  // SIGTERM, SIGINT or SIGHUP cancels the jobs (before they have names: as
  // soon as they have them).
  struct shared {
    std::mutex m;
    trainer_client* client = nullptr;  // set while the jobs are named and the client is alive
    std::vector<std::string> names;
    bool cancel_wanted = false;
    void cancel_all() {  // (m held)
      try {
        client->cancel_jobs(names);
      } catch (...) {  // ones that have ended already
      }
    }
  };
  auto state = std::make_shared<shared>();
  detail::on_stop_signals([state] {
    std::lock_guard lock(state->m);
    state->cancel_wanted = true;
    if (state->client) state->cancel_all();
  });

  std::vector<train_request> reqs;
  engine_config cfg;
  std::unique_ptr<trainer_client> client;
  std::vector<std::string> names;
  try {
    read_batch(cfg, reqs);
    client = std::make_unique<trainer_client>(cfg);
    names = train_all(*client, reqs);
  } catch (const error& e) {
    detail::respond_error(e);
    return 2;
  } catch (const std::exception& e) {
    detail::respond_error(error(errc::backend_error, e.what()));
    return 1;
  }
  json::array answer;
  for (const auto& n : names) answer.emplace_back(n);
  detail::respond({{"names", std::move(answer)}});
  // From here on nobody reads our output: the supervisor's own messages go to
  // the first job's directory.
  // (the job's own directory, which its code cannot write; O_NOFOLLOW all the same)
  const auto caps = client->job_backend();
  const auto job_dir = client->home() / (caps.job_files.empty() ? "jobs" : caps.job_files) / names.front();
  detail::redirect_output(job_dir / "supervisor.log");
  {
    std::lock_guard lock(state->m);
    state->client = client.get();
    state->names = names;
    if (state->cancel_wanted) state->cancel_all();
  }
  own_until_ended(*client, caps, names, reqs);
  {
    std::lock_guard lock(state->m);
    state->client = nullptr;
  }
  client.reset();
  return 0;
}

}  // namespace tjob
