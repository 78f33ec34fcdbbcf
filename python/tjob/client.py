"""TrainerClient and AsyncTrainerClient: Kubeflow's client over tjob's engine.

The engine runs in this process on a thread of its own. Each call starts an operation there, and its
completion is queued on a channel (tjob._tjob.Channel) that wakes the caller through an eventfd: the
blocking client's thread waits for it in select() (Ctrl-C interrupts that at once, and the job goes
on), the asyncio client's loop reads it among its other descriptors. Either way the caller converts
the result itself, holding the GIL it has; the engine's thread never waits for the GIL.
"""
from __future__ import annotations

import atexit
import collections
import dataclasses
import datetime
import dis
import inspect
import json
import os
import select
import textwrap
import threading
import time
import weakref
from typing import Callable, Dict, Iterator, List, Optional, Set

from . import _tjob
from .types import (
    ARRAY_INDEX,
    ActiveDeadlineSeconds,
    Array,
    Annotations,
    BuiltinTrainer,
    CommandTrainer,
    ContainerBackendConfig,
    CustomTrainer,
    CustomTrainerContainer,
    Event,
    KubernetesBackendConfig,
    Labels,
    LocalProcessBackendConfig,
    Name,
    Dependencies,
    Priority,
    QueueEntry,
    Retries,
    Runtime,
    RuntimeKind,
    RuntimePatch,
    RuntimeTrainer,
    SlurmBackendConfig,
    Step,
    TrainerArgs,
    TrainerCommand,
    TrainerType,
    TrainJob,
)

STATUSES = ("Created", "Running", "Complete", "Failed")
_STATUS_SET = frozenset(STATUSES)


class JobFailedError(RuntimeError):
    """A wait saw the job fail. `job` is the TrainJob; `step` and `exit_code` are the failed step's
    (the one the failure is blamed on); the message quotes its last log lines."""

    def __init__(self, message: str, job: Optional[TrainJob] = None):
        super().__init__(message)
        self.job = job
        failed = [s for s in (job.steps if job else []) if s.status == "Failed"]
        blamed = next((s for s in failed if job and s.reason == job.reason), failed[0] if failed else None)
        self.step = blamed.name if blamed else None
        self.exit_code = blamed.exit_code if blamed else None

    def __reduce__(self):
        return (JobFailedError, (str(self), self.job))


_VALUE_ERRORS = {"job_not_found", "step_not_found", "invalid_name", "duplicate_name", "invalid_argument",
                 "executable_not_found", "runtime_not_found"}


def _exception(error) -> BaseException:
    code, message, diagnostics = error
    if code in _VALUE_ERRORS:
        return ValueError(message)
    if code == "timeout":
        return TimeoutError(message)
    if code in ("job_failed", "unreachable_status"):
        return JobFailedError(message)
    if code == "cancelled":
        import asyncio

        return asyncio.CancelledError()
    return RuntimeError(message)


# --- from Kubeflow's arguments to the engine's request --------------------------------------------------

