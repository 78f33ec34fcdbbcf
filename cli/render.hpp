// How the CLI shows jobs, events and runtimes: tables for people, JSON and
// YAML for programs.
#pragma once

#include <tjob/types.hpp>
#include <tjob/wire.hpp>

#include <boost/json/value.hpp>

#include <set>
#include <string>
#include <vector>

namespace tjob::cli {

/// table: for people; wide: the table with more columns (jobs); name: one
/// name per line (for `xargs`); json and yaml: the same shape, for programs.
enum class output_format { table, wide, name, json, yaml };

using tjob::to_json;  // tjob/wire.hpp: one JSON shape for the CLI and tjob serve

/// `-o FORMAT`; a usage_error naming the formats for any other.
output_format parse_format(const std::string& s);
/// `--status LIST`: comma-separated statuses, any case; a usage_error for any other.
std::set<job_status> parse_statuses(const std::string& list);

/// RFC 3339, UTC, millisecond precision.
std::string format_time(clock::time_point t);
/// "5s", "3m", "2h", "4d", as kubectl.
std::string format_age(clock::time_point t, clock::time_point now);
/// A duration as "850ms", "42s", "3m12s", "5h3m", "2d4h".
std::string format_duration(std::chrono::milliseconds d);

std::string render_jobs(const std::vector<train_job>& jobs, output_format f);
std::string render_job(const train_job& job, output_format f);
/// `get` of one or more jobs: one as render_job; several as a list (JSON,
/// YAML) or one table after the other.
std::string render_job_list(const std::vector<train_job>& jobs, output_format f);
std::string render_events(const std::vector<event>& events, output_format f);
std::string render_runtimes(const std::vector<runtime>& runtimes, output_format f);
std::string render_queue(const std::vector<queue_entry>& entries, output_format f);
/// `tjob doctor`: the store, sound or its problems (one per line), then what they mean.
std::string render_store_check(const store_check& c);
std::string render_venv_cache(const std::vector<venv_cache_entry>& entries, output_format f);

/// JSON value as YAML (block style).
std::string to_yaml(const boost::json::value& v);

}  // namespace tjob::cli
