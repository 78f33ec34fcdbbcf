// Messages every backend words the same way.
#pragma once

#include "core/outcome.hpp"

#include <tjob/backends.hpp>
#include <tjob/types.hpp>

#include <map>
#include <string>
#include <vector>

namespace tjob::detail {

/// Kubeflow's "TrainJob <n> is Failed" with each failed step's status, exit
/// code and reason, then "Last logs:" with `last_logs[step]` (the step's last
/// lines), each line indented and cut at 500 bytes.
std::string failure_message(const train_job& job, const std::map<std::string, std::string>& last_logs);

/// job_not_found: "No TrainJob with name 'n' <where>; `tjob list [--backend
/// b]` shows the jobs there". `where` says where the backend looked ("in
/// /home/u/.local/state/tjob", "on the Docker daemon at ...").
failure not_found_failure(const std::string& name, const std::string& where, std::string_view list_command);
/// Throws not_found_failure's error.
[[noreturn]] void throw_not_found(const std::string& name, const std::string& where, std::string_view list_command);

/// step_not_found, listing the steps the job has.
[[noreturn]] void throw_step_not_found(const std::string& name, const std::string& step,
                                       const std::vector<std::string>& steps);
/// A log's attempt past the step's `attempts` (log_options::attempt).
[[noreturn]] void throw_attempt_not_found(const std::string& name, const std::string& step, int asked,
                                          int attempts);
/// A cancel with checkpoint of a job made without a warning signal.
[[noreturn]] void throw_no_warning(const std::string& name);

/// What to do about a file operation under `dir` (TJOB_HOME, its jobs/)
/// that failed with `err` (an errno), its cause first: a full disk, too many
/// open files and no memory each get their own words, never the same
/// "check that it is writable" (issue 43).
std::string fix_for_errno(int err, const std::string& dir);

}  // namespace tjob::detail
