#include "adapters/python/python_setup.hpp"

#include "core/strings.hpp"

#include <tjob/error.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>

namespace tjob::python {

std::optional<std::string> requirement_name(std::string_view r) {
  std::size_t i = 0;
  while (i < r.size() && std::isspace(static_cast<unsigned char>(r[i]))) ++i;
  auto is_alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (i >= r.size() || !is_alnum(r[i])) return std::nullopt;
  std::size_t start = i;
  while (i < r.size() && (is_alnum(r[i]) || r[i] == '.' || r[i] == '_' || r[i] == '-')) ++i;
  return std::string(r.substr(start, i - start));
}

std::string canonical_name(std::string_view name) {
  std::string out;
  bool in_sep = false;
  for (char c : name) {
    if (c == '-' || c == '_' || c == '.') {
      if (!in_sep) out.push_back('-');
      in_sep = true;
    } else {
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
      in_sep = false;
    }
  }
  return out;
}

namespace {

std::string canonical_of(const std::string& requirement) {
  auto name = requirement_name(requirement);
  if (!name)
    throw error(errc::invalid_argument,
                "Could not parse package name from requirement: '" + requirement +
                    "'; a requirement starts with a distribution name, as in 'numpy>=1.26'");
  return canonical_name(*name);
}

}  // namespace

std::vector<std::string> merge_packages(const std::vector<std::string>& runtime_packages,
                                        const std::vector<std::string>& trainer_packages) {
  if (trainer_packages.empty()) return runtime_packages;
  std::map<std::string, std::string> trainer_names;  // canonical -> as given
  for (const auto& p : trainer_packages) {
    auto c = canonical_of(p);
    if (auto it = trainer_names.find(c); it != trainer_names.end())
      throw error(errc::invalid_argument, "Duplicate dependency in trainer_packages: '" + p +
                                              "' (canonical: '" + c + "'); list each package once");
    trainer_names.emplace(c, p);
  }
  // Runtime packages by their last mention, in that order.
  std::map<std::string, std::size_t> last;
  for (std::size_t i = 0; i < runtime_packages.size(); ++i) last[canonical_of(runtime_packages[i])] = i;
  std::vector<std::size_t> keep;
  for (const auto& [c, i] : last)
    if (!trainer_names.count(c)) keep.push_back(i);
  std::sort(keep.begin(), keep.end());
  std::vector<std::string> out;
  for (auto i : keep) out.push_back(runtime_packages[i]);
  out.insert(out.end(), trainer_packages.begin(), trainer_packages.end());
  return out;
}

std::vector<std::string> index_urls(const std::vector<std::string>& trainer_urls) {
  if (!trainer_urls.empty()) return trainer_urls;
  std::vector<std::string> out;
  if (const char* env = std::getenv("DEFAULT_PIP_INDEX_URLS")) out = detail::split_list(env);
  if (out.empty()) out.push_back("https://pypi.org/simple");
  return out;
}

std::vector<std::string> pip_install_args(const std::vector<std::string>& packages) {
  std::vector<std::string> args = {"install",
                                   "--no-input",
                                   "--disable-pip-version-check",
                                   "--no-warn-script-location",
                                   "--progress-bar",
                                   "off",
                                   "--retries",
                                   "2"};
  args.insert(args.end(), packages.begin(), packages.end());
  return args;
}

std::map<std::string, std::string> pip_index_environment(const std::vector<std::string>& urls) {
  std::map<std::string, std::string> env;
  if (urls.empty()) return env;
  env["PIP_INDEX_URL"] = urls.front();
  std::string extra;
  for (std::size_t i = 1; i < urls.size(); ++i) extra += (extra.empty() ? "" : " ") + urls[i];
  if (!extra.empty()) env["PIP_EXTRA_INDEX_URL"] = extra;
  return env;
}

std::string_view pip_bootstrap_code() {
  return R"py(import glob, os, runpy, shutil, sys, tempfile, zipfile
try:
    import pip  # the interpreter's own (or the system's, with system site packages)
except ImportError:
    import ensurepip
    dirs = [os.path.join(os.path.dirname(ensurepip.__file__), "_bundled"), "/usr/share/python-wheels"]
    wheels = sorted(w for d in dirs for w in glob.glob(os.path.join(d, "pip-*.whl")))
    if not wheels:
        sys.exit("tjob: this interpreter has no pip and no bundled pip wheel; "
                 "install python3-pip or use the system site packages")
    where = wheels[-1]
    cache = os.environ.get("TJOB_PIP_CACHE")
    if cache:
        # Unpacked once: imported from a directory, pip's modules are compiled
        # once and kept, where from the wheel (a zip) they are compiled on every run.
        unpacked = os.path.join(cache, os.path.basename(where)[:-4])
        if not os.path.isdir(unpacked):
            os.makedirs(cache, mode=0o700, exist_ok=True)
            tmp = tempfile.mkdtemp(dir=cache, prefix=".unpack-")
            zipfile.ZipFile(where).extractall(tmp)
            try:
                os.rename(tmp, unpacked)
            except OSError:  # another job unpacked it first
                shutil.rmtree(tmp, ignore_errors=True)
        where = unpacked
        sys.dont_write_bytecode = False  # whatever PYTHONDONTWRITEBYTECODE says: this copy is ours
    sys.path.insert(0, where)
sys.argv[0] = "pip"
runpy.run_module("pip", run_name="__main__", alter_sys=True)
)py";
}