def _resources(res: Optional[Dict]) -> Dict[str, str]:
    """resources_per_node as the engine reads it (tjob::set_resources_per_node, which checks it)."""
    if res is not None and not isinstance(res, dict):
        raise ValueError(f"resources_per_node={res!r}: give a dict such as {{'cpu': 2, 'memory': '4Gi', 'gpu': 1}}")
    out: Dict[str, str] = {}
    for key, value in (res or {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"resources_per_node {key}={value!r}: give a number or a string such as '4Gi'")
        out[str(key)] = str(value)
    return out


def _globals_read(code) -> set:
    """The global names `code` (and the functions and comprehensions inside it) reads: what
    LOAD_GLOBAL looks up. Attribute names and names imported inside are not among them."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _globals_read(const)
    return names


def _function_source(func: Callable, func_args: Optional[Dict]) -> Dict:
    if not callable(func):
        raise ValueError(f"CustomTrainer.func must be a function, got {type(func).__name__}")
    if not inspect.isfunction(func):
        raise ValueError(f"CustomTrainer.func {func!r}: give a function defined with def; its source is "
                         "what the job runs")
    name = func.__name__
    if name == "<lambda>":
        raise ValueError("CustomTrainer.func is a lambda: its source cannot be run as a job on its own; "
                         "define the function with def")
    if func.__code__.co_freevars:
        raise ValueError(f"CustomTrainer.func {name!r} is a closure over {', '.join(func.__code__.co_freevars)}: "
                         "the job runs only the function's source, so pass those values in func_args")
    # The module's names are not in the job either: the copied source would
    # end in NameError there, after its venv was made (issue 42).
    outside = sorted(n for n in _globals_read(func.__code__) if n != name and n in func.__globals__)
    if outside:
        modules = [n for n in outside if inspect.ismodule(func.__globals__[n])]
        raise ValueError(
            f"CustomTrainer.func {name!r} uses {', '.join(outside)} from its module, which the job does not have "
            "(it runs only the function's source): "
            + (f"import {', '.join(modules)} inside the function, " if modules else "")
            + "define what it needs inside it, or pass values in func_args")
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError) as e:
        raise ValueError(f"CustomTrainer.func {name!r}: its source cannot be read ({e}); define it in a file")
    args = dict(func_args or {})
    params = inspect.signature(func).parameters
    missing = [p.name for p in params.values()
               if p.default is inspect.Parameter.empty
               and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in args]
    if missing:
        raise ValueError(f"CustomTrainer.func {name!r} needs {', '.join(missing)}: add "
                         f"{'it' if len(missing) == 1 else 'them'} to func_args")
    accepts_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
    unknown = [k for k in args if k not in params and not accepts_any]
    if unknown:
        raise ValueError(f"CustomTrainer.func_args: {name!r} takes no argument {', '.join(map(repr, unknown))}")
    def marker(v):  # ARRAY_INDEX: the engine puts each member's index there (tjob::array_members)
        if v is ARRAY_INDEX:
            return {"__tjob__": "array_index"}
        raise TypeError(f"Object of type {type(v).__name__} is not JSON serializable")

    try:
        encoded = json.dumps(args, default=marker, allow_nan=False)
    except ValueError as e:
        if "Out of range float" in str(e):  # NaN and the infinities: Python writes them, JSON has none
            raise ValueError("CustomTrainer.func_args holds a NaN or an infinite float, which JSON cannot carry; "
                             "pass it as a string") from None
        raise ValueError(f"CustomTrainer.func_args must be JSON-serialisable: {e}")
    except TypeError as e:
        raise ValueError(f"CustomTrainer.func_args must be JSON-serialisable: {e}")
    return {"source": source, "function": name, "function_args": encoded}


def _strings(value, field: str, example: str, what: str = "a list of strings") -> List[str]:
    """A list of strings (None: empty); a str alone is refused, not taken letter by letter."""
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) \
            or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{field}={value!r}: give {what}, such as {example}")
    return list(value)


def _text(value, field: str) -> str:
    """An optional string (None: empty)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{field}={value!r}: give a string")
    return value


def _nodes(value, field: str) -> int:
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{field}={value!r}: give a whole number, 1 or more")
    return value


def _string_map(value, field: str, example: str = "{'LR': '0.1'}") -> Dict[str, str]:
    """A dict of strings to strings (None: empty)."""
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"{field}={value!r}: give a dict of names to values, such as {example}")
    out = {}
    for k, v in (value or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError(f"{field}: {k!r}={v!r}: names and values must be strings")
        out[k] = v
    return out


# What each field of a backend config takes: (the check, what to say when it fails).
def _is_whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_FIELD_KINDS = {
    "flag": (lambda v: isinstance(v, bool), "True or False"),
    "text": (lambda v: isinstance(v, str), "a string"),
    "text?": (lambda v: v is None or isinstance(v, str), "a string, or None"),
    "path?": (lambda v: v is None or isinstance(v, (str, os.PathLike)), "a path (a str or a pathlib.Path), or None"),
    "seconds?": (lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v),
                 "a number of seconds, 0 or more, or None"),
    "count?": (lambda v: v is None or (_is_whole(v) and v >= 0), "a whole number, 0 or more (0: no limit), or None"),
    "count": (lambda v: _is_whole(v) and v >= 1, "a whole number, 1 or more"),
    "bytes?": (lambda v: v is None or isinstance(v, str) or (_is_whole(v) and v >= 0),
               "bytes as a whole number or a string such as '16Gi' (0: no limit), or None"),
    "strings": (lambda v: isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v),
                "a list of strings"),
    "mounts": (lambda v: isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v) or
               isinstance(v, dict) and all(isinstance(k, (str, os.PathLike)) and isinstance(m, dict)
                                           and isinstance(m.get("bind"), str) and m.get("mode", "rw") in ("ro", "rw")
                                           and set(m) <= {"bind", "mode"} for k, m in v.items()),
               "a list of 'SOURCE:CONTAINER[:ro]' strings, or a dict {SOURCE: {'bind': CONTAINER, "
               "'mode': 'ro' or 'rw'}}"),
    "string map?": (lambda v: v is None or isinstance(v, dict) and all(isinstance(k, str) and k and "=" not in k
                                                                        and isinstance(x, str) for k, x in v.items()),
                    "a dict of names to string values, such as {'HTTPS_PROXY': 'http://proxy:3128'}, or None"),
}


def _mounts(volumes) -> List[str]:
    """A checked `volumes` field as the engine takes it: SOURCE:CONTAINER:MODE strings."""
    if isinstance(volumes, dict):
        return [f"{os.fspath(k)}:{m['bind']}:{m.get('mode', 'rw')}" for k, m in volumes.items()]
    return list(volumes)

_CONFIG_FIELDS = {
    "LocalProcessBackendConfig": dict(
        cleanup_venv="flag", home="path?", python="path?", system_site_packages="flag", venv_cache="flag",
        grace_period="seconds?", max_running="count?", cpu_budget="count?", memory_budget="bytes?"),
    "ContainerBackendConfig": dict(
        pull_policy="text", auto_remove="flag", container_host="text?", container_runtime="text?",
        dataset_initializer_image="text", model_initializer_image="text", initializer_timeout="count",
        home="path?", image="text?", network="text", volumes="mounts", env="string map?", grace_period="seconds?",
        max_running="count?", cpu_budget="count?", memory_budget="bytes?"),
    "KubernetesBackendConfig": dict(namespace="text?", config_file="path?", context="text?", home="path?"),
    "SlurmBackendConfig": dict(
        slurm_conf="path?", partition="text?", account="text?", qos="text?", sbatch_options="strings",
        shared_dir="path?", pack_nodes="flag", python="path?", system_site_packages="flag", home="path?",
        grace_period="seconds?"),
}


def _checked_config(c):
    """A backend config with every field checked, its paths as strings; a bad one is a ValueError naming it."""
    kind = type(c).__name__
    paths = {}
    for name, what in _CONFIG_FIELDS[kind].items():
        v = getattr(c, name)
        ok, takes = _FIELD_KINDS[what]
        if not ok(v):
            raise ValueError(f"{kind}.{name}={v!r}: give {takes}")
        if what == "path?" and v is not None:
            paths[name] = os.fspath(v)
    return dataclasses.replace(c, **paths)


