#include "cli/docs.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <vector>

namespace tjob::cli {

namespace {

// What a completion offers for an option's value.
enum class value_kind {
  none,
  statuses,
  formats,
  backends,
  runtimes,
  pull_policies,
  networks,
  engines,
  dir,
  file
};

// What a command's positional arguments are.
enum class positional_kind { none, jobs, python_file, shells, subcommands };

struct option_info {
  std::vector<std::string> names;  // "-o", "--output"
  bool takes_value = false;
  std::string type_name;  // "TEXT", "INT", ... (CLI11's)
  std::string description;
  value_kind values = value_kind::none;
};

struct command_info {
  std::string path;  // "run", "cache list"
  std::string description;
  std::vector<option_info> options;
  positional_kind positional = positional_kind::none;
  std::string positional_name;
  std::vector<command_info> children;
};

value_kind values_of(const std::string& long_name) {
  static const std::map<std::string, value_kind> known{
      {"status", value_kind::statuses},
      {"output", value_kind::formats},
      {"backend", value_kind::backends},
      {"runtime", value_kind::runtimes},
      {"pull-policy", value_kind::pull_policies},
      {"network", value_kind::networks},
      {"container-runtime", value_kind::engines},
      {"home", value_kind::dir},
      {"workdir", value_kind::dir},
      {"runtime-dir", value_kind::dir},
      {"kubeconfig", value_kind::file},
      {"python", value_kind::file},
      {"volume", value_kind::file},
  };
  auto it = known.find(long_name);
  return it == known.end() ? value_kind::none : it->second;
}

positional_kind positional_of(const std::string& command) {
  static const std::set<std::string> on_jobs{"get", "logs", "wait", "cancel", "delete", "events"};
  if (on_jobs.count(command)) return positional_kind::jobs;
  if (command == "run" || command == "train") return positional_kind::python_file;
  if (command == "completion") return positional_kind::shells;
  return positional_kind::none;
}

std::vector<option_info> options_of(const CLI::App& app) {
  std::vector<option_info> out;
  for (const CLI::Option* o : app.get_options()) {
    if (!o->nonpositional()) continue;
    option_info i;
    for (const auto& s : o->get_snames()) i.names.push_back("-" + s);
    for (const auto& l : o->get_lnames()) i.names.push_back("--" + l);
    i.takes_value = o->get_items_expected_max() > 0;  // 0 for a flag
    i.type_name = o->get_type_name();
    i.description = o->get_description();
    if (!o->get_lnames().empty()) i.values = values_of(o->get_lnames().front());
    out.push_back(std::move(i));
  }
  return out;
}

command_info describe(const CLI::App& app, const std::string& path) {
  command_info c;
  c.path = path;
  c.description = app.get_description();
  c.options = options_of(app);
  for (const CLI::Option* o : app.get_options())
    if (!o->nonpositional()) c.positional_name = o->get_name();
  auto subs = app.get_subcommands([](const CLI::App* a) { return !a->get_group().empty(); });
  for (const CLI::App* sub : subs)
    c.children.push_back(describe(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name()));
  auto last = path.substr(path.rfind(' ') == std::string::npos ? 0 : path.rfind(' ') + 1);
  c.positional = !c.children.empty() ? positional_kind::subcommands : positional_of(last);
  return c;
}

void flatten(const command_info& c, std::vector<const command_info*>& out) {
  out.push_back(&c);
  for (const auto& k : c.children) flatten(k, out);
}

std::string words_of(const std::vector<option_info>& opts) {
  std::string w;
  for (const auto& o : opts)
    for (const auto& n : o.names) w += (w.empty() ? "" : " ") + n;
  return w;
}

// The words an option of kind `k` takes, for the kinds that have a fixed set.
const char* words_for(value_kind k) {
  switch (k) {
    case value_kind::statuses:
      return "Created Running Complete Failed";
    case value_kind::formats:
      return "table wide name json yaml";
    case value_kind::backends:
      return "local container kubernetes";
    case value_kind::pull_policies:
      return "IfNotPresent Always Never";
    case value_kind::networks:
      return "job host none";
    case value_kind::engines:
      return "docker podman";
    default:
      return nullptr;
  }
}

// Every option name that takes a value, by what its value is, over all commands.
std::map<value_kind, std::set<std::string>> names_by_kind(const std::vector<const command_info*>& all) {
  std::map<value_kind, std::set<std::string>> out;
  for (const auto* c : all)
    for (const auto& o : c->options)
      if (o.takes_value) out[o.values].insert(o.names.begin(), o.names.end());
  return out;
}

std::string alternatives(const std::set<std::string>& names) {
  std::string alts;
  for (const auto& n : names) alts += (alts.empty() ? "" : "|") + n;
  return alts;
}

// The first sentence (or line) of a help text, for one-line descriptions.
std::string summary(const std::string& text) {
  auto end = text.find_first_of("\n");
  auto s = text.substr(0, end);
  auto dot = s.find(". ");
  if (dot != std::string::npos) s = s.substr(0, dot);
  if (s.size() > 90) s = s.substr(0, s.rfind(' ', 87)) + "...";
  return s;
}

}  // namespace

// --- bash --------------------------------------------------------------------

namespace {

// The completions of an option's value, by the kind of value it takes.
std::string bash_value_cases(const std::map<value_kind, std::set<std::string>>& by_kind) {
  std::string out;
  for (const auto& [kind, names] : by_kind) {
    const auto alts = alternatives(names);
    if (kind == value_kind::statuses)  // a comma-separated list: the word after the last comma
      out += "    " + alts +
             ")\n"
             "      if [[ $cur == *,* ]]; then pre=${cur%,*},; last=${cur##*,}; fi\n"
             "      COMPREPLY=($(compgen -P \"$pre\" -W '" +
             words_for(kind) + "' -- \"$last\"))\n      return ;;\n";
    else if (const char* words = words_for(kind))
      out += "    " + alts + ") COMPREPLY=($(compgen -W '" + words + "' -- \"$cur\")); return ;;\n";
    else if (kind == value_kind::runtimes)
      out += "    " + alts +
             ")\n"
             "      COMPREPLY=($(compgen -W \"$(\"${COMP_WORDS[0]}\" \"${ctx[@]}\" runtimes -o name "
             "2>/dev/null)\" -- "
             "\"$cur\"))\n      return ;;\n";
    else if (kind == value_kind::dir)
      out += "    " + alts + ") COMPREPLY=($(compgen -d -- \"$cur\")); return ;;\n";
    else if (kind == value_kind::file)
      out += "    " + alts + ") COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n";
    else
      out += "    " + alts + ") return ;;\n";
  }
  return out;
}

// Each command's options and subcommands.
std::string bash_command_words(const command_info& root, const std::vector<const command_info*>& all) {
  std::string out;
  for (const auto* c : all) {
    auto mine = c->options;
    if (!c->path.empty())  // global options go after a command too; --help once
      for (const auto& o : root.options)
        if (std::find(o.names.begin(), o.names.end(), "--help") == o.names.end()) mine.push_back(o);
    std::string opts = words_of(mine);
    std::string words;
    for (const auto& k : c->children)
      words += (words.empty() ? "" : " ") + k.path.substr(k.path.rfind(' ') + 1);
    out += fmt::format("    '{}') opts='{}'; words='{}' ;;\n", c->path, opts, words);
  }
  return out;
}

// What completes the words after a command's options: its jobs' names, or
// Python files, by what the command takes.
std::string bash_positional_cases(const std::vector<const command_info*>& all) {
  std::string on_jobs, on_files;
  for (const auto* c : all) {
    if (c->positional == positional_kind::jobs) on_jobs += (on_jobs.empty() ? "" : "|") + c->path;
    if (c->positional == positional_kind::python_file) on_files += (on_files.empty() ? "" : "|") + c->path;
  }
  return "    " + on_jobs +
         ")\n"
         "      COMPREPLY=($(compgen -W \"$(\"${COMP_WORDS[0]}\" \"${ctx[@]}\" list -o name 2>/dev/null)\" "
         "-- "
         "\"$cur\")) ;;\n"
         "    " +
         on_files +
         ")\n"
         "      compopt -o filenames 2>/dev/null\n"
         "      COMPREPLY=($(compgen -d -- \"$cur\") $(compgen -f -X '!*.py' -- \"$cur\")) ;;\n"
         "    completion) COMPREPLY=($(compgen -W 'bash zsh' -- \"$cur\")) ;;\n"
         "    *) COMPREPLY=($(compgen -W \"$words\" -- \"$cur\")) ;;\n";
}

// Which command the words so far name: a case for each "parent|name".
std::string bash_command_paths(const std::vector<const command_info*>& all) {
  std::string out;
  for (const auto* c : all) {
    if (c->path.empty()) continue;
    auto sp = c->path.rfind(' ');
    auto parent = sp == std::string::npos ? std::string() : c->path.substr(0, sp);
    auto name = sp == std::string::npos ? c->path : c->path.substr(sp + 1);
    out += fmt::format("      '{}|{}') cmd='{}' ;;\n", parent, name, c->path);
  }
  return out;
}

}  // namespace

std::string bash_completion(const CLI::App& app) {
  auto root = describe(app, "");
  std::vector<const command_info*> all;
  flatten(root, all);
  std::string out =
      "# bash completion for tjob; generated by `tjob completion bash` from tjob's own options.\n"
      "# Load it with: source <(tjob completion bash)\n"
      "_tjob() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
      "  local cmd='' w i\n"
      "  local -a ctx=()  # --home and --backend as given, for the job and runtime lists\n"
      "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      "    w=${COMP_WORDS[i]}\n"
      "    case $w in\n"
      "      --home|--backend) ctx+=(\"$w\" \"${COMP_WORDS[i+1]}\") ;;\n"
      "      --home=*|--backend=*) ctx+=(\"$w\") ;;\n"
      "    esac\n"
      "    if [[ ($cmd == run || $cmd == train) && ($w == -- || $w == *.py) ]]; then\n"
      "      # the program's or the script's own arguments\n"
      "      COMPREPLY=($(compgen -f -- \"$cur\"))\n"
      "      return\n"
      "    fi\n"
      "    case \"$cmd|$w\" in\n";
  out += bash_command_paths(all);
  // The value after each option, by its kind; every other option takes free text.
  auto by_kind = names_by_kind(all);
  out +=
      "    esac\n"
      "  done\n"
      "  local pre='' last=$cur\n"
      "  case $prev in\n";
  out += bash_value_cases(by_kind);
  out +=
      "  esac\n"
      "  local opts words=''\n"
      "  case $cmd in\n";
  out += bash_command_words(root, all);
  out +=
      "  esac\n"
      "  if [[ $cur == -* ]]; then\n"
      "    COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
      "    return\n"
      "  fi\n"
      "  case $cmd in\n";
  out += bash_positional_cases(all);
  out +=
      "  esac\n"
      "}\n"
      "complete -F _tjob tjob\n";
  return out;
}

// --- zsh ---------------------------------------------------------------------

namespace {

// Text inside a single-quoted _arguments spec's [description] (or, with
// `brackets` false, a _describe item's, where only ':' is special).
std::string zsh_text(const std::string& s, bool brackets = true) {
  std::string out;
  for (char c : summary(s)) {
    if (c == '\'')
      out += "'\\''";
    else if (c == ':' || (brackets && (c == '[' || c == ']' || c == '\\')))
      out += std::string("\\") + c;
    else
      out += c;
  }
  return out;
}

std::string zsh_action(value_kind k) {
  switch (k) {
    case value_kind::statuses:
      return "_tjob_statuses";
    case value_kind::formats:
    case value_kind::backends:
    case value_kind::pull_policies:
    case value_kind::networks:
    case value_kind::engines:
      return std::string("(") + words_for(k) + ")";
    case value_kind::runtimes:
      return "_tjob_runtimes";
    case value_kind::dir:
      return "_files -/";
    case value_kind::file:
      return "_files";
    case value_kind::none:
      break;
  }
  return " ";
}

std::string zsh_specs(const std::vector<option_info>& opts, const std::string& indent) {
  std::string out;
  for (const auto& o : opts)
    for (const auto& n : o.names) {
      out += indent + "'" + n + "[" + zsh_text(o.description) + "]";
      if (o.takes_value)
        out += ":" + (o.type_name.empty() ? std::string("value") : o.type_name) + ":" + zsh_action(o.values);
      out += "' \\\n";
    }
  return out;
}

std::string zsh_positional(const command_info& c) {
  switch (c.positional) {
    case positional_kind::jobs:
      return "'*:job:_tjob_jobs'";
    case positional_kind::python_file:
      return "'1:Python file (FILE.py), or -- and a program:_files -g \"*.py(-.)\"' '*::argument:_files'";
    case positional_kind::shells:
      return "'1:shell:(bash zsh)'";
    default:
      return "";
  }
}

// The function completing `c` (and, below it, its subcommands).
void zsh_function(const command_info& c, const std::string& global_specs, std::string& out) {
  std::string fn = "_tjob";
  for (char ch : c.path) fn += ch == ' ' ? '_' : ch;
  if (c.path.empty()) fn = "_tjob_main";
  out += fn + "() {\n";
  // The program as typed (build/tjob, ~/bin/tjob): the subcommands' functions
  // see it (zsh scopes dynamically) after _arguments has shifted $words.
  if (c.path.empty()) out += "  local tjob_program=${words[1]}\n";
  if (!c.children.empty()) {
    out += "  local curcontext=\"$curcontext\" state line\n  typeset -A opt_args\n  _arguments -C \\\n";
    out += zsh_specs(c.options, "    ");
    if (!c.path.empty()) out += global_specs;
    out += "    '1:command:->command' '*::argument:->argument'\n";
    out += "  case $state in\n    command)\n      local -a commands\n      commands=(\n";
    for (const auto& k : c.children) {
      auto name = k.path.substr(k.path.rfind(' ') == std::string::npos ? 0 : k.path.rfind(' ') + 1);
      out += "        '" + name + ":" + zsh_text(k.description, false) + "'\n";
    }
    out +=
        "      )\n      _describe -t commands command commands ;;\n    argument)\n      case $line[1] in\n";
    for (const auto& k : c.children) {
      auto name = k.path.substr(k.path.rfind(' ') == std::string::npos ? 0 : k.path.rfind(' ') + 1);
      std::string kfn = "_tjob";
      for (char ch : k.path) kfn += ch == ' ' ? '_' : ch;
      out += "        " + name + ") " + kfn + " ;;\n";
    }
    out += "      esac ;;\n  esac\n}\n";
  } else {
    std::string specs = zsh_specs(c.options, "    ") + global_specs;
    auto pos = zsh_positional(c);
    if (pos.empty())
      specs.erase(specs.size() - 3);  // the last spec's " \\\n"
    else
      specs += "    " + pos;
    out += "  _arguments \\\n" + specs + "\n}\n";
  }
  for (const auto& k : c.children) zsh_function(k, global_specs, out);
}

}  // namespace

std::string zsh_completion(const CLI::App& app) {
  auto root = describe(app, "");
  // Global options are taken after a command too (they fall through).
  std::vector<option_info> global;
  for (const auto& o : root.options)
    if (std::find(o.names.begin(), o.names.end(), "--help") == o.names.end()) global.push_back(o);
  const std::string global_specs = zsh_specs(global, "    ");
  std::string out =
      "#compdef tjob\n"
      "# zsh completion for tjob; generated by `tjob completion zsh` from tjob's own options.\n"
      "# Install it as _tjob in a directory on $fpath, before compinit runs.\n"
      "_tjob_jobs() {\n"
      "  local -a jobs\n"
      "  jobs=(${(f)\"$(_call_program jobs ${tjob_program:-tjob} list -o name 2>/dev/null)\"})\n"
      "  _describe -t jobs job jobs\n"
      "}\n"
      "_tjob_runtimes() {\n"
      "  local -a runtimes\n"
      "  runtimes=(${(f)\"$(_call_program runtimes ${tjob_program:-tjob} runtimes -o name 2>/dev/null)\"})\n"
      "  _describe -t runtimes runtime runtimes\n"
      "}\n"
      "_tjob_statuses() {\n"
      "  _values -s , status " +
      std::string(words_for(value_kind::statuses)) +
      "\n"
      "}\n";
  zsh_function(root, global_specs, out);
  out += "_tjob() { _tjob_main \"$@\" }\n_tjob \"$@\"\n";
  return out;
}

// --- man ---------------------------------------------------------------------

namespace {

// Text for troff: backslashes and hyphens escaped, no line starting a request.
std::string roff(const std::string& s) {
  std::string out;
  bool line_start = true;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (line_start && (c == '.' || c == '\'')) out += "\\&";
    line_start = false;
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) {  // UTF-8: troff wants the code point as \[uXXXX]
      int len = u >= 0xf0 ? 4 : u >= 0xe0 ? 3 : 2;
      unsigned cp = u & (len == 4 ? 0x07 : len == 3 ? 0x0f : 0x1f);
      for (int k = 1; k < len && i + 1 < s.size(); ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(s[++i]) & 0x3f);
      out += fmt::format("\\[u{:04X}]", cp);
    } else if (c == '\\')
      out += "\\e";
    else if (c == '-')
      out += "\\-";
    else if (c == '\n') {
      out += "\n.br\n";
      line_start = true;
    } else
      out += c;
  }
  return out;
}

