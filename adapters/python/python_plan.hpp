// The Python plan every backend shares: the checks of a Python trainer, the
// training files (the code with its call, the keyword arguments), the
// torchrun flags, and the entry script that containers and pods run. The
// package rules and pip's command line are in python_setup.hpp. Each is
// written once here; the local, container and kubernetes backends only say
// where the pieces go.
//
// Threading: pure functions.
// Errors: tjob::error(invalid_argument) naming the job (`who`), the field and the fix.
#pragma once

#include <tjob/types.hpp>

#include <boost/json/object.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tjob::python {

/// The text of a training file (at most 16 MiB).
std::string read_source(const std::string& who, const std::string& file);

/// Checks a Python trainer's code fields (source or source_file, function,
/// function_args, args, packages, env) and returns the source text (empty for
/// a script file given by path). Makes source_file absolute.
std::string check_python_code(const std::string& who, python_trainer& pt);

/// check_python_code, then what a job that installs its packages where it
/// runs needs: each package is a requirement, gpus is not negative. Returns
/// the source text, read from source_file when it is empty.
std::string check_remote_trainer(const std::string& who, python_trainer& pt);

/// gpus is 0 or more.
void check_gpus(const std::string& who, const python_trainer& pt);

/// The files the code runs from, the first the one to run: script text as it
/// is (`<stem>.py`); for a function, its launcher (`<stem>.py`, see
/// function_launcher), the code it loads (`<stem>.code.py`, unless the code
/// is a file on this machine, which is loaded where it is) and, with
/// arguments, `<stem>.kwargs.json`. Empty for a script given by path.
std::vector<std::pair<std::string, std::string>> training_files(const python_trainer& pt,
                                                                const std::string& source,
                                                                const std::string& stem,
                                                                bool file_is_here = true);

/// A module for a venv's site-packages, imported by the `.pth` line
/// `failure_hook_pth` at the start of every Python process there. In a torch
/// worker (RANK set) with $TJOB_FAILURE_DIR set, an uncaught exception is
/// recorded just after the usual traceback (which must reach the log before
/// the engine stops the node), as one file `rank-<RANK>` holding
/// "<time_ns> <GROUP_RANK> <RANK> <Type>: <first line of the message>": the
/// first failure's node, which the engine blames and stops the others for,
/// whichever node's torchrun ends first. Elsewhere it does nothing.
std::string failure_hook_module();
/// The module's file name, and the `.pth` file (name, text) that imports it.
inline constexpr const char* failure_hook_file = "_tjob_failure_hook.py";
inline constexpr const char* failure_hook_pth = "_tjob_failure_hook.pth";
inline constexpr const char* failure_hook_pth_text = "import _tjob_failure_hook\n";

/// A module that makes every line a Python process prints reach its output
/// in one write(2): stdout and stderr line-buffered (even under `python -u`,
/// which torchrun gives its workers), with room for lines of up to 1 MiB.
/// Processes that share a log (a node's torch ranks) then never tear each
/// other's lines: each write to a file is appended whole (issue 42). It
/// costs a write per line where `-u` made one per print() argument and end.
/// Imported by the `.pth` line `line_hook_pth` in a venv's site-packages
/// (local jobs); `entry_script` puts it on PYTHONPATH as `sitecustomize`,
/// which then runs the environment's own sitecustomize, if any, after it.
/// With $TJOB_STOP_SIGNAL set (a job with a warning, train_request::warning)
/// it also handles that signal in every process: a torch node's agent does
/// not die of it, and tjob.stop_requested() turns true.
std::string line_hook_module();

/// tjob's helper package for a job's code (`import tjob; tjob.report(...)`):
/// its files (path under the package's root, text), embedded at build time
/// from adapters/progress/tjob_shim.py and python/tjob/report.py. Written
/// under $TJOB_HOME by progress::python_helper, or taken along in a plan.
std::vector<std::pair<std::string, std::string>> helper_files();
inline constexpr const char* line_hook_file = "_tjob_lines.py";
inline constexpr const char* line_hook_pth = "_tjob_lines.pth";
inline constexpr const char* line_hook_pth_text = "import _tjob_lines\n";

/// The file the code itself is in (what a syntax check compiles): the
/// user's file when it runs or is loaded where it is, else the name
/// training_files gives the code's text (`<stem>.py` or `<stem>.code.py`).
std::string code_file_of(const python_trainer& pt, const std::string& stem, bool file_is_here = true);

/// The files a job that runs elsewhere (a container, a pod) takes with it:
/// `train.py` (a script file's text too: it cannot read a host path) and,
/// for a function, `train.code.py` and `train.kwargs.json` beside it.
std::vector<std::pair<std::string, std::string>> shipped_files(const python_trainer& pt,
                                                               const std::string& source);

/// Where the nodes of a torch job meet. A value may be a placeholder
/// `{PET_NAME}`, which the entry script fills in from the variable the
/// Kubeflow Trainer controller sets on each node (see entry_plan).
struct torch_topology {
  std::string nnodes = "1", node_rank = "0", nproc_per_node = "1";
  std::string master_addr = "127.0.0.1", master_port = "29500";
};

/// torchrun's flags before the script: a static rendezvous at
/// master_addr:master_port. Spelled with underscores (Debian's torch 1.13
/// knows no other spelling); `--redirects 9:1 --tee 9:1` works around that
/// torch's crash on Python 3.11 (docs/kubeflow-differences.md) and changes
/// nothing for ranks below 9.
std::vector<std::string> torchrun_flags(const torch_topology& t);

/// For a node whose topology comes from its environment (Kubernetes' and
/// Slurm's PET_* variables): the plan's torchrun flags name the variables,
/// filled in on the node, with the defaults of a single node of `procs`.
void torch_from_environment(boost::json::object& plan, int procs);

/// The argv of a node's code in a venv or an image: `python -m
/// torch.distributed.run FLAGS FILE ARGS` for a torch runtime, else
/// `python -u FILE ARGS`.
std::vector<std::string> code_argv(const std::string& python, bool torch, const torch_topology& t,
                                   const std::string& file, const std::vector<std::string>& args);

/// The entry script (Python) that a container or a pod runs as
/// `python ENTRY PLAN`, where PLAN is the plan's JSON text or the path of a
/// file holding it. Everything the user gave is data in the plan: it writes
/// the code (when the plan carries it) to a fresh directory, installs the
/// packages (pip --user, then system-wide, as Kubeflow does), then runs the
/// code under torchrun when the runtime is torch and the image has torch,
/// else under python. Argument vectors only; no shell.
std::string_view entry_script();

/// A plan for entry_script. `with_code`: the code and its arguments travel
/// in the plan (a pod has no files of ours); else `script` names the file.
/// The torchrun flags are filled in later (node by node) or carry
/// placeholders with the given defaults for the controller's variables.
boost::json::object entry_plan(const python_trainer& pt, const std::string& source, bool torch,
                               bool with_code, const std::string& script);

}  // namespace tjob::python