def _request(caps: Dict, defaults: Dict, runtime, initializer, trainer, options) -> Dict:
    """The request, checked against what the backend does (its capabilities, never its name)."""
    backend = caps["id"]
    if initializer is not None:
        raise ValueError("initializer: tjob does not run dataset or model initializers; fetch the data in "
                         "the training function")
    if isinstance(trainer, BuiltinTrainer):
        raise ValueError("BuiltinTrainer: tjob does not run Kubeflow's builtin (TorchTune) trainers; use "
                         "CustomTrainer with your own function")
    req: Dict = {"labels": {}, "annotations": {}}
    if isinstance(runtime, Runtime):
        req["runtime"] = runtime.name
    elif isinstance(runtime, str):
        req["runtime"] = runtime
    elif runtime is not None:
        raise ValueError(f"runtime must be a name or a Runtime, got {type(runtime).__name__}")
    command: Optional[List[str]] = None
    args: Optional[List[str]] = None
    for opt in options or []:
        if isinstance(opt, Name):
            if not isinstance(opt.name, str) or not opt.name:
                raise ValueError(f"Name({opt.name!r}): give the job's name as a string, such as 'mnist-1'")
            req["name"] = opt.name
        elif isinstance(opt, (Labels, Annotations, TrainerCommand, TrainerArgs)) and not caps["keeps_labels"]:
            raise ValueError(f"{type(opt).__name__} option is not compatible with the {backend} backend. "
                             "Supported backends: KubernetesBackend")
        elif isinstance(opt, Labels):
            req["labels"].update(_string_map(opt.labels, "Labels.labels", "{'team': 'vision'}"))
        elif isinstance(opt, Annotations):
            req["annotations"].update(_string_map(opt.annotations, "Annotations.annotations", "{'owner': 'ana'}"))
        elif isinstance(opt, TrainerCommand):
            command = _strings(opt.command, "TrainerCommand.command", "['python', 'train.py']")
        elif isinstance(opt, TrainerArgs):
            args = _strings(opt.args, "TrainerArgs.args", "['--epochs', '3']")
        elif isinstance(opt, ActiveDeadlineSeconds):
            # Kubeflow's rule: an int of at least 1
            if not isinstance(opt.seconds, int) or isinstance(opt.seconds, bool) or opt.seconds < 1:
                raise ValueError(f"ActiveDeadlineSeconds({opt.seconds!r}): give a whole number of seconds, 1 or more")
            req["active_deadline"] = opt.seconds
        elif isinstance(opt, Dependencies):
            for key in ("after_ok", "after_any", "after_not_ok"):
                names = _strings(getattr(opt, key), f"Dependencies.{key}", "['prep-1']", "a list of job names")
                req[key] = req.get(key, []) + names
        elif isinstance(opt, Priority):
            if not isinstance(opt.priority, int) or isinstance(opt.priority, bool):
                raise ValueError(f"Priority({opt.priority!r}): give a whole number (higher starts first)")
            req["priority"] = opt.priority
        elif isinstance(opt, Retries):
            req["retry"] = _retry_of(opt)
        elif isinstance(opt, Array):
            if not isinstance(opt.spec, str) or not opt.spec:
                raise ValueError(f"Array({opt.spec!r}): give the indices as a string, such as '0-99%8'")
            if not caps["arrays"]:
                raise ValueError(f"Array option is not compatible with the {backend} backend: job arrays are the "
                                 "engine's, on the local and container backends (docs/scheduling.md)")
            req["_array"] = opt.spec
        elif isinstance(opt, RuntimePatch):
            raise ValueError("RuntimePatch: tjob does not patch runtimes; give a runtime that is as you need it "
                             "(a ClusterTrainingRuntime manifest in a runtime directory)")
        else:
            raise ValueError(f"options: {opt!r} is not an option tjob knows (Name, Labels, Annotations, "
                             "TrainerCommand, TrainerArgs, ActiveDeadlineSeconds, Priority, Dependencies, Retries, Array)")
    if "_array" in req and not req.get("name"):
        raise ValueError("Array option needs the Name option: the members are NAME-0, NAME-1, ... and NAME "
                         "addresses them all")
    if (command or args) and not isinstance(trainer, CustomTrainerContainer):
        raise ValueError("TrainerCommand and TrainerArgs can only be used with CustomTrainerContainer")
    if isinstance(trainer, CustomTrainer):
        if isinstance(trainer.func, (str, os.PathLike)):
            path = os.fspath(trainer.func)
            if not path.endswith(".py") or not os.path.isfile(path):
                raise ValueError(f"CustomTrainer.func={path!r}: give a function, or the path of a .py script "
                                 "that exists")
            if trainer.func_args:
                raise ValueError("CustomTrainer.func_args go to a function; a script takes args")
            if trainer.args is not None and (isinstance(trainer.args, (str, bytes))
                                             or not isinstance(trainer.args, (list, tuple))):
                raise ValueError(f"CustomTrainer.args={trainer.args!r}: give the script's arguments as a list, "
                                 "such as ['--epochs', '3']")
            t = {"kind": "python", "source_file": os.path.abspath(path),
                 "args": [str(a) for a in trainer.args or []]}
        else:
            if trainer.args:
                raise ValueError("CustomTrainer.args go to a script; a function takes func_args")
            if trainer.func_args is not None and not isinstance(trainer.func_args, dict):
                raise ValueError(f"CustomTrainer.func_args={trainer.func_args!r}: give a dict of the function's "
                                 "keyword arguments, such as {'lr': 0.1}")
            t = {"kind": "python", **_function_source(trainer.func, trainer.func_args)}
        if trainer.working_dir is not None:
            if not isinstance(trainer.working_dir, (str, os.PathLike)) or not os.fspath(trainer.working_dir):
                raise ValueError(f"CustomTrainer.working_dir={trainer.working_dir!r}: give the path of a local "
                                 "directory to send with the job")
            path = os.path.abspath(os.fspath(trainer.working_dir))
            if not os.path.isdir(path):
                raise ValueError(f"CustomTrainer.working_dir={trainer.working_dir!r}: {path} is not a directory")
            if not caps["takes_code_dir"] and not caps["forwards"]:
                raise ValueError(f"CustomTrainer.working_dir is not compatible with the {backend} backend: it cannot "
                                 "send a directory with a job; bake the code into the job's image")
            t["code_dir"] = path
        t["packages_to_install"] = _strings(trainer.packages_to_install, "CustomTrainer.packages_to_install",
                                            "['numpy', 'torch==2.3']")
        t["pip_index_urls"] = _strings(trainer.pip_index_urls, "CustomTrainer.pip_index_urls",
                                       "['https://pypi.org/simple']")
        t["env"] = _string_map(trainer.env, "CustomTrainer.env")
        t["image"] = _text(trainer.image, "CustomTrainer.image")
        t["resources_per_node"] = _resources(trainer.resources_per_node)
        t.update(defaults)
        req["num_nodes"] = _nodes(trainer.num_nodes, "CustomTrainer.num_nodes")
    elif isinstance(trainer, CommandTrainer):
        command_line = _strings(trainer.command, "CommandTrainer.command", "['python3', 'train.py']")
        if not command_line:
            raise ValueError("CommandTrainer.command=[]: give the program and its arguments, such as "
                             "['python3', 'train.py']")
        t = {"kind": "command", "command": command_line,
             "env": _string_map(trainer.env, "CommandTrainer.env"),
             "working_dir": _text(trainer.working_dir, "CommandTrainer.working_dir"),
             "image": _text(trainer.image, "CommandTrainer.image")}
        req["num_nodes"] = _nodes(trainer.num_nodes, "CommandTrainer.num_nodes")
    elif isinstance(trainer, CustomTrainerContainer):
        if not caps["runs_images_as_is"]:
            raise ValueError("CustomTrainerContainer runs an image as it is: only the kubernetes backend "
                             "takes it (Kubeflow's rule)")
        if command is None and args is None:
            raise ValueError("CustomTrainerContainer: give the image's command with the TrainerCommand option")
        if not isinstance(trainer.image, str) or not trainer.image:
            raise ValueError(f"CustomTrainerContainer.image={trainer.image!r}: give the image's name")
        t = {"kind": "command", "command": (command or []) + (args or []), "image": trainer.image,
             "env": _string_map(trainer.env, "CustomTrainerContainer.env")}
        req["num_nodes"] = _nodes(trainer.num_nodes, "CustomTrainerContainer.num_nodes")
        if trainer.resources_per_node:
            raise ValueError("CustomTrainerContainer.resources_per_node: not supported by tjob yet")
    elif trainer is None:
        raise ValueError("trainer: give a CustomTrainer (a function to run)")
    else:
        raise ValueError(f"trainer: {type(trainer).__name__} is not a trainer tjob runs")
    req["trainer"] = t
    return req


