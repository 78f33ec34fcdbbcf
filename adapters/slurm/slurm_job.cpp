#include "adapters/slurm/slurm_job.hpp"

#include "adapters/process/process_adapter.hpp"
#include "core/json_fields.hpp"
#include "core/retry.hpp"
#include "core/spec_json.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <sstream>

namespace tjob::slurm {

namespace json = boost::json;

namespace {

std::int64_t ns_of(clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

json::object to_object(const std::map<std::string, std::string>& m) {
  json::object o;
  for (const auto& [k, v] : m) o[k] = v;
  return o;
}

std::map<std::string, std::string> from_object(const json::object* o) {
  std::map<std::string, std::string> m;
  if (o)
    for (const auto& [k, v] : *o)
      if (v.is_string()) m[std::string(k)] = std::string(v.as_string());
  return m;
}

// squeue's time (SLURM_TIME_FORMAT=%s): seconds, or N/A, Unknown, None.
std::optional<clock::time_point> queue_time(std::string_view s) {
  std::int64_t secs = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), secs);
  if (ec != std::errc() || p != s.data() + s.size() || secs <= 0) return std::nullopt;
  return clock::time_point(std::chrono::seconds(secs));
}

bool is_pending_state(std::string_view s) {
  return s == "PENDING" || s == "REQUEUED" || s == "REQUEUE_HOLD" || s == "REQUEUE_FED" || s == "RESV_DEL_HOLD" ||
         s == "CONFIGURING" || s == "POWER_UP_NODE";
}

std::string exit_reason(int code) {
  process::exit_status st{code, code > 128 && code < 160 ? code - 128 : 0};
  return process::describe(st);
}

std::string step_name(std::size_t i) { return "node-" + std::to_string(i); }

// The node whose failure ended the job: the first to exit non-zero.
std::optional<std::size_t> first_failed(const job_files& f) {
  std::optional<std::size_t> first;
  for (std::size_t i = 0; i < f.nodes.size(); ++i) {
    const auto& n = f.nodes[i];
    if (!n.exit_code || *n.exit_code == 0) continue;
    if (!first || (n.exited && f.nodes[*first].exited && *n.exited < *f.nodes[*first].exited)) first = i;
  }
  return first;
}

// How the job stands: its status and reason, before the steps.
struct verdict {
  job_status status = job_status::created;
  std::string reason;
  std::optional<clock::time_point> end;
};

// A node that ends after a cancel was asked for ends as the cancel's,
// whatever its exit (it may have saved and returned at a cancel with
// checkpoint), as on the local backend.
bool ended_by_cancel(const job_files& f, const node_files& n) {
  return f.cancel_requested && n.exited && *n.exited >= *f.cancel_requested;
}

verdict judge(const job_files& f, const std::optional<queue_row>& row, bool queue_known) {
  verdict v;
  if (!f.never.empty()) return {job_status::failed, "DependencyNeverSatisfied", f.never_at};
  if (f.slurm_id.empty()) return {job_status::created, "Submitting", std::nullopt};
  bool ended = row ? is_ended_state(row->state) : queue_known;  // unlisted: Slurm forgot it
  if (!ended) {
    bool started = std::any_of(f.nodes.begin(), f.nodes.end(), [](const node_files& n) { return n.started; });
    // Between two attempts (the backoff, the queue, the batch script's
    // start before srun) a job is Created, Restarting, as on the other backends.
    if (!started && !f.restarts.empty()) return {job_status::created, "Restarting", std::nullopt};
    if (!row)  // squeue did not answer: the files say what they can
      return {started ? job_status::running : job_status::created, started ? "" : "Queued", std::nullopt};
    if (is_pending_state(row->state)) {
      // Nodes that started before: Slurm requeued the job (its next run
      // records the restart).
      if (started) return {job_status::created, "Restarting", std::nullopt};
      std::string why = row->reason.empty() || row->reason == "None" ? "Queued" : row->reason;
      return {job_status::created, why, std::nullopt};
    }
    return {job_status::running, "", std::nullopt};
  }
  v.status = job_status::failed;
  v.end = row && row->end ? row->end : f.ended;
  if (row) {
    v.reason = reason_of_state(row->state, row->reason, f.cancel_requested.has_value());
    if (!v.reason.empty()) return v;
  } else if (!f.end_code) {
    v.reason = f.cancel_requested ? "cancelled"
                                  : "lost: Slurm no longer knows job " + f.slurm_id +
                                        " and it left no end record (it ended past the cluster's MinJobAge "
                                        "without accounting, or its batch host failed); see its logs";
    v.end = f.ended;
    return v;
  }
  bool all_ok = !f.nodes.empty() && std::all_of(f.nodes.begin(), f.nodes.end(), [](const node_files& n) {
    return n.exit_code && *n.exit_code == 0;
  });
  bool said_ok = row ? row->state == "COMPLETED" : f.end_code == 0;
  if (all_ok && said_ok && !std::any_of(f.nodes.begin(), f.nodes.end(), [&](const node_files& n) {
        return ended_by_cancel(f, n);
      })) {
    v.status = job_status::complete;
    return v;
  }
  if (f.cancel_requested) {
    v.reason = "cancelled";
  } else if (f.end_what == "requeued") {
    v.reason = "lost: Slurm requeued the job (a node failed, or it was preempted) with no restarts left (" +
               std::to_string(f.restarts.size()) + " restarts of " +
               std::to_string(f.record.retry.max_restarts) + ")";
  } else if (f.end_what == "setup" && f.end_code) {
    v.reason = "setup failed (" + exit_reason(*f.end_code) + "); see the log of node-0";
  } else if (auto bad = first_failed(f)) {
    v.reason = exit_reason(*f.nodes[*bad].exit_code);
  } else if (!f.end_code &&
             std::none_of(f.nodes.begin(), f.nodes.end(), [](const node_files& n) { return n.started; })) {
    // Nothing of the job's directory was written on the nodes: most often the
    // directory is not on the nodes at all.
    v.reason = "the batch script failed before any node started" +
               (row ? " (Slurm: " + row->state + ", " + row->reason + ")" : "") +
               "; the job's directory must be on a file system that every node mounts at the same path "
               "(the backend's shared_dir, --shared-dir)";
  } else {
    v.reason = "the batch script failed" + (row ? " (Slurm: " + row->state + ", " + row->reason + ")" : "") +
               "; see the log of node-0";
  }
  return v;
}

}  // namespace

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

