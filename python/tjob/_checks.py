"""The request and the engine configuration the client sends, each field checked: a bad one is a ValueError
naming it and what it takes, before anything is made (the backend's capabilities decide, never its name)."""
from __future__ import annotations

import dataclasses
import datetime
import dis
import inspect
import json
import os
import textwrap
from typing import Callable, Dict, List, Optional

from .types import (
    ARRAY_INDEX,
    ActiveDeadlineSeconds,
    StopWarning,
    Begin,
    Annotations,
    Array,
    BuiltinTrainer,
    CommandTrainer,
    ContainerBackendConfig,
    CustomTrainer,
    CustomTrainerContainer,
    Dependencies,
    KubernetesBackendConfig,
    Labels,
    LocalProcessBackendConfig,
    Name,
    Priority,
    Retries,
    Runtime,
    RuntimePatch,
    SlurmBackendConfig,
    TrainerArgs,
    TrainerCommand,
)


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
    return {"source": source, "function": name, "function_args": json.loads(encoded)}


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


def _options_into(req: Dict, caps: Dict, options):
    """The options into the request; the command and args of TrainerCommand and TrainerArgs."""
    backend = caps["id"]
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
        elif isinstance(opt, StopWarning):
            req["warning"] = _warning_of(opt, caps)
        elif isinstance(opt, Begin):
            req["begin"] = _begin_of(opt, caps)
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
                             "TrainerCommand, TrainerArgs, ActiveDeadlineSeconds, StopWarning, Begin, Priority, Dependencies, Retries, Array)")
    if "_array" in req and not req.get("name"):
        raise ValueError("Array option needs the Name option: the members are NAME-0, NAME-1, ... and NAME "
                         "addresses them all")
    return command, args


def _begin_of(opt: Begin, caps: Dict) -> str:
    """The Begin option as a spec's begin: RFC 3339 for a datetime (naive: local time), a string as given (the
    engine reads the CLI's forms and says which there are)."""
    if not caps["begin_time"] and not caps["forwards"]:
        raise ValueError(f"Begin option is not compatible with the {caps['id']} backend: it cannot hold a job "
                         "back until a time (the local, container and Slurm backends can)")
    if isinstance(opt.time, datetime.datetime):
        return opt.time.astimezone().isoformat()
    if isinstance(opt.time, str) and opt.time:
        return opt.time
    raise ValueError(f"Begin({opt.time!r}): give a datetime, or a string such as 'now+30m' or '2026-12-24T18:00'")


def _warning_of(opt: StopWarning, caps: Dict) -> Dict:
    """The StopWarning option as a spec's warning; the engine checks the signal's name and the deadline."""
    if isinstance(opt.signal, bool) or not isinstance(opt.signal, (str, int)) or opt.signal in ("", 0):
        raise ValueError(f"StopWarning.signal={opt.signal!r}: give a signal's name such as 'USR1', or its number")
    if not isinstance(opt.seconds, int) or isinstance(opt.seconds, bool) or opt.seconds < 1:
        raise ValueError(f"StopWarning.seconds={opt.seconds!r}: give a whole number of seconds, 1 or more")
    if not caps["stop_warning"] and not caps["forwards"]:
        raise ValueError(f"StopWarning option is not compatible with the {caps['id']} backend: it cannot warn a job "
                         "before its deadline")
    return {"signal": str(opt.signal), "before": opt.seconds}


def _custom_trainer(caps: Dict, defaults: Dict, trainer: CustomTrainer) -> Dict:
    """A CustomTrainer as the engine takes it: a script or a function's source, and its fields checked."""
    backend = caps["id"]
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
    return t


def _request(caps: Dict, defaults: Dict, runtime, initializer, trainer, options) -> Dict:
    """The request, checked against what the backend does (its capabilities, never its name)."""
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
    command, args = _options_into(req, caps, options)
    if (command or args) and not isinstance(trainer, CustomTrainerContainer):
        raise ValueError("TrainerCommand and TrainerArgs can only be used with CustomTrainerContainer")
    if isinstance(trainer, CustomTrainer):
        t = _custom_trainer(caps, defaults, trainer)
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


def _retry_of(opt: "Retries") -> Dict:
    """The Retries option as the engine takes it, its ranges checked here (the error names the option)."""
    def whole(v):
        return isinstance(v, int) and not isinstance(v, bool)

    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if not whole(opt.max_restarts) or not 0 <= opt.max_restarts <= 1000:
        raise ValueError(f"Retries.max_restarts={opt.max_restarts!r}: give a whole number of restarts, 0 to 1000")
    for key in ("backoff_seconds", "max_backoff_seconds"):
        v = getattr(opt, key)
        if not number(v) or not 0 <= v <= 86400:
            raise ValueError(f"Retries.{key}={v!r}: give 0 to 86400 seconds (a day)")
    if not number(opt.backoff_factor) or not 1 <= opt.backoff_factor <= 100:
        raise ValueError(f"Retries.backoff_factor={opt.backoff_factor!r}: give a number from 1 to 100")
    for key in ("retry_on", "never_retry"):
        codes = getattr(opt, key)
        if isinstance(codes, (str, bytes)) or not all(whole(c) for c in codes):
            raise ValueError(f"Retries.{key}={codes!r}: give a list of exit codes (1 to 255)")
    # (the job spec's own shape: tjob serve's JobSpec, read by one codec, tjob::request_from_json)
    return {"max_restarts": opt.max_restarts, "backoff_ms": round(opt.backoff_seconds * 1000),
            "backoff_factor": float(opt.backoff_factor), "max_backoff_ms": round(opt.max_backoff_seconds * 1000),
            "retry_on": list(opt.retry_on), "never_retry": list(opt.never_retry)}
