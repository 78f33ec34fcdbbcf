// Job names: generated like Kubeflow's, validated as the TrainJob CRD does.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tjob::detail {

/// A letter and 11 lowercase hex characters (12 in all), like Kubeflow's names.
std::string generate_job_name();

/// Why `name` is not an RFC 1035 label of at most 63 characters (lowercase
/// letters, digits, '-'; starts with a letter; ends with a letter or digit),
/// or nullopt when it is one.
std::optional<std::string> name_problem(std::string_view name);

/// The name as it can be shown in a one-line message: control characters and
/// non-ASCII bytes escaped, long names cut.
std::string printable(std::string_view s, std::size_t max = 80);

/// 'text', printable (for messages).
std::string quote(std::string_view s);

}  // namespace tjob::detail