clock::time_point from_ns(std::int64_t ns) {
  return clock::time_point(std::chrono::duration_cast<clock::duration>(std::chrono::nanoseconds(ns)));
}

json::object to_json(const job_record& r) {
  json::object o{{"name", r.name},
                 {"runtime", r.runtime},
                 {"num_nodes", r.num_nodes},
                 {"created_ns", ns_of(r.created)},
                 {"labels", to_object(r.labels)},
                 {"annotations", to_object(r.annotations)},
                 {"array", r.array},
                 {"retry", detail::to_json(r.retry)}};
  if (r.warning) o["warning"] = detail::to_json(*r.warning);
  return o;
}

std::optional<job_record> record_from_json(std::string_view text) {
  boost::system::error_code ec;
  auto v = json::parse(text, ec);
  if (ec || !v.is_object()) return std::nullopt;
  const auto& o = v.as_object();
  job_record r;
  r.name = detail::str_of(o, "name");
  if (r.name.empty()) return std::nullopt;
  r.runtime = detail::str_of(o, "runtime");
  if (auto* n = o.if_contains("num_nodes"); n && n->is_int64()) r.num_nodes = static_cast<int>(n->as_int64());
  if (r.num_nodes < 1 || r.num_nodes > 64) return std::nullopt;
  if (auto* c = o.if_contains("created_ns"); c && c->is_int64()) r.created = from_ns(c->as_int64());
  r.labels = from_object(detail::obj_of(o, "labels"));
  r.annotations = from_object(detail::obj_of(o, "annotations"));
  r.array = detail::str_of(o, "array");
  try {
    if (auto* rp = o.if_contains("retry")) r.retry = detail::retry_from_json(*rp);
    if (auto* w = o.if_contains("warning")) r.warning = detail::warning_from_json(*w);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return r;
}

std::string comment_of(const job_record& r, const std::string& shared_dir) {
  json::object t{{"dir", shared_dir}, {"name", r.name}, {"runtime", r.runtime}};
  if (!r.labels.empty()) t["labels"] = to_object(r.labels);
  if (!r.array.empty()) t["array"] = r.array;
  return json::serialize(json::object{{"tjob", std::move(t)}});
}

std::optional<std::string> name_in_comment(std::string_view comment, const std::string& shared_dir) {
  if (!comment.starts_with("{\"tjob\"")) return std::nullopt;
  boost::system::error_code ec;
  auto v = json::parse(comment, ec);
  if (ec || !v.is_object()) return std::nullopt;
  auto* t = detail::obj_of(v.as_object(), "tjob");
  if (!t || detail::str_of(*t, "dir") != shared_dir) return std::nullopt;
  auto name = detail::str_of(*t, "name");
  if (name.empty()) return std::nullopt;
  return name;
}

std::vector<queue_row> parse_queue(std::string_view out) {
  std::vector<queue_row> rows;
  while (!out.empty()) {
    auto nl = out.find('\n');
    auto line = out.substr(0, nl);
    out = nl == std::string_view::npos ? std::string_view() : out.substr(nl + 1);
    std::vector<std::string_view> f;
    for (int i = 0; i < 7; ++i) {
      auto bar = line.find('|');
      if (bar == std::string_view::npos) break;
      f.push_back(line.substr(0, bar));
      line.remove_prefix(bar + 1);
    }
    if (f.size() != 7 || f[0].empty()) continue;
    queue_row r;
    r.id = f[0];
    r.state = f[1];
    r.reason = f[2];
    r.start = queue_time(f[3]);
    r.end = queue_time(f[4]);
    r.submit = queue_time(f[5]);
    r.nodes = f[6];
    r.comment = line;
    rows.push_back(std::move(r));
  }
  return rows;
}

std::vector<restart_record> parse_restarts(const std::string& text) {
  std::vector<restart_record> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line) && !in.eof()) {
    std::istringstream l(line);
    restart_record r;
    std::string code, node;
    double wait = 0;
    std::int64_t ns = 0;
    if (!(l >> r.attempt >> code >> node >> wait >> ns) || r.attempt != static_cast<int>(out.size()) + 1)
      break;
    if (code != "-") r.exit_code = std::atoi(code.c_str());
    if (node != "-") r.node = node;
    r.wait = std::chrono::milliseconds(static_cast<std::int64_t>(wait * 1000 + 0.5));
    r.at = from_ns(ns);
    out.push_back(std::move(r));
  }
  return out;
}

