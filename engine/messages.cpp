#include "engine/messages.hpp"

#include <string_view>

namespace tjob::detail {

std::string failure_message(const train_job& job, const std::map<std::string, std::string>& last_logs) {
  std::string msg = "TrainJob " + job.name + " is Failed";
  for (const auto& s : job.steps) {
    if (s.status != job_status::failed) continue;
    msg += "\n  " + s.name + ": status=Failed, exit_code=" +
           (s.exit_code ? std::to_string(*s.exit_code) : std::string("none")) +
           ", reason=" + s.reason;
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

}  // namespace tjob::detail