std::string roff_options(const std::vector<option_info>& opts) {
  std::string out;
  for (const auto& o : opts) {
    out += ".TP\n";
    std::string names;
    for (const auto& n : o.names) names += (names.empty() ? "" : ", ") + ("\\fB" + roff(n) + "\\fR");
    if (o.takes_value) names += " \\fI" + roff(o.type_name.empty() ? "VALUE" : o.type_name) + "\\fR";
    out += names + "\n" + roff(o.description) + "\n";
  }
  return out;
}

}  // namespace

std::string man_page(const CLI::App& app, std::string_view version) {
  auto root = describe(app, "");
  std::vector<const command_info*> all;
  flatten(root, all);
  auto first_line = root.description.substr(0, root.description.find('\n'));
  auto dash = first_line.find(" — ");
  auto what = dash == std::string::npos ? first_line : first_line.substr(dash + 5);
  std::string out = fmt::format(".TH TJOB 1 \"\" \"tjob {}\" \"User Commands\"\n", version);
  out += ".SH NAME\ntjob \\- " + roff(what) + "\n";
  out +=
      ".SH SYNOPSIS\n.B tjob\n[\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fICOMMAND OPTIONS\\fR] [\\fIARGS\\fR]\n";
  auto nl = root.description.find('\n');
  out += ".SH DESCRIPTION\n" +
         roff(nl == std::string::npos ? root.description : root.description.substr(nl + 1)) + "\n";
  out += ".SH OPTIONS\nThese go before or after the command.\n" + roff_options(root.options);
  out += ".SH COMMANDS\n";
  for (const auto* c : all) {
    if (c->path.empty() || !c->children.empty()) continue;
    std::string usage = "tjob " + c->path;
    if (!c->options.empty()) usage += " [OPTIONS]";
    if (c->positional == positional_kind::python_file)
      usage += " FILE.py [ARGS...] | -- CMD [ARGS...]";
    else if (!c->positional_name.empty())
      usage += " " + c->positional_name;
    out += ".SS \"" + roff(usage) + "\"\n" + roff(c->description) + "\n" + roff_options(c->options);
  }
  // The environment variables the help mentions, each with where.
  std::map<std::string, std::set<std::string>> env;
  static const std::regex var(R"(\$([A-Z][A-Z0-9_]+))");
  auto scan = [&](const std::string& text, const std::string& where) {
    for (std::sregex_iterator it(text.begin(), text.end(), var), end; it != end; ++it)
      env[(*it)[1].str()].insert(where);
  };
  for (const auto* c : all) {
    scan(c->description, c->path.empty() ? "DESCRIPTION" : "tjob " + c->path);
    for (const auto& o : c->options) scan(o.description, o.names.back());
  }
  out += ".SH ENVIRONMENT\n";
  for (const auto& [name, where] : env) {
    std::string list;
    for (const auto& w : where) list += (list.empty() ? "" : ", ") + w;
    out += ".TP\n.B " + roff(name) + "\nSee " + roff(list) + ".\n";
  }
  out +=
      ".SH EXIT STATUS\n0 on success; 2 for a usage error (a bad option, an unknown job, a bad request); "
      "1 for any other failure. \\fBtjob run\\fR exits with the failed step's exit code, and with 128 "
      "plus the signal when it was interrupted.\n"
      ".SH SEE ALSO\nThe README and docs/ of the tjob source tree.\n";
  return out;
}

}  // namespace tjob::cli
