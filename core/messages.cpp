#include "core/messages.hpp"

#include "core/names.hpp"

#include <tjob/error.hpp>

#include <sys/resource.h>
#include <algorithm>
#include <cerrno>
#include <string_view>

namespace tjob::detail {

std::string failure_message(const train_job& job, const std::map<std::string, std::string>& last_logs) {
  std::string msg = "TrainJob " + job.name + " is Failed";
  for (const auto& s : job.steps) {
    if (s.status != job_status::failed) continue;
    msg += "\n  " + s.name + ": status=Failed, exit_code=" +
           (s.exit_code ? std::to_string(*s.exit_code) : std::string("none")) + ", reason=" + s.reason;
  }
  // The logs of the steps whose own failure it is: a step the engine stopped
  // because another failed ("stopped: node-1 failed ...") ends in its
  // launcher's SignalException, which would bury the user's traceback
  // (issue 42). It is named, with how to read its log.
  auto stopped = [](const step& s) { return s.reason.rfind("stopped: ", 0) == 0; };
  const bool any_own = std::any_of(job.steps.begin(), job.steps.end(), [&](const step& s) {
    return s.status == job_status::failed && !stopped(s);
  });
  msg += "\n  Last logs:";
  for (const auto& s : job.steps) {
    if (s.status != job_status::failed) continue;
    if (any_own && stopped(s)) {
      msg += "\n    (" + s.name + " was stopped because another step failed: `tjob logs " + job.name +
             " --step " + s.name + "` shows its log)";
      continue;
    }
    auto it = last_logs.find(s.name);
    if (it == last_logs.end()) continue;
    std::string_view text = it->second;
    while (!text.empty()) {
      auto nl = text.find('\n');
      msg += "\n    " + std::string(text.substr(0, std::min<std::size_t>(nl, 500)));
      if (nl == std::string_view::npos) break;
      text.remove_prefix(nl + 1);
    }
  }
  return msg;
}

failure not_found_failure(const std::string& name, const std::string& where, std::string_view list_command) {
  return make_failure(errc::job_not_found, "No TrainJob with name " + quote(name) + " " + where + "; `" +
                                               std::string(list_command) + "` shows the jobs there");
}

void throw_not_found(const std::string& name, const std::string& where, std::string_view list_command) {
  raise(not_found_failure(name, where, list_command));
}

void throw_step_not_found(const std::string& name, const std::string& step,
                          const std::vector<std::string>& steps) {
  std::string known;
  for (const auto& s : steps) known += (known.empty() ? "" : ", ") + s;
  throw error(errc::step_not_found,
              "TrainJob " + quote(name) + " has no step " + quote(step) + "; its steps are: " + known);
}

void throw_attempt_not_found(const std::string& name, const std::string& step, int asked, int attempts) {
  throw error(errc::invalid_argument,
              "TrainJob " + quote(name) + " step " + quote(step) + " has no attempt " +
                  std::to_string(asked) + "; it has had " + std::to_string(attempts) +
                  (attempts == 1 ? " (it was never restarted)" : "; give 1 to " + std::to_string(attempts)));
}

void throw_no_warning(const std::string& name) {
  throw error(errc::invalid_argument,
              "TrainJob " + quote(name) +
                  ": cancel with checkpoint: the job was submitted without a warning signal (--signal, "
                  "train_request::warning), so it has no signal to save on; cancel it without checkpoint");
}

std::string fix_for_errno(int err, const std::string& dir) {
  switch (err) {
    case ENOSPC:
      return "the file system of " + dir +
             " is full (no space left on device): free space there, or set TJOB_HOME to a directory on "
             "another file system";
    case EDQUOT:
      return "your disk quota on the file system of " + dir +
             " is used up: free space there, or set TJOB_HOME to a directory on another file system";
    case EMFILE: {
      rlimit lim{};
      std::string limit =
          ::getrlimit(RLIMIT_NOFILE, &lim) == 0 ? " (" + std::to_string(lim.rlim_cur) + ")" : "";
      return "this process has as many files open as it may" + limit +
             ": raise the limit (ulimit -n), or run fewer jobs at once";
    }
    case ENFILE:
      return "the system has as many files open as it allows: close some, or raise fs.file-max";
    case ENOMEM:
      return "tjob ran out of memory: free some, or raise the limit on its address space (ulimit -v)";
    case EAGAIN:
      return "the OS would not give tjob another thread or process: raise the limits on processes (ulimit "
             "-u) and memory (ulimit -v), or run fewer jobs at once";
    case EROFS:
      return dir + " is on a read-only file system: set TJOB_HOME to a writable directory";
    default:
      return "check that " + dir + " is a writable directory, or set TJOB_HOME to one";
  }
}

}  // namespace tjob::detail