def _backend_config(**options) -> str:
    """A backend's own options as its JSON config (the backend checks them: a bad one is refused by name)."""
    return json.dumps({k: v for k, v in options.items() if v is not None})


def _config(backend_config) -> (str, Dict, Dict):
    """The engine's config, and what the backend puts in every Python trainer."""
    if backend_config is None or isinstance(backend_config, LocalProcessBackendConfig):
        c = _checked_config(backend_config or LocalProcessBackendConfig())
        # unset: the engine takes $TJOB_PYTHON and $TJOB_SYSTEM_SITE_PACKAGES=1
        python = c.python or ""
        ssp = bool(c.system_site_packages)
        cfg = {"backend": "local", "backend_config": "{}", "home": c.home, "cleanup_venv": c.cleanup_venv,
               "venv_cache": c.venv_cache, "grace_period": c.grace_period, "max_running": c.max_running,
               "cpu_budget": c.cpu_budget, "memory_budget": c.memory_budget}
        return "local", cfg, {"python": python, "system_site_packages": ssp}
    if isinstance(backend_config, ContainerBackendConfig):
        c = _checked_config(backend_config)
        if c.container_runtime not in (None, "docker", "podman"):
            raise ValueError(f"ContainerBackendConfig.container_runtime={c.container_runtime!r}: use docker, "
                             "podman or None (whichever answers)")
        cfg = {"backend": "container",
               "backend_config": _backend_config(pull_policy=c.pull_policy, auto_remove=c.auto_remove,
                                                 container_host=c.container_host,
                                                 container_runtime=c.container_runtime, image=c.image,
                                                 network=c.network, volumes=_mounts(c.volumes),
                                                 env=[f"{k}={v}" for k, v in (c.env or {}).items()] or None),
               "home": c.home, "grace_period": c.grace_period, "max_running": c.max_running,
               "cpu_budget": c.cpu_budget, "memory_budget": c.memory_budget}
        return "container", cfg, {}
    if isinstance(backend_config, KubernetesBackendConfig):
        c = _checked_config(backend_config)
        if c.client_configuration is not None:
            raise ValueError("KubernetesBackendConfig.client_configuration: tjob reads the kubeconfig itself; "
                             "give config_file and context")
        cfg = {"backend": "kubernetes",
               "backend_config": _backend_config(namespace=c.namespace, config_file=c.config_file,
                                                 context=c.context),
               "home": c.home}
        return "kubernetes", cfg, {}
    if isinstance(backend_config, SlurmBackendConfig):
        c = _checked_config(backend_config)
        cfg = {"backend": "slurm",
               "backend_config": _backend_config(slurm_conf=c.slurm_conf, partition=c.partition, account=c.account,
                                                 qos=c.qos, sbatch_options=list(c.sbatch_options),
                                                 shared_dir=c.shared_dir, pack_nodes=c.pack_nodes),
               "home": c.home, "grace_period": c.grace_period}
        return "slurm", cfg, {"python": c.python or "", "system_site_packages": bool(c.system_site_packages)}
    raise ValueError(f"Invalid backend config '{backend_config!r}': use LocalProcessBackendConfig, "
                     "ContainerBackendConfig, KubernetesBackendConfig or SlurmBackendConfig")