bool is_ended_state(std::string_view s) {
  return s == "COMPLETED" || s == "FAILED" || s == "CANCELLED" || s == "TIMEOUT" || s == "DEADLINE" ||
         s == "OUT_OF_MEMORY" || s == "NODE_FAIL" || s == "BOOT_FAIL" || s == "PREEMPTED" || s == "SPECIAL_EXIT" ||
         s == "REVOKED";
}

std::string reason_of_state(std::string_view state, std::string_view reason, bool cancel_requested) {
  if (state == "COMPLETED") return {};
  if (cancel_requested) return "cancelled";
  if (state == "TIMEOUT" || state == "DEADLINE") return "DeadlineExceeded";
  if (state == "CANCELLED")
    return reason.find("DependencyNeverSatisfied") != std::string_view::npos
               ? "DependencyNeverSatisfied"
               : "cancelled outside tjob (scancel, or the cluster's administrator)";
  if (state == "OUT_OF_MEMORY") return "OOMKilled";
  if (state == "NODE_FAIL") return "lost: a node of the job failed (Slurm: NODE_FAIL)";
  if (state == "BOOT_FAIL") return "lost: a node of the job could not boot (Slurm: BOOT_FAIL)";
  if (state == "PREEMPTED") return "preempted (Slurm: PREEMPTED)";
  return {};
}

train_job fold(const job_files& f, const std::optional<queue_row>& row, bool queue_known) {
  train_job j;
  j.name = f.record.name;
  j.runtime = f.record.runtime;
  j.num_nodes = f.record.num_nodes;
  j.creation_timestamp = f.record.created;
  j.array = f.record.array;
  auto v = judge(f, row, queue_known);
  j.status = v.status;
  j.reason = v.reason;
  auto bad = first_failed(f);
  std::optional<clock::time_point> first_start, last_exit;
  for (std::size_t i = 0; i < static_cast<std::size_t>(f.record.num_nodes); ++i) {
    step s;
    s.name = step_name(i);
    s.attempt = f.attempt();
    // Restarting: what the nodes left is an attempt that is over.
    node_files n = i < f.nodes.size() && v.reason != "Restarting" ? f.nodes[i] : node_files{};
    if (n.started && (!first_start || *n.started < *first_start)) first_start = n.started;
    if (n.exited && (!last_exit || *n.exited > *last_exit)) last_exit = n.exited;
    if (n.exit_code) {
      s.exit_code = n.exit_code;
      s.status = *n.exit_code == 0 && !ended_by_cancel(f, n) ? job_status::complete : job_status::failed;
      if (*n.exit_code != 0) s.reason = exit_reason(*n.exit_code);
      if (s.status == job_status::failed && f.cancel_requested) s.reason = "cancelled";
    } else if (is_terminal(v.status)) {
      s.status = j.status == job_status::complete ? job_status::complete : job_status::failed;
      if (s.status == job_status::failed)
        s.reason = bad && !f.cancel_requested ? "stopped: " + step_name(*bad) + " failed" : v.reason;
    } else {
      s.status = n.started ? job_status::running : job_status::created;
    }
    j.steps.push_back(std::move(s));
  }
  // Slurm's times are whole seconds: none is put before what tjob saw itself
  // (the job's creation, a node's exit) to the nanosecond.
  if (v.status != job_status::created) {
    if (row && row->start && !is_pending_state(row->state))
      j.start_time = std::max(*row->start, f.record.created);
    else
      j.start_time = first_start;
  }
  if (is_terminal(v.status)) {
    j.end_time = v.end ? v.end : last_exit;
    if (!j.end_time) j.end_time = f.cancel_requested ? f.cancel_requested : f.never_at;
    if (j.end_time && last_exit && *j.end_time < *last_exit) j.end_time = last_exit;
    if (j.start_time && j.end_time && *j.end_time < *j.start_time) j.end_time = j.start_time;
  }
  if (f.progress) {
    j.progress_percent = f.progress->percent;
    j.estimated_remaining_seconds = f.progress->remaining;
    j.metrics = f.progress->metrics;
    j.progress_updated = f.progress_at;
  }
  return j;
}

