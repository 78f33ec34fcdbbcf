#include "core/messages.hpp"

#include "core/names.hpp"

#include <tjob/error.hpp>

#include <string_view>

namespace tjob::detail {

std::string failure_message(const train_job& job, const std::map<std::string, std::string>& last_logs) {
  std::string msg = "TrainJob " + job.name + " is Failed";
  for (const auto& s : job.steps) {
    if (s.status != job_status::failed) continue;
    msg += "\n  " + s.name + ": status=Failed, exit_code=" +
           (s.exit_code ? std::to_string(*s.exit_code) : std::string("none")) + ", reason=" + s.reason;
  }
  msg += "\n  Last logs:";
  for (const auto& s : job.steps) {
    if (s.status != job_status::failed) continue;
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

}  // namespace tjob::detail
