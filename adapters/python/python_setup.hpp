// What a local Python job needs before its code runs: the package list merged
// by Kubeflow's rules, pip's command line, the training file, the entrypoint.
// Pure functions; the engine runs the commands they describe.
#pragma once

#include <tjob/types.hpp>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tjob::python {

/// The distribution name a requirement starts with (`^\s*([A-Za-z0-9][A-Za-z0-9._-]*)`),
/// or nullopt when it starts with none.
std::optional<std::string> requirement_name(std::string_view requirement);

/// PEP 503: runs of '-', '_' and '.' become one '-', lowercased.
std::string canonical_name(std::string_view name);

/// Kubeflow's merge of runtime and trainer packages: an empty trainer list
/// leaves the runtime list as it is; a trainer package replaces the runtime
/// package of the same canonical name; the runtime's own duplicates keep the
/// last; runtime-only packages come first (in order of their last mention),
/// then the trainer's, verbatim. Throws tjob::error (invalid_argument) for an
/// unparsable requirement or a name given twice in the trainer list.
std::vector<std::string> merge_packages(const std::vector<std::string>& runtime_packages,
                                        const std::vector<std::string>& trainer_packages);

/// The index URLs of a job: the trainer's, else $DEFAULT_PIP_INDEX_URLS
/// (comma-separated), else PyPI's simple index.
std::vector<std::string> index_urls(const std::vector<std::string>& trainer_urls);

/// pip's arguments after `pip`: install, quiet flags, then each package as
/// one argument. The index URLs are not among them (pip_index_environment).
std::vector<std::string> pip_install_args(const std::vector<std::string>& packages);

/// The index URLs as pip's environment: PIP_INDEX_URL the first,
/// PIP_EXTRA_INDEX_URL the rest (space-separated). Not its arguments: every
/// local user reads a process's arguments (ps), and an index URL may hold a
/// password; only its owner reads its environment.
std::map<std::string, std::string> pip_index_environment(const std::vector<std::string>& urls);

/// Python code, run as `python -c CODE ARGS...`, that runs pip with ARGS: the
/// interpreter's own pip if it has one, else the pip wheel its ensurepip
/// bundles, without running ensurepip (most of a venv's cost): unpacked once
/// into $TJOB_PIP_CACHE when that is set (so its compiled modules are kept),
/// else straight from the wheel.
std::string_view pip_bootstrap_code();

/// True when `source` defines `function` at top level (`def f(` or `async def f(`).
bool defines_function(std::string_view source, std::string_view function);

/// The parameters of the top-level `def function(...)` in `source` that a
/// call by keyword can name, each with whether it has a default; nullopt
/// when it takes any keyword (`**kwargs`), or its signature cannot be read
/// here (then the check is left to Python). Read from the text, as
/// defines_function: strings, comments, annotations and defaults inside the
/// parentheses are skipped; positional-only ones (before `/`) and `*args`
/// are left out.
struct keyword_parameter {
  std::string name;
  bool has_default = false;
};
std::optional<std::vector<keyword_parameter>> keyword_parameters(std::string_view source,
                                                                 std::string_view function);

/// The launcher of a function trainer: it loads the training code from
/// `code_path` (absolute, or relative to the launcher's own directory) as a
/// module named `__tjob_main__`, so the file's `if __name__ == "__main__":`
/// block stays off while its imports and helpers are there; the code's
/// directory goes first on sys.path (sibling modules import) and tracebacks
/// name the file itself. Then it calls `function`, with the keyword arguments
/// read from the JSON file beside the launcher (`<launcher without
/// .py>.kwargs.json`) when `with_kwargs`.
std::string function_launcher(std::string_view code_path, std::string_view function, bool with_kwargs);

}  // namespace tjob::python