namespace {

// Where the parameters of the first top-level `def function(` (or `async
// def`) begin in `source`: just after its '('; npos when there is none.
std::size_t def_open(std::string_view source, std::string_view function) {
  std::size_t pos = 0;
  while (pos < source.size()) {
    auto end = source.find('\n', pos);
    if (end == std::string_view::npos) end = source.size();
    std::string_view line = source.substr(pos, end - pos);
    pos = end + 1;
    if (line.rfind("async ", 0) == 0) {
      auto at = line.find_first_not_of(" \t", 6);
      if (at == std::string_view::npos) continue;
      line.remove_prefix(at);
    }
    if (line.rfind("def ", 0) != 0) continue;
    auto name_at = line.find_first_not_of(" \t", 4);
    if (name_at == std::string_view::npos || line.substr(name_at, function.size()) != function) continue;
    auto open = line.find_first_not_of(" \t", name_at + function.size());
    if (open == std::string_view::npos || line[open] != '(') continue;
    return static_cast<std::size_t>(line.data() - source.data()) + open + 1;
  }
  return std::string_view::npos;
}

}  // namespace

bool defines_function(std::string_view source, std::string_view function) {
  return def_open(source, function) != std::string_view::npos;
}

namespace {

// The text between the parentheses of `def function(`, nesting, strings and
// comments taken into account; nullopt when it does not close.
std::optional<std::string> parameter_text(std::string_view source, std::string_view function) {
  std::size_t i = def_open(source, function);
  if (i == std::string_view::npos) return std::nullopt;
  std::string out;
  int depth = 0;
  while (i < source.size()) {
    char c = source[i];
    if (c == '#') {
      while (i < source.size() && source[i] != '\n') ++i;
      continue;
    }
    if (c == '\'' || c == '"') {  // a string literal, kept as a placeholder
      const bool triple = source.substr(i, 3) == std::string(3, c);
      const std::string close = triple ? std::string(3, c) : std::string(1, c);
      i += close.size();
      while (i < source.size() && source.substr(i, close.size()) != close) i += source[i] == '\\' ? 2 : 1;
      i += close.size();
      out += "''";
      continue;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') {
      if (depth == 0) return c == ')' ? std::optional(out) : std::nullopt;
      --depth;
    }
    out += depth == 0 && c == ',' ? '\x01' : c;  // the commas that part parameters
    ++i;
  }
  return std::nullopt;
}

// `s` as a Python string literal (UTF-8 passes as it is).
std::string py_literal(std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

std::optional<std::vector<keyword_parameter>> keyword_parameters(std::string_view source,
                                                                 std::string_view function) {
  auto text = parameter_text(source, function);
  if (!text) return std::nullopt;
  std::vector<keyword_parameter> out;
  std::string_view rest = *text;
  while (!rest.empty()) {
    auto cut = rest.find('\x01');
    std::string_view p = rest.substr(0, cut);
    rest = cut == std::string_view::npos ? std::string_view() : rest.substr(cut + 1);
    // name[: annotation][= default], at the top level of the parentheses
    auto trim = [](std::string_view s) {
      auto b = s.find_first_not_of(" \t\r\n\\");
      if (b == std::string_view::npos) return std::string_view();
      return s.substr(b, s.find_last_not_of(" \t\r\n\\") - b + 1);
    };
    bool has_default = false;
    int depth = 0;
    std::size_t name_end = p.size();
    for (std::size_t i = 0; i < p.size(); ++i) {
      char c = p[i];
      if (c == '(' || c == '[' || c == '{') ++depth;
      if (c == ')' || c == ']' || c == '}') --depth;
      if (depth == 0 && (c == ':' || c == '=') && name_end == p.size()) name_end = i;
      if (depth == 0 && c == '=' && !(i + 1 < p.size() && p[i + 1] == '=')) has_default = true;
    }
    auto name = trim(p.substr(0, name_end));
    if (name.empty()) continue;                         // a trailing comma
    if (name.rfind("**", 0) == 0) return std::nullopt;  // any keyword
    if (name == "/") {                                  // what came before is positional-only
      out.clear();
      continue;
    }
    if (name.front() == '*') continue;  // *args, or the bare * before keyword-only ones
    out.push_back({std::string(name), has_default});
  }
  return out;
}

std::string function_launcher(std::string_view code_path, std::string_view function, bool with_kwargs) {
  // The function name is a Python identifier (defines_function checked it);
  // the path and the arguments are data: a literal and a JSON file.
  std::string out = "# Written by tjob: call " + std::string(function) +
                    "() of the training code, which runs as the module __tjob_main__ (not __main__).\n"
                    "import importlib.util as _tjob_util, os as _tjob_os, sys as _tjob_sys\n"
                    "_tjob_path = " +
                    py_literal(code_path) +
                    "\n"
                    "if not _tjob_os.path.isabs(_tjob_path):\n"
                    "    _tjob_path = "
                    "_tjob_os.path.join(_tjob_os.path.dirname(_tjob_os.path.abspath(__file__)), _tjob_path)\n"
                    "_tjob_sys.path.insert(0, _tjob_os.path.dirname(_tjob_path))\n"
                    "_tjob_spec = _tjob_util.spec_from_file_location(\"__tjob_main__\", _tjob_path)\n"
                    "_tjob_module = _tjob_util.module_from_spec(_tjob_spec)\n"
                    "_tjob_sys.modules[\"__tjob_main__\"] = _tjob_module\n"
                    "_tjob_spec.loader.exec_module(_tjob_module)\n"
                    // Only as the program: a child that multiprocessing's "spawn" or
                    // "forkserver" starts imports this file again as __mp_main__, for the
                    // training code's functions, and must not call the function again.
                    "if __name__ == \"__main__\":\n"
                    "    _tjob_kwargs = {}\n";
  if (with_kwargs) {
    out += "    import json as _tjob_json\n";
    out += "    with open(__file__[:-3] + \".kwargs.json\", encoding=\"utf-8\") as _tjob_f:\n";
    out += "        _tjob_kwargs = _tjob_json.load(_tjob_f)\n";
  }
  out += "    _tjob_module." + std::string(function) + "(**_tjob_kwargs)\n";
  return out;
}

}  // namespace tjob::python