def _queue_entry(q: Dict) -> QueueEntry:
    return QueueEntry(name=q["name"], position=q["position"], priority=q["priority"], waits_for=q["waits_for"],
                      since=_time(q["since"]), cpus=q["cpus"], memory=q["memory"], gpus=q["gpus"])


def _time(seconds: Optional[float]) -> Optional[datetime.datetime]:
    if seconds is None:
        return None
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)


def _runtime(d: Dict) -> Runtime:
    t = d["trainer"]
    try:
        trainer_type = TrainerType(t["trainer_type"])
    except ValueError:
        trainer_type = t["trainer_type"]
    try:
        kind = RuntimeKind(d["kind"])
    except ValueError:
        kind = d["kind"]
    return Runtime(name=d["name"], kind=kind,
                   trainer=RuntimeTrainer(trainer_type=trainer_type, framework=t["framework"], image=t["image"],
                                          num_nodes=t["num_nodes"], device=t["device"],
                                          device_count=t["device_count"], packages=list(t["packages"])))


def _array_members(jobs: List[TrainJob], name: str) -> List[TrainJob]:
    """The members of job array `name` among `jobs`, in index order (NAME-<i>)."""
    def index(j: TrainJob) -> int:
        tail = j.name[len(name) + 1:]
        return int(tail) if tail.isdigit() else -1
    return sorted((j for j in jobs if j.array == name), key=index)


def _check_wait(status, timeout, polling_interval):
    if timeout is None or timeout <= 0:
        raise ValueError(f"Timeout must be a positive number, got timeout={timeout}")
    if polling_interval is None or polling_interval <= 0:
        raise ValueError(f"Polling interval must be a positive number, got polling_interval={polling_interval}")
    if polling_interval >= timeout:
        raise ValueError("Polling interval must be strictly less than timeout. Received "
                         f"polling_interval={polling_interval}, timeout={timeout}")
    wanted = set(status)
    if not wanted or not wanted <= _STATUS_SET:
        raise ValueError(f"Expected status {wanted} must be a subset of {set(STATUSES)}")
    return sorted(wanted)


def _retry_of(opt: "Retries") -> Dict:
    """The Retries option as the engine takes it; the engine checks the ranges and words the errors."""
    def whole(v):
        return isinstance(v, int) and not isinstance(v, bool)

    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if not whole(opt.max_restarts):
        raise ValueError(f"Retries.max_restarts={opt.max_restarts!r}: give a whole number of restarts")
    for key in ("backoff_seconds", "max_backoff_seconds"):
        v = getattr(opt, key)
        if not number(v) or not 0 <= v <= 86400:
            raise ValueError(f"Retries.{key}={v!r}: give 0 to 86400 seconds (a day)")
    if not number(opt.backoff_factor):
        raise ValueError(f"Retries.backoff_factor={opt.backoff_factor!r}: give a number from 1 to 100")
    for key in ("retry_on", "never_retry"):
        codes = getattr(opt, key)
        if isinstance(codes, (str, bytes)) or not all(whole(c) for c in codes):
            raise ValueError(f"Retries.{key}={codes!r}: give a list of exit codes (1 to 255)")
    return {"max_restarts": opt.max_restarts, "backoff_seconds": float(opt.backoff_seconds),
            "backoff_factor": float(opt.backoff_factor), "max_backoff_seconds": float(opt.max_backoff_seconds),
            "retry_on": list(opt.retry_on), "never_retry": list(opt.never_retry)}


def _log_options(step, follow, tail, timestamps, since, attempt=None) -> Dict:
    o = {"step": step, "follow": bool(follow), "timestamps": bool(timestamps)}
    if attempt is not None:
        if not isinstance(attempt, int) or isinstance(attempt, bool):
            raise ValueError(f"attempt={attempt!r}: give an attempt number, 1 for the first")
        o["attempt"] = attempt
    if tail is not None:
        if not isinstance(tail, int) or isinstance(tail, bool) or tail < 0:
            raise ValueError(f"tail={tail!r}: give 0 or more lines")
        o["tail"] = tail
    if since is not None:
        if isinstance(since, datetime.timedelta):
            o["since"] = time.time() - since.total_seconds()
        elif isinstance(since, datetime.datetime):
            if since.tzinfo is None:
                since = since.astimezone()
            o["since"] = since.timestamp()
        else:
            raise ValueError(f"since={since!r}: give a datetime or a timedelta back from now")
    return o


class _Lines:
    """Bytes in, lines (with their '\\n') out."""

    def __init__(self):
        self.lines = collections.deque()
        self.rest = b""

    def feed(self, chunk: Optional[bytes]):
        if chunk is None:
            if self.rest:
                self.lines.append(self.rest.decode("utf-8", "replace"))
                self.rest = b""
            return
        data = self.rest + chunk
        parts = data.split(b"\n")
        self.rest = parts.pop()
        self.lines.extend(p.decode("utf-8", "replace") + "\n" for p in parts)


# Clients still open when the interpreter exits are closed first, while
# Python can still run their engines' last callbacks.
_open_clients = weakref.WeakSet()


@atexit.register
def _close_all():
    for c in list(_open_clients):
        c.close()


