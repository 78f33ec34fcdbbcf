// Progress reports of container jobs: the endpoint (adapters/progress) of
// the process that made a job's containers, and what it keeps in the job's
// state (job_dir.hpp: never where the job can write), where every process
// reads it: progress.json (the latest, replaced whole) and progress.jsonl
// (one line per Progress event). The job reads its token and the CA from its
// inputs, bound read-only at /workspace/.tjob.
//
// Only jobs with host networking report: the endpoint listens on the host's
// loopback, which a container on the job network or on none cannot reach
// (docs/progress.md).
#include "adapters/container/container_impl.hpp"

#include "core/json_fields.hpp"
#include "core/progress.hpp"

#include <spdlog/spdlog.h>
#include <boost/json.hpp>

#include <fcntl.h>
#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace tjob::container {

namespace {

// Where a job's code finds the helper package (bound read-only).
constexpr const char* helper_mount = "/opt/tjob/python";
constexpr const char* token_file = "progress-token";
constexpr const char* ca_file = "progress-ca.crt";
constexpr const char* latest_file = "progress.json";
constexpr const char* events_file = "progress.jsonl";

std::string read_whole(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A report as a line of progress.jsonl and as progress.json: its fields and when.
std::string stamped(const detail::progress_report& r, std::int64_t ms) {
  auto o = detail::progress_object(r);
  o["time_ms"] = ms;
  return boost::json::serialize(o);
}

std::int64_t time_of(const boost::json::object& o) {
  auto* t = o.if_contains("time_ms");
  return t && t->is_int64() ? t->as_int64() : 0;
}

}  // namespace

void backend::impl::open_progress(const std::string& job, node_program& p) {
  if (!progress.started() && progress_off.empty()) {
    // (once per process: a few small files, and the home's CA the first time)
    try {
      auto files = progress::home_tls(ctx.home / "progress");
      progress_helper = progress::python_helper(ctx.home / "progress").string();
      progress.start(files);
      progress_ca = read_whole(files.ca_cert);
    } catch (const std::exception& e) {
      progress_off = e.what();
      ctx.log->warn("container jobs of this process cannot report progress: {}", progress_off);
    }
  }
  if (!progress.started()) return;
  const auto token = progress::new_token();
  write_file(inputs_of(job) / token_file, token);
  write_file(inputs_of(job) / ca_file, progress_ca);
  if (auto d = state(job)) {
    d->remove(latest_file);
    d->remove(events_file);
  }
  auto url = progress.add(job, token,
                          [w = weak_from_this()](std::string name, detail::progress_report r, bool record) {
                            return take_report(w, std::move(name), std::move(r), record);
                          });
  const std::string in_job = std::string(inputs_mount) + "/";
  for (auto& [k, v] : progress::job_environment(url, in_job + ca_file, in_job + token_file))
    p.env.emplace(k, v);  // (the job's own settings win)
  std::string base = p.env.count("PYTHONPATH") ? p.env["PYTHONPATH"] : p.image_pythonpath;
  p.env["PYTHONPATH"] = base.empty() ? helper_mount : base + ":" + helper_mount;
  p.volumes.push_back(progress_helper + ":" + helper_mount + ":ro");
}

// A report is taken only while the job runs: the daemon says whether it does
// (its containers; a Podman node may have exited with a restart to come).
asio::awaitable<std::string> backend::impl::take_report(std::weak_ptr<impl> w, std::string job,
                                                        detail::progress_report r, bool record) {
  auto self = w.lock();
  if (!self || self->stopping) co_return "the engine has stopped";
  auto found = co_await self->find(job);
  if (!found) co_return "the job is not found: " + found.error().message;
  if (is_terminal(found->status))
    co_return "the job has ended (" + std::string(to_string(found->status)) + ")";
  co_return self->take_progress(job, r, record);
}

std::string backend::impl::take_progress(const std::string& job, const detail::progress_report& r,
                                         bool record) {
  auto d = state(job);
  if (!d) return "the job has no directory here";
  if (d->exists("cancelled")) return "the job was cancelled";
  const auto line = stamped(r, wall_ms());
  d->replace(latest_file, line);
  if (record) d->append(events_file, line + "\n");
  ++generation[job];
  waiters.notify_all();
  return {};
}

/// The job's latest report (from its state), into `j`.
void read_progress(const job_dir& state, train_job& j) {
  auto text = state.read(latest_file);
  if (text.empty()) return;
  boost::system::error_code ec;
  auto v = boost::json::parse(text, ec);
  if (ec || !v.is_object()) return;
  detail::apply_progress(j, detail::progress_from_json(v.as_object()),
                         clock::time_point(std::chrono::milliseconds(time_of(v.as_object()))));
}

/// The job's Progress events (from its state), added to `out`.
void read_progress_events(const job_dir& state, std::vector<event>& out) {
  std::istringstream in(state.read(events_file));
  std::string line;
  while (std::getline(in, line)) {
    boost::system::error_code ec;
    auto v = boost::json::parse(line, ec);
    if (ec || !v.is_object()) continue;  // (a line cut short by a crash)
    auto r = detail::progress_from_json(v.as_object());
    event e;
    e.time = clock::time_point(std::chrono::milliseconds(time_of(v.as_object())));
    e.reason = "Progress";
    e.message = detail::progress_message(r);
    detail::apply_progress(e, r);
    out.push_back(std::move(e));
  }
}

}  // namespace tjob::container
