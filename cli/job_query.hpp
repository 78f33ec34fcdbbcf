// What the query commands do through a client that does not depend on the
// CLI's options: names that stand for an array's members, runtimes by name.
#pragma once

#include <tjob/client.hpp>

#include <functional>
#include <string>
#include <vector>

namespace tjob::cli {

/// A name that is no job but a job array's stands for its members (get,
/// wait, cancel, delete): `f` is done to the job, and when there is no such
/// job, to each member of the array of that name; with neither, the job's
/// not-found error stands.
void each_job(trainer_client& client, const std::string& n, const std::function<void(const std::string&)>& f);

/// `tjob runtimes NAME...`: those of `all` named, in the order asked; every
/// one for no name. An unknown name is refused (usage_error), naming those
/// there are.
std::vector<runtime> runtimes_named(std::vector<runtime> all, const std::vector<std::string>& names);

}  // namespace tjob::cli
