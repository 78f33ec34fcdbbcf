// See job_query.hpp.
#include "cli/job_query.hpp"

#include "cli/job_request.hpp"

#include <algorithm>

namespace tjob::cli {

void each_job(trainer_client& client, const std::string& n,
              const std::function<void(const std::string&)>& f) {
  try {
    f(n);
  } catch (const tjob::error& e) {
    if (e.code() != errc::job_not_found) throw;
    std::vector<std::string> members;
    for (const auto& j : client.list_jobs())
      if (j.array == n) members.push_back(j.name);
    if (members.empty()) throw;
    for (const auto& m : members) f(m);
  }
}

std::vector<runtime> runtimes_named(std::vector<runtime> all, const std::vector<std::string>& names) {
  if (names.empty()) return all;
  std::vector<runtime> shown;
  for (const auto& n : names) {
    auto it = std::find_if(all.begin(), all.end(), [&](const runtime& r) { return r.name == n; });
    if (it == all.end()) {
      std::string known;
      for (const auto& r : all) known += (known.empty() ? "" : ", ") + r.name;
      throw usage_error("runtimes: there is no runtime '" + n + "'; the runtimes are " + known);
    }
    shown.push_back(*it);
  }
  return shown;
}

}  // namespace tjob::cli
