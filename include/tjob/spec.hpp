// tjob/spec.hpp — trainers as JSON text: how the store keeps a job's spec,
// how `tjob train` hands a request to its supervising process, and what a
// service or a script may send.
//
// Threading: pure functions.
// Errors: trainer_from_json throws tjob::error (invalid_argument) naming
//   what is wrong with the text.
#pragma once

#include <tjob/types.hpp>

#include <string>
#include <string_view>

namespace tjob {

/// {"kind":"command","command":[...],"env":{...},"working_dir":"..."} or
/// {"kind":"python","source":...,"function":...,...}.
std::string trainer_to_json(const trainer& t);
/// The inverse of trainer_to_json.
trainer trainer_from_json(std::string_view text);

}  // namespace tjob
