// Running a short command to its end and reading what it printed (sbatch,
// squeue, scancel): stdout and stderr apart, each bounded, under a time
// limit, on the executor (no thread waits).
#pragma once

#include "adapters/process/process_adapter.hpp"

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace tjob::process {

struct run_result {
  exit_status status;
  std::string out, err;
  bool timed_out = false;  ///< it was killed at the time limit
};

/// Runs `argv` (argv[0] found on PATH) with `env` over `inherited` (as
/// `environ`; null: this process's environment); stdout and stderr are kept
/// up to `max_bytes` each. A child
/// still running at `timeout` is killed (its process group), and
/// `timed_out` says so. A program that cannot be started is a failure.
boost::asio::awaitable<detail::outcome<run_result>> run(boost::asio::any_io_executor ex,
                                                        std::vector<std::string> argv,
                                                        std::vector<std::string> env,
                                                        std::chrono::milliseconds timeout,
                                                        std::size_t max_bytes = 64u << 20,
                                                        char* const* inherited = nullptr);

}  // namespace tjob::process
