// tjob/error.hpp — the engine's error codes and the exception thrown at API edges.
//
// Errors: every failure is a `boost::system::error_code` in `tjob::category()`
// plus a message written for a person (it names the job, the step or the field,
// and says what to do). Where a peer (the OS, SQLite, a child process) said
// something of its own, that text is kept apart in `diagnostics`.
#pragma once

#include <boost/system/error_code.hpp>

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tjob {

enum class errc {
  job_not_found = 1,     ///< no job with that name
  step_not_found,        ///< the job has no such step
  invalid_name,          ///< not an RFC 1035 label of at most 63 characters
  duplicate_name,        ///< a job with that name exists already
  invalid_argument,      ///< a field of the request or call is malformed
  executable_not_found,  ///< the command's program is not on PATH or not executable
  runtime_not_found,     ///< no runtime with that name
  job_failed,            ///< a wait saw the job reach Failed, which was not asked for
  unreachable_status,    ///< a wait saw the job end in a status that was not asked for
  timeout,               ///< a wait ran out of time
  store_unavailable,     ///< $TJOB_HOME or the database cannot be created or opened
  store_corrupt,         ///< the database file is not a valid tjob store
  store_locked,          ///< another process holds the database lock for too long
  spawn_failed,          ///< the OS refused to start the process
  shut_down,             ///< the engine is shutting down
  backend_unavailable,   ///< the daemon or API server cannot be reached, or went away mid-answer
  backend_error,         ///< the daemon or API server refused a request (its message is in the text)
  protocol_error,        ///< a peer's answer is malformed or over a limit
};

const boost::system::error_category& category() noexcept;

inline boost::system::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), category()};
}

/// What API edges throw. `what()` is the full one-line (or, for job failures,
/// multi-line) message; `diagnostics()` is the peer's own text, if any.
class error : public std::runtime_error {
 public:
  error(boost::system::error_code code, std::string message, std::string diagnostics = {});
  const boost::system::error_code& code() const noexcept { return code_; }
  const std::string& diagnostics() const noexcept { return diagnostics_; }

 private:
  boost::system::error_code code_;
  std::string diagnostics_;
};

/// The code's name, as the enum spells it ("job_not_found"): what tjob
/// serve's error objects carry.
const char* to_string(errc e) noexcept;
/// The inverse of to_string; nullopt for a name that is not a code.
std::optional<errc> parse_errc(std::string_view name) noexcept;

/// True for errors caused by what the caller asked for (the CLI exits 2 on them).
bool is_usage_error(const boost::system::error_code& ec) noexcept;

}  // namespace tjob

template <>
struct boost::system::is_error_code_enum<tjob::errc> : std::true_type {};