std::vector<event> events_of(const job_files& f, const std::optional<queue_row>& row, bool queue_known) {
  auto job = fold(f, row, queue_known);
  std::vector<event> out;
  auto add = [&](clock::time_point t, std::string step, std::string reason, std::string message) {
    event e;
    e.time = t;
    e.step = std::move(step);
    e.reason = std::move(reason);
    e.message = std::move(message);
    out.push_back(std::move(e));
  };
  add(f.record.created, "", "Created",
      (f.slurm_id.empty() ? "not submitted" : "submitted to Slurm as job " + f.slurm_id) +
          (f.record.retry.max_restarts > 0 ? " (restarts: " + detail::describe_retry(f.record.retry) + ")"
                                           : ""));
  if (job.status == job_status::created && !job.reason.empty() && job.reason != "Restarting")
    add(f.record.created, "", "Queued", "Slurm: " + job.reason);
  if (job.start_time) add(*job.start_time, "", "Started", row && !row->nodes.empty() ? "on " + row->nodes : "");
  // The node blamed for the job's end says why it was not restarted.
  std::optional<std::size_t> blamed;
  std::string not_restarted;
  if (job.status == job_status::failed && !f.cancel_requested && f.record.retry.max_restarts > 0)
    if (blamed = first_failed(f); blamed)
      not_restarted = detail::decide_retry(f.record.retry, f.attempt(), *f.nodes[*blamed].exit_code).why_not;
  auto node_events = [&](const std::vector<node_files>& nodes, bool current) {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const auto& n = nodes[i];
      if (n.started) add(*n.started, step_name(i), "Started", "");
      if (!n.exit_code || !n.exited) continue;
      auto why = exit_reason(*n.exit_code);
      if (current && blamed == i && !not_restarted.empty()) why += "; not restarted: " + not_restarted;
      add(*n.exited, step_name(i), "Exited", why);
    }
  };
  for (const auto& nodes : f.earlier) node_events(nodes, false);
  node_events(f.nodes, true);
  const int attempts = f.record.retry.max_restarts + 1;
  for (const auto& r : f.restarts) {
    std::string why = r.exit_code ? "(exit code " + std::to_string(*r.exit_code) + " on " + r.node + ")"
                                  : "(Slurm requeued the job: a node failed, or it was preempted)";
    std::string next =
        r.exit_code ? "; attempt " + std::to_string(r.attempt + 1) + " starts in " + detail::wait_text(r.wait)
                    : "; attempt " + std::to_string(r.attempt + 1) + " runs when Slurm starts it again";
    for (int i = 0; i < f.record.num_nodes; ++i)
      add(r.at, step_name(static_cast<std::size_t>(i)), "Restarting",
          "attempt " + std::to_string(r.attempt) + " of " + std::to_string(attempts) + " failed " + why +
              next);
  }
  if (f.cancel_requested) add(*f.cancel_requested, "", "CancelRequested", "");
  // The end's cause when Slurm or tjob ended it (the nodes' own exits are above).
  if (is_terminal(job.status) && job.end_time) {
    const auto& r = job.reason;
    if (r == "cancelled" || r.starts_with("cancelled outside") || r == "DeadlineExceeded" || r.starts_with("preempted"))
      add(*job.end_time, "", "Cancelled", r);
    else if (r.starts_with("lost") || r == "OOMKilled")
      add(*job.end_time, "", "Lost", r);
    else if (r == "DependencyNeverSatisfied")
      add(*job.end_time, "", "Waiting", f.never.empty() ? r : f.never);
  }
  std::stable_sort(out.begin(), out.end(), [](const event& a, const event& b) { return a.time < b.time; });
  for (std::size_t i = 0; i < out.size(); ++i) out[i].seq = static_cast<std::int64_t>(i + 1);
  return out;
}

}  // namespace tjob::slurm
