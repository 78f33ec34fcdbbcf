// What train_detached and optimize share: starting a supervising process
// (`<tjob> __supervise` or `<tjob> __sweep`) in a session of its own, handing
// it one JSON request on stdin and reading its one JSON answer; and, on the
// supervisor's side, leaving the asker behind.
#pragma once

#include <tjob/engine.hpp>
#include <tjob/error.hpp>

#include <boost/json/object.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace tjob::detail {

/// The program to start: the config's, $TJOB_SUPERVISOR, the tjob built with
/// this library (its build tree, then where it is installed), then tjob on
/// PATH. Throws executable_not_found. `what` names the caller in messages.
std::string supervisor_program(const engine_config& cfg, const std::string& what);

/// Starts `program mode` in a session of its own, writes `body` to its stdin
/// and returns its answer. An answer with "error" is thrown as the
/// tjob::error it describes; no answer at all is spawn_failed.
boost::json::object ask_supervisor(const std::string& program, const char* mode, const std::string& body,
                                   const std::string& what);

/// In the supervisor, before any thread exists: forks, the parent (the
/// asker's child) ends at once and the grandchild returns, belonging to init
/// (or a subreaper) from then on, so a long-lived asker collects no zombies.
/// SIGPIPE is ignored from then on. Returns false (having answered) when
/// the fork fails.
bool leave_asker();

/// In the supervisor, before any other thread exists: SIGTERM, SIGINT and
/// SIGHUP are blocked in every thread but one of their own, which calls
/// `stop` for each (the caller's way to cancel what it owns). The thread
/// lives as long as the process: what `stop` uses must too (on the heap).
void on_stop_signals(std::function<void()> stop);

std::string read_all(int fd);
/// One JSON line on stdout: the answer.
void respond(const boost::json::object& o);
void respond_error(const error& e);
/// From here on nobody reads the supervisor's output: stdin from /dev/null,
/// stdout and stderr appended to `log` (O_NOFOLLOW; /dev/null when it cannot
/// be opened).
void redirect_output(const std::filesystem::path& log);

}  // namespace tjob::detail
