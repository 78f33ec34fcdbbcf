// What is generated from the command line's own definition, so it never
// drifts from `--help`: shell completion (bash, zsh) and the man page.
#pragma once

#include <string>
#include <string_view>

namespace CLI {
class App;
}

namespace tjob::cli {

/// A bash completion script (`source <(tjob completion bash)`): commands,
/// options, option values (statuses, formats, backends, runtimes), job names
/// from `tjob list -o name` and Python files.
std::string bash_completion(const CLI::App& app);

/// A zsh completion script (`#compdef tjob`, for a directory on $fpath), with
/// each command's and option's description.
std::string zsh_completion(const CLI::App& app);

/// tjob(1) in man(7) format: every command with its options, as --help says them.
std::string man_page(const CLI::App& app, std::string_view version);

}  // namespace tjob::cli