class _Base:
    def __init__(self, backend_config=None):
        self._backend, cfg, self._defaults = _config(backend_config)
        self._caps = json.loads(_tjob.backend_capabilities(self._backend))
        self._config_dict = cfg
        self._engine = _tjob.Client(cfg)
        _open_clients.add(self)
        self._runtimes: Dict[str, Optional[Runtime]] = {}
        self._lock = threading.Lock()

    @property
    def home(self) -> str:
        """The store of this client ($TJOB_HOME, or the config's home)."""
        return self._engine.home

    def _request(self, runtime, initializer, trainer, options) -> Dict:
        return _request(self._caps, self._defaults, runtime, initializer, trainer, options)

    def _job(self, d: Dict, runtimes: Dict) -> TrainJob:
        steps = [Step(name=s["name"], status=s["status"], pod_name=s["name"] if self._caps["runs_here"] else "",
                      exit_code=s["exit_code"], reason=s["reason"], attempt=s["attempt"]) for s in d["steps"]]
        return TrainJob(name=d["name"], runtime=runtimes.get(d["runtime"]), steps=steps, num_nodes=d["num_nodes"],
                        creation_timestamp=_time(d["creation_timestamp"]), status=d["status"],
                        start_time=_time(d["start_time"]), end_time=_time(d["end_time"]), reason=d["reason"],
                        array=d["array"], progress_percent=d["progress_percent"],
                        estimated_remaining_seconds=d["estimated_remaining_seconds"], metrics=dict(d["metrics"]),
                        updated=_time(d["updated"]))

    def _events(self, name: str, evs: List[Dict]) -> List[Event]:
        return [Event(involved_object_kind="Step" if e["step"] else "TrainJob",
                      involved_object_name=e["step"] or name, message=e["message"], reason=e["reason"],
                      event_time=_time(e["time"]), progress_percent=e["progress_percent"],
                      estimated_remaining_seconds=e["estimated_remaining_seconds"], metrics=dict(e["metrics"]))
                for e in evs]

    def close(self):
        """Stops this client's engine. Jobs it started and still runs are later found lost (as with the
        C++ client); use a detached job (`train(..., detach=True)`) to outlive the process."""
        self._engine.close()
        _open_clients.discard(self)


class _Pending:
    __slots__ = ("done", "result", "error")

    def __init__(self):
        self.done = False
        self.result = None
        self.error = None

    def __call__(self, result, error):  # in _run's drain, on the calling thread
        self.result, self.error, self.done = result, error, True


_thread = threading.local()


def _thread_channel():
    """This thread's channel: the engine queues the completions of its calls there and wakes it through
    an eventfd; it converts them itself (the engine's thread never waits for the GIL)."""
    ch = getattr(_thread, "channel", None)
    if ch is None:
        ch = _thread.channel = _tjob.Channel()
    return ch


def _run(start, *args):
    p = _Pending()
    ch = _thread_channel()
    call = start(*args, ch.target(p))
    try:
        while not p.done:
            select.select([ch.fileno()], [], [])  # Ctrl-C interrupts it at once
            ch.drain()
    except BaseException:  # KeyboardInterrupt: stop waiting; the job goes on
        call.cancel()
        raise
    if p.error is not None:
        raise _exception(p.error)
    return p.result


