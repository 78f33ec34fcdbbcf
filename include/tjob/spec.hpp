// tjob/spec.hpp — trainers as JSON text: how the store keeps a job's spec,
// how `tjob train` hands a request to its supervising process, and what a
// service or a script may send; and the members of a job array.
//
// Threading: pure functions.
// Errors: trainer_from_json throws tjob::error (invalid_argument) naming
//   what is wrong with the text.
#pragma once

#include <tjob/types.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tjob {

/// {"kind":"command","command":[...],"env":{...},"working_dir":"..."} or
/// {"kind":"python","source":...,"function":...,...}.
std::string trainer_to_json(const trainer& t);
/// The inverse of trainer_to_json.
trainer trainer_from_json(std::string_view text);

/// A job array's members as Slurm's `--array` gives them: indices (ranges
/// `0-99`, lists `1,3,5`, steps `0-15:4`, mixed), and after `%` the most that
/// run at once (0: no limit of its own).
struct array_spec {
  std::vector<int> indices;  ///< ascending, each once, at most 10,000
  int limit = 0;
};

/// Reads `spec` ("0-99%8"). Throws tjob::error (invalid_argument) whose text
/// starts "array SPEC: " and says what is wrong and how to write it.
array_spec parse_array(std::string_view spec);

/// The train requests of array `spec` of `request`: one per index i, named
/// NAME-i, with `array` = NAME and the limit, TJOB_ARRAY_INDEX=i in its
/// environment and, in a Python function's `function_args`, every value
/// {"__tjob__": "array_index"} (the Python package's ARRAY_INDEX) replaced by
/// i. Throws tjob::error (invalid_argument) when the request has no name, the
/// spec is bad, or the longest member name is not a valid job name.
std::vector<train_request> array_members(const train_request& request, std::string_view spec);

/// A duration in whole units: seconds (90), or runs of digits each with a
/// unit s, m or h (90s, 10m, 1h30m); nullopt when it is not one.
std::optional<std::chrono::seconds> parse_seconds(std::string_view text);

/// Reads a warning as Slurm's --signal gives it: SIG[@TIME], SIG a name
/// (USR1, SIGUSR1) or a number, TIME seconds or with a unit (90, 90s, 2m,
/// 1h; default 60 s). KILL and STOP are refused (a job cannot handle them).
/// Throws tjob::error (invalid_argument) starting "signal SPEC: ".
stop_warning parse_stop_warning(std::string_view spec);
/// "USR1@60s": what parse_stop_warning reads back.
std::string stop_warning_text(const stop_warning& w);
/// A signal's name without "SIG" ("USR1"), or its number as text.
std::string signal_name(int signal);
/// A signal given by name (with or without "SIG") or number; nullopt when
/// it is none, or KILL or STOP.
std::optional<int> signal_number(std::string_view text);

}  // namespace tjob
