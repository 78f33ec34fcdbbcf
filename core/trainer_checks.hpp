// The checks every backend makes of a trainer before anything is created,
// each failure a tjob::error(invalid_argument) that names the job (`who`),
// the field and the fix.
#pragma once

#include <tjob/types.hpp>

#include "core/names.hpp"
#include "core/runtimes.hpp"

#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace tjob::detail {

bool has_nul(std::string_view s);
/// Env names are non-empty without '=' or NUL; values without NUL.
void check_env(const std::string& who, const std::map<std::string, std::string>& env);

/// The checks of a request every backend makes first. Fills in the name
/// (generated when empty) and the runtime (torch-distributed when empty);
/// checks num_nodes (1 to 64; several need a torch runtime for a Python
/// trainer). Returns the runtime, from `catalog`.
const runtime& check_request(train_request& req, const runtime_catalog& catalog);
/// "TrainJob 'name'", the prefix of every message about a job.
inline std::string who(const std::string& name) { return "TrainJob " + quote(name); }

/// The trainer's code_dir: after the engine's check, the snapshot of the
/// directory sent with the job (engine/snapshot.hpp); empty: none.
inline const std::string& code_dir_of(const train_request& r) {
  if (const auto* c = std::get_if<command_trainer>(&r.job_trainer)) return c->code_dir;
  return std::get<python_trainer>(r.job_trainer).code_dir;
}

/// A command trainer's command (not empty, no NUL) and env.
void check_command(const std::string& who, const command_trainer& ct);

/// A TCP port nobody holds now, for a torch rendezvous, so that concurrent
/// jobs do not collide on 29500. It is drawn at random from
/// rendezvous_port_range(), outside the kernel's ephemeral range: a port the
/// kernel picked for us and we let go could be handed to another program's
/// bind(0) or connect() in the seconds before torchrun binds it (it was, in
/// CI: "Address already in use").
int free_port();

/// The ports free_port() draws from: below the kernel's ephemeral range
/// (ip_local_port_range) where it leaves room, else above it; {0, 0} when
/// neither does, and free_port() falls back to a port the kernel picks.
std::pair<int, int> rendezvous_port_range();

}  // namespace tjob::detail