class TrainerClient(_Base):
    """Kubeflow's TrainerClient on tjob's engine. `backend_config`: LocalProcessBackendConfig (tjob's
    default; Kubeflow's is Kubernetes), ContainerBackendConfig, KubernetesBackendConfig or SlurmBackendConfig."""

    def __init__(self, backend_config=None):
        super().__init__(backend_config)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _runtime_map(self, names) -> Dict[str, Optional[Runtime]]:
        with self._lock:
            missing = [n for n in set(names) if n not in self._runtimes]
        for n in missing:
            r = None
            if n:
                try:
                    r = _runtime(_run(self._engine.get_runtime, n))
                except ValueError:
                    r = Runtime(name=n, trainer=RuntimeTrainer(trainer_type=TrainerType.CUSTOM_TRAINER,
                                                               framework="unknown"))
            with self._lock:
                self._runtimes[n] = r
        with self._lock:
            return dict(self._runtimes)

    def _job_of(self, d: Dict) -> TrainJob:
        return self._job(d, self._runtime_map([d["runtime"]]))

    def list_runtimes(self) -> List[Runtime]:
        return [_runtime(d) for d in _run(self._engine.list_runtimes)]

    def get_runtime(self, name: str) -> Runtime:
        return _runtime(_run(self._engine.get_runtime, name))

    def get_runtime_packages(self, runtime: Runtime) -> List[str]:
        """The runtime's packages (as Kubeflow's local backend returns them)."""
        name = runtime.name if isinstance(runtime, Runtime) else runtime
        return list(self.get_runtime(name).trainer.packages)

    def train(self, runtime=None, initializer=None, trainer=None, options=None, detach: bool = False) -> str:
        """Starts the job; returns its name (with the Array option: the array's, its members are NAME-<i>).
        `detach` (tjob): the job is owned by a supervising process (one for all of an array) and runs to its
        end after this program has returned (local backend)."""
        req = self._request(runtime, initializer, trainer, options)
        array = req.pop("_array", None)
        if array is not None:  # the members, all or nothing; the array's name comes back
            if detach:
                names, error = _tjob.train_detached_array(req, array, self._config_dict)
                if error is not None:
                    raise _exception(error)
            else:
                _run(self._engine.train_array, req, array)
            return req["name"]
        if detach:
            name, error = _tjob.train_detached(req, self._config_dict)
            if error is not None:
                raise _exception(error)
            return name
        return _run(self._engine.train, req)

    def list_jobs(self, runtime: Optional[Runtime] = None) -> List[TrainJob]:
        name = runtime.name if isinstance(runtime, Runtime) else runtime
        jobs = _run(self._engine.list_jobs, name)
        rts = self._runtime_map([d["runtime"] for d in jobs])
        return [self._job(d, rts) for d in jobs]

    def get_job(self, name: str) -> TrainJob:
        return self._job_of(_run(self._engine.get_job, name))

    def get_job_logs(self, name: str, step: str = "node-0", follow: bool = False, tail: Optional[int] = None,
                     timestamps: bool = False, since=None, attempt: Optional[int] = None) -> Iterator[str]:
        """The step's log, line by line (each with its '\\n'); with `follow`, as it is written, until
        the step ends; `attempt`: only that attempt's output of a restarted job (Retries). Like
        Kubeflow's, a generator: errors come when it is iterated."""
        options = _log_options(step, follow, tail, timestamps, since, attempt)
        log = _run(self._engine.open_logs, name, options)
        lines = _Lines()
        while True:
            while lines.lines:
                yield lines.lines.popleft()
            if log is None:
                return
            chunk = _run(log.read)
            lines.feed(chunk)
            if chunk is None:
                log = None

    def get_job_events(self, name: str) -> List[Event]:
        return self._events(name, _run(self._engine.events, name))

    def get_queue(self) -> List[QueueEntry]:
        """tjob's: the jobs waiting for admission on this store, next first (what `tjob queue` lists)."""
        return [_queue_entry(q) for q in _run(self._engine.queue)]

    def wait_for_job_status(self, name: str, status: Set[str] = {"Complete"}, timeout: int = 600,
                            polling_interval: int = 2, callbacks: Optional[List[Callable]] = None) -> TrainJob:
        """Waits until the job reaches one of `status`, woken by the engine's events
        (`polling_interval` is accepted and not used). Raises JobFailedError (a RuntimeError) when the
        job fails and Failed was not asked for, TimeoutError at `timeout` seconds. Each callback is
        called with the TrainJob at the start and at every change."""
        wanted = _check_wait(status, timeout, polling_interval)
        if not callbacks:
            try:
                return self._job_of(_run(self._engine.wait, name, wanted, float(timeout)))
            except JobFailedError as e:
                raise JobFailedError(str(e), self._job_or_none(name)) from None
        deadline = time.monotonic() + timeout
        watch, now = _run(self._engine.open_watch, name)
        while True:
            if now is None:
                raise ValueError(f"No TrainJob with name {name!r}")
            job = self._job_of(now)
            for cb in callbacks:
                cb(job)
            if job.status in wanted or job.status in ("Complete", "Failed"):
                break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            now = _run(watch.next, left)
        left = max(deadline - time.monotonic(), 0.001)
        try:  # the end as the engine words it: failures with their last lines, the timeout
            return self._job_of(_run(self._engine.wait, name, wanted, left))
        except JobFailedError as e:
            raise JobFailedError(str(e), self._job_or_none(name)) from None

    def _job_or_none(self, name: str) -> Optional[TrainJob]:
        try:
            return self.get_job(name)
        except (ValueError, RuntimeError):
            return None

    def cancel_job(self, name: str, force: bool = False) -> None:
        """Stops the job (SIGTERM, SIGKILL after the grace period; `force`: SIGKILL now). tjob's own. A job
        array's name (the Array option) stops every member that has not ended."""
        try:
            _run(self._engine.cancel_job, name, force)
        except ValueError:
            members = _array_members(self.list_jobs(), name)
            if not members:
                raise
            for j in members:
                if j.status not in ("Complete", "Failed"):
                    _run(self._engine.cancel_job, j.name, force)

    def delete_job(self, name: str) -> None:
        """Deletes the job; a job array's name deletes every member."""
        try:
            _run(self._engine.delete_job, name)
        except ValueError:
            members = _array_members(self.list_jobs(), name)
            if not members:
                raise
            for j in members:
                _run(self._engine.delete_job, j.name)

    def get_array(self, name: str) -> List[TrainJob]:
        """tjob's: the members of job array `name` (the Array option), in index order."""
        members = _array_members(self.list_jobs(), name)
        if not members:
            raise ValueError(f"No job array with name {name!r}")
        return members

    def wait_for_array(self, name: str, status: Set[str] = {"Complete"}, timeout: int = 600) -> List[TrainJob]:
        """tjob's: waits until every member of job array `name` reaches one of `status`, within `timeout`
        seconds in all, as wait_for_job_status waits for one (JobFailedError names the first member that
        failed when Failed was not asked for). Returns the members in index order."""
        wanted = _check_wait(status, timeout, min(timeout / 2, 1))
        deadline = time.monotonic() + timeout
        out = []
        for j in self.get_array(name):
            left = max(deadline - time.monotonic(), 0.001)
            try:
                out.append(self._job_of(_run(self._engine.wait, j.name, wanted, left)))
            except JobFailedError as e:
                raise JobFailedError(str(e), self._job_or_none(j.name)) from None
        return out


