#include "adapters/python/python_plan.hpp"

#include "adapters/python/python_setup.hpp"
#include "core/fail.hpp"
#include "core/names.hpp"
#include "core/secrets.hpp"
#include "core/strings.hpp"
#include "core/trainer_checks.hpp"

#include <tjob/error.hpp>

#include <boost/json/parse.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace tjob::python {

namespace json = boost::json;
using detail::has_nul;
using detail::printable;
using detail::quote;

using detail::fail;

std::string read_source(const std::string& who, const std::string& file) {
  std::error_code ec;
  auto size = std::filesystem::file_size(file, ec);
  if (ec)
    fail(errc::invalid_argument,
         who + ": cannot read the training file " + quote(file) + ": " + ec.message() + "; check the path");
  if (size > (16u << 20))
    fail(errc::invalid_argument,
         who + ": the training file " + quote(file) + " is larger than 16 MiB; pass a script, not data");
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

// An index is a URL pip can read: http, https or file, with something after
// the "//". Anything else would fail the job only after its venv was built.
void check_index_url(const std::string& who, const std::string& url) {
  auto lower = [](std::string_view s) {
    std::string out(s);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  bool ok = false;
  for (std::string_view scheme : {"http://", "https://", "file://"})
    if (url.size() > scheme.size() && lower(std::string_view(url).substr(0, scheme.size())) == scheme)
      ok = true;
  for (unsigned char c : url)
    if (c <= 0x20 || c == 0x7f) ok = false;  // no spaces, controls or NUL in a URL
  if (!ok)
    fail(errc::invalid_argument, who + ": pip_index_urls (--index-url): " + quote(printable(detail::mask_url(url), 200)) +
                                     " is not an index URL; give an http://, https:// or file:// URL, such "
                                     "as https://pypi.org/simple");
}

}  // namespace

namespace {

// The keyword arguments against the function's parameters, as Python's call
// would take them (and the Python client checks them at train()): found at
// submit, not inside the job after its venv was made (issue 42).
void check_keywords(const std::string& who, const std::string& function, std::string_view source,
                    const json::object& args) {
  auto params = keyword_parameters(source, function);
  if (!params) return;  // it takes any keyword, or its signature is for Python to read
  std::string names, unknown, missing;
  for (const auto& p : *params) {
    names += (names.empty() ? "" : ", ") + p.name;
    if (!p.has_default && !args.contains(p.name)) missing += (missing.empty() ? "" : ", ") + p.name;
  }
  for (const auto& [k, v] : args) {
    bool known = false;
    for (const auto& p : *params) known = known || p.name == k;
    if (!known) unknown += (unknown.empty() ? "" : ", ") + quote(std::string(k));
  }
  if (!unknown.empty())
    fail(errc::invalid_argument, who + ": function_args (--args): " + function + "() takes no argument " +
                                     unknown + "; " +
                                     (names.empty() ? "it takes none" : "its parameters are " + names));
  if (!missing.empty())
    fail(errc::invalid_argument, who + ": function_args (--args): " + function + "() needs " + missing +
                                     ", which has no default: add it to the arguments");
}

}  // namespace

std::string check_python_code(const std::string& who, python_trainer& pt) {
  if (pt.source.empty() == pt.source_file.empty())
    fail(errc::invalid_argument, who +
                                     ": give the training code either as source text or as a "
                                     "file (source or source_file), not both or neither");
  if (!pt.source_file.empty()) {
    std::error_code ec;
    pt.source_file = std::filesystem::absolute(pt.source_file, ec).string();
    if (pt.function.empty() && !std::filesystem::is_regular_file(pt.source_file, ec))
      fail(errc::invalid_argument,
           who + ": the training file " + quote(pt.source_file) + " does not exist; check the path");
  }
  std::string source = !pt.source.empty()    ? pt.source
                       : pt.function.empty() ? std::string()
                                             : read_source(who, pt.source_file);
  std::string where = pt.source_file.empty() ? "the source" : quote(pt.source_file);
  if (!pt.function.empty() && !defines_function(source, pt.function))
    fail(errc::invalid_argument, who + ": function " + quote(pt.function) +
                                     " is not defined at the top level of " + where +
                                     "; give the name of a top-level `def`");
  if (!pt.function_args.empty()) {
    if (pt.function.empty())
      fail(errc::invalid_argument,
           who + ": function_args (--args) needs a function (--func); a script takes args");
    boost::system::error_code jec;
    auto v = json::parse(pt.function_args, jec);
    if (jec || !v.is_object())
      fail(errc::invalid_argument,
           who +
               ": function_args (--args) must be a JSON object of keyword arguments, such as "
               "{\"lr\": 0.1}; got " +
               printable(pt.function_args, 60));
    check_keywords(who, pt.function, source, v.as_object());
  } else if (!pt.function.empty()) {
    check_keywords(who, pt.function, source, {});
  }
  if (pt.procs_per_node < 1) fail(errc::invalid_argument, who + ": procs_per_node must be 1 or more");
  for (const auto& a : pt.args)
    if (has_nul(a)) fail(errc::invalid_argument, who + ": a script argument holds a NUL byte");
  for (const auto& p : pt.packages_to_install)
    if (has_nul(p)) fail(errc::invalid_argument, who + ": a package name holds a NUL byte");
  for (const auto& u : pt.pip_index_urls) check_index_url(who, u);
  detail::check_env(who, pt.env);
  return source;
}

void check_gpus(const std::string& who, const python_trainer& pt) {
  if (pt.gpus < 0) fail(errc::invalid_argument, who + ": gpus must be 0 or more");
}

std::string check_remote_trainer(const std::string& who, python_trainer& pt) {
  auto source = check_python_code(who, pt);
  if (source.empty()) source = read_source(who, pt.source_file);
  for (const auto& p : pt.packages_to_install)
    if (!requirement_name(p))
      fail(errc::invalid_argument, who + ": package " + quote(p) +
                                       " is not a requirement "
                                       "(a name, optionally with extras and a version)");
  check_gpus(who, pt);
  return source;
}

std::vector<std::pair<std::string, std::string>> training_files(const python_trainer& pt,
                                                                const std::string& source,
                                                                const std::string& stem, bool file_is_here) {
  std::vector<std::pair<std::string, std::string>> out;
  if (pt.function.empty()) {
    if (!pt.source.empty()) out.emplace_back(stem + ".py", source);
    return out;  // a script file runs where it is
  }
  const bool load_in_place = file_is_here && !pt.source_file.empty();
  const std::string code = code_file_of(pt, stem, file_is_here);
  out.emplace_back(stem + ".py", function_launcher(code, pt.function, !pt.function_args.empty()));
  if (!load_in_place) out.emplace_back(code, source);
  if (!pt.function_args.empty()) out.emplace_back(stem + ".kwargs.json", pt.function_args);
  return out;
}

std::string code_file_of(const python_trainer& pt, const std::string& stem, bool file_is_here) {
  const bool here = file_is_here && !pt.source_file.empty();
  if (pt.function.empty()) return here && pt.source.empty() ? pt.source_file : stem + ".py";
  return here ? pt.source_file : stem + ".code.py";
}

std::vector<std::pair<std::string, std::string>> shipped_files(const python_trainer& pt,
                                                               const std::string& source) {
  auto files = training_files(pt, source, "train", false);
  if (files.empty()) files.emplace_back("train.py", source);
  return files;
}

std::vector<std::string> torchrun_flags(const torch_topology& t) {
  return {"--nproc_per_node=" + t.nproc_per_node,
          "--nnodes=" + t.nnodes,
          "--node_rank=" + t.node_rank,
          "--rdzv_backend=static",
          "--rdzv_endpoint=" + t.master_addr + ":" + t.master_port,
          "--master_addr=" + t.master_addr,
          "--master_port=" + t.master_port,
          "--monitor_interval=0.2",
          "--redirects",
          "9:1",
          "--tee",
          "9:1"};
}

void torch_from_environment(json::object& plan, int procs) {
  torch_topology topo{"{PET_NNODES}", "{PET_NODE_RANK}", "{PET_NPROC_PER_NODE}", "{PET_MASTER_ADDR}",
                      "{PET_MASTER_PORT}"};
  json::array flags;
  for (auto& f : torchrun_flags(topo)) flags.emplace_back(std::move(f));
  plan["torchrun_args"] = std::move(flags);
  plan["env_defaults"] = json::object{{"PET_NNODES", "1"},
                                      {"PET_NODE_RANK", "0"},
                                      {"PET_NPROC_PER_NODE", std::to_string(procs)},
                                      {"PET_MASTER_ADDR", "127.0.0.1"},
                                      {"PET_MASTER_PORT", "29500"}};
}

std::vector<std::string> code_argv(const std::string& python, bool torch, const torch_topology& t,
                                   const std::string& file, const std::vector<std::string>& args) {
  std::vector<std::string> argv{python};
  if (torch) {
    // Inside a venv there may be no torchrun script; the module is the same program.
    argv.insert(argv.end(), {"-m", "torch.distributed.run"});
    for (auto& f : torchrun_flags(t)) argv.push_back(std::move(f));
  } else {
    argv.push_back("-u");
  }
  argv.push_back(file);
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// The script is a file of its own (adapters/python/scripts/entry.py),
// embedded by the build (cmake/embed_file.cmake).
extern const char* const entry_script_text;

std::string_view entry_script() { return entry_script_text; }

json::object entry_plan(const python_trainer& pt, const std::string& source, bool torch, bool with_code,
                        const std::string& script) {
  json::array packages, pip_args, args;
  for (const auto& p : pt.packages_to_install) packages.emplace_back(p);
  for (const auto& a : pip_install_args({})) pip_args.emplace_back(a);
  json::object pip_env;
  for (const auto& [k, v] : pip_index_environment(index_urls(pt.pip_index_urls))) pip_env[k] = v;
  for (const auto& a : pt.args) args.emplace_back(a);
  json::object plan{{"packages", std::move(packages)},
                    {"pip_args", std::move(pip_args)},
                    {"pip_env", std::move(pip_env)},
                    {"args", std::move(args)},
                    {"torch", torch},
                    {"line_hook", line_hook_module()}};
  if (with_code) {
    json::object shipped;
    auto files = shipped_files(pt, source);
    for (const auto& [file, text] : files) shipped[file] = text;
    plan["run"] = files.front().first;
    plan["files"] = std::move(shipped);
  } else {
    plan["script"] = script;
  }
  return plan;
}

extern const char* const helper_init_py;
extern const char* const helper_report_py;

std::vector<std::pair<std::string, std::string>> helper_files() {
  return {{"tjob/__init__.py", helper_init_py}, {"tjob/report.py", helper_report_py}};
}

std::string line_hook_module() {
  return R"py(# Put here by tjob: each line a process prints reaches the log in one write, so
# the lines of processes sharing the log (torch ranks) never tear each other;
# and a job's warning signal is handled (see line_hook_module in tjob's
# adapters/python/python_plan.hpp).
import sys


def _whole_lines():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True, write_through=False)
            stream._CHUNK_SIZE = 1 << 20
        except Exception:
            pass


_whole_lines()


def _warned(signum, frame):
    sys._tjob_stop_requested = True


def _handle_warning():
    # A job warned before its deadline (tjob train --signal USR1@60s) gets the
    # signal in every process, a torch node's agent too: none dies of it, and
    # tjob.stop_requested() turns true. The code may put its own handler.
    import os
    name = os.environ.get("TJOB_STOP_SIGNAL")
    if not name:
        return
    import signal
    try:
        number = int(name) if name.isdigit() else signal.Signals["SIG" + name]
        if signal.getsignal(number) == signal.SIG_DFL:
            signal.signal(number, _warned)
    except (KeyError, ValueError, OSError):
        pass


_handle_warning()
)py";
}

std::string failure_hook_module() {
  return R"py(# Put here by tjob: records the first uncaught exception of a torch worker
# (see failure_hook_module in tjob's adapters/python/python_plan.hpp).
import os
import sys


def _install():
    where = os.environ.get("TJOB_FAILURE_DIR")
    rank = os.environ.get("RANK")
    if not where or rank is None:
        return
    previous = sys.excepthook

    def record(kind, value, tb):
        # The traceback first: the record makes tjob stop every node, this one too.
        previous(kind, value, tb)
        try:
            import time
            text = str(value).strip().splitlines()
            line = "%d %s %s %s%s\n" % (time.time_ns(), os.environ.get("GROUP_RANK", ""), rank,
                                         kind.__name__, (": " + text[0][:200]) if text else "")
            path = os.path.join(where, "rank-" + rank)
            with open(path + ".tmp", "w") as f:
                f.write(line)
            os.replace(path + ".tmp", path)
        except Exception:
            pass

    sys.excepthook = record


_install()
)py";
}

}  // namespace tjob::python