class AsyncTrainerClient(_Base):
    """TrainerClient's methods as coroutines, completed from the engine's thread (no thread per call):
    `await client.train(...)`, `async for line in client.get_job_logs(name, follow=True)`."""

    def __init__(self, backend_config=None):
        super().__init__(backend_config)
        self._channels = weakref.WeakKeyDictionary()  # loop -> its channel
        self._last_loop = self._last_channel = None

    def _channel(self, loop):
        # The engine's completions reach this loop in batches: its reader drains them.
        if loop is self._last_loop:
            return self._last_channel
        ch = self._channels.get(loop)
        if ch is None:
            ch = _tjob.Channel()
            loop.add_reader(ch.fileno(), ch.drain)
            self._channels[loop] = ch
        self._last_loop, self._last_channel = loop, ch
        return ch

    async def _call(self, start, *args):
        import asyncio  # here, not at the top: `import tjob` stays cheap for the blocking client

        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def settle(result, error):  # on the loop's thread (the channel's drain)
            if fut.done():
                return
            if error is not None:
                fut.set_exception(_exception(error))
            else:
                fut.set_result(result)

        call = start(*args, self._channel(loop).target(settle))
        try:
            return await fut
        except asyncio.CancelledError:
            call.cancel()
            raise

    def close(self):
        for loop, ch in list(self._channels.items()):
            if not loop.is_closed():
                loop.remove_reader(ch.fileno())
        self._channels.clear()
        self._last_loop = self._last_channel = None
        super().close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.close()

    async def _runtime_map(self, names) -> Dict[str, Optional[Runtime]]:
        known = self._runtimes
        if all(n in known for n in names):
            return known
        for n in set(names) - set(known):
            r = None
            if n:
                try:
                    r = _runtime(await self._call(self._engine.get_runtime, n))
                except ValueError:
                    r = Runtime(name=n, trainer=RuntimeTrainer(trainer_type=TrainerType.CUSTOM_TRAINER,
                                                               framework="unknown"))
            self._runtimes[n] = r
        return self._runtimes

    async def list_runtimes(self) -> List[Runtime]:
        return [_runtime(d) for d in await self._call(self._engine.list_runtimes)]

    async def get_runtime(self, name: str) -> Runtime:
        return _runtime(await self._call(self._engine.get_runtime, name))

    async def get_runtime_packages(self, runtime: Runtime) -> List[str]:
        name = runtime.name if isinstance(runtime, Runtime) else runtime
        return list((await self.get_runtime(name)).trainer.packages)

    async def train(self, runtime=None, initializer=None, trainer=None, options=None) -> str:
        req = self._request(runtime, initializer, trainer, options)
        array = req.pop("_array", None)
        if array is not None:
            await self._call(self._engine.train_array, req, array)
            return req["name"]
        return await self._call(self._engine.train, req)

    async def list_jobs(self, runtime: Optional[Runtime] = None) -> List[TrainJob]:
        name = runtime.name if isinstance(runtime, Runtime) else runtime
        jobs = await self._call(self._engine.list_jobs, name)
        rts = await self._runtime_map([d["runtime"] for d in jobs])
        return [self._job(d, rts) for d in jobs]

    async def get_job(self, name: str) -> TrainJob:
        d = await self._call(self._engine.get_job, name)
        return self._job(d, await self._runtime_map([d["runtime"]]))

    async def get_job_logs(self, name: str, step: str = "node-0", follow: bool = False,
                           tail: Optional[int] = None, timestamps: bool = False, since=None,
                           attempt: Optional[int] = None):
        options = _log_options(step, follow, tail, timestamps, since, attempt)
        log = await self._call(self._engine.open_logs, name, options)
        lines = _Lines()
        while True:
            while lines.lines:
                yield lines.lines.popleft()
            if log is None:
                return
            chunk = await self._call(log.read)
            lines.feed(chunk)
            if chunk is None:
                log = None

    async def get_job_events(self, name: str) -> List[Event]:
        return self._events(name, await self._call(self._engine.events, name))

    async def get_queue(self) -> List[QueueEntry]:
        return [_queue_entry(q) for q in await self._call(self._engine.queue)]

    async def wait_for_job_status(self, name: str, status: Set[str] = {"Complete"}, timeout: int = 600,
                                  polling_interval: int = 2, callbacks: Optional[List[Callable]] = None
                                  ) -> TrainJob:
        wanted = _check_wait(status, timeout, polling_interval)
        deadline = time.monotonic() + timeout
        if callbacks:
            watch, now = await self._call(self._engine.open_watch, name)
            while True:
                if now is None:
                    raise ValueError(f"No TrainJob with name {name!r}")
                job = self._job(now, await self._runtime_map([now["runtime"]]))
                for cb in callbacks:
                    cb(job)
                left = deadline - time.monotonic()
                if job.status in wanted or job.status in ("Complete", "Failed") or left <= 0:
                    break
                now = await self._call(watch.next, left)
        left = max(deadline - time.monotonic(), 0.001)
        try:
            d = await self._call(self._engine.wait, name, wanted, left)
        except JobFailedError as e:
            try:
                job = await self.get_job(name)
            except (ValueError, RuntimeError):
                job = None
            raise JobFailedError(str(e), job) from None
        return self._job(d, await self._runtime_map([d["runtime"]]))

    async def cancel_job(self, name: str, force: bool = False) -> None:
        try:
            await self._call(self._engine.cancel_job, name, force)
        except ValueError:
            members = _array_members(await self.list_jobs(), name)
            if not members:
                raise
            for j in members:
                if j.status not in ("Complete", "Failed"):
                    await self._call(self._engine.cancel_job, j.name, force)

    async def delete_job(self, name: str) -> None:
        try:
            await self._call(self._engine.delete_job, name)
        except ValueError:
            members = _array_members(await self.list_jobs(), name)
            if not members:
                raise
            for j in members:
                await self._call(self._engine.delete_job, j.name)

    async def get_array(self, name: str) -> List[TrainJob]:
        members = _array_members(await self.list_jobs(), name)
        if not members:
            raise ValueError(f"No job array with name {name!r}")
        return members

    async def wait_for_array(self, name: str, status: Set[str] = {"Complete"}, timeout: int = 600
                             ) -> List[TrainJob]:
        wanted = _check_wait(status, timeout, min(timeout / 2, 1))
        deadline = time.monotonic() + timeout
        out = []
        for j in await self.get_array(name):
            left = max(deadline - time.monotonic(), 0.001)
            try:
                d = await self._call(self._engine.wait, j.name, wanted, left)
            except JobFailedError as e:
                try:
                    job = await self.get_job(j.name)
                except (ValueError, RuntimeError):
                    job = None
                raise JobFailedError(str(e), job) from None
            out.append(self._job(d, await self._runtime_map([d["runtime"]])))
        return out
