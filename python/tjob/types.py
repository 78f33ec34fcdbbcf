"""Kubeflow Trainer's types (SDK 0.5), name for name, with tjob's extra fields after Kubeflow's.

These are plain dataclasses: they pickle, compare and print as Kubeflow's do.
"""
from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Dict, List, Optional, Union


def _default_pip_index_urls() -> List[str]:
    # Kubeflow reads DEFAULT_PIP_INDEX_URLS once, at import; tjob reads it when the trainer is made
    return [u for u in os.environ.get("DEFAULT_PIP_INDEX_URLS", "https://pypi.org/simple").split(",") if u]


class TrainerType(str, Enum):
    CUSTOM_TRAINER = "CustomTrainer"
    BUILTIN_TRAINER = "BuiltinTrainer"


class RuntimeKind(str, Enum):
    CLUSTER_TRAINING_RUNTIME = "ClusterTrainingRuntime"
    TRAINING_RUNTIME = "TrainingRuntime"


# --- trainers ---------------------------------------------------------------------------------------


@dataclass
class CustomTrainer:
    """A Python function trained as a job: its source (as `inspect.getsource` gives it) runs in a venv
    of its own with `packages_to_install`, called with `func_args` as keyword arguments. tjob also takes
    the path of a script as `func` (a str ending in .py): it runs as it is, with `args`."""

    func: Callable
    func_args: Optional[Dict] = None
    image: Optional[str] = None
    packages_to_install: Optional[List[str]] = None
    pip_index_urls: List[str] = field(default_factory=_default_pip_index_urls)
    num_nodes: Optional[int] = None
    resources_per_node: Optional[Dict] = None
    env: Optional[Dict[str, str]] = None
    # tjob
    args: Optional[List[str]] = None
    # A local directory sent with the job (as Ray's working_dir): a snapshot taken at train() (.gitignore and
    # .tjobignore excludes, at most 256 MiB) becomes the job's working directory, first on its PYTHONPATH, so the
    # function imports the directory's modules and reads its files. Local, container and Slurm backends.
    working_dir: Optional[Union[str, os.PathLike]] = None


@dataclass
class CommandTrainer:
    """tjob's own: a program run as it is, with its arguments (no shell), in the job's work directory
    (in a container: `image`, else the backend's or the runtime's). What `tjob run -- CMD` runs."""

    command: List[str]
    env: Optional[Dict[str, str]] = None
    working_dir: Optional[str] = None
    image: Optional[str] = None
    num_nodes: Optional[int] = None


@dataclass
class CustomTrainerContainer:
    """An image run as it is (its command, or TrainerCommand / TrainerArgs)."""

    image: str
    num_nodes: Optional[int] = None
    resources_per_node: Optional[Dict] = None
    env: Optional[Dict[str, str]] = None


@dataclass
class BuiltinTrainer:
    """Kubeflow's TorchTune trainer: tjob does not run it (train raises ValueError)."""

    config: object = None


@dataclass
class Initializer:
    """Dataset and model initializers: tjob does not run them (train raises ValueError)."""

    dataset: object = None
    model: object = None


# --- runtimes, jobs, steps, events -------------------------------------------------------------------


@dataclass
class RuntimeTrainer:
    trainer_type: TrainerType
    framework: str
    image: str = ""
    num_nodes: int = 1
    device: str = "Unknown"
    device_count: str = "Unknown"
    # tjob: the runtime's packages (Kubeflow's LocalRuntimeTrainer has them; here every runtime does)
    packages: List[str] = field(default_factory=list)


@dataclass
class Runtime:
    name: str
    trainer: RuntimeTrainer
    kind: RuntimeKind = RuntimeKind.CLUSTER_TRAINING_RUNTIME
    pretrained_model: Optional[str] = None


@dataclass
class Step:
    name: str
    status: Optional[str]
    pod_name: str = ""
    device: str = "Unknown"
    device_count: str = "Unknown"
    # tjob
    exit_code: Optional[int] = None
    reason: str = ""
    attempt: int = 1  # which attempt of a restarted job (Retries); 1: the first


@dataclass
class TrainJob:
    name: str
    runtime: Optional[Runtime]
    steps: List[Step]
    num_nodes: int
    creation_timestamp: datetime.datetime
    status: str = "Unknown"
    # tjob
    start_time: Optional[datetime.datetime] = None
    end_time: Optional[datetime.datetime] = None
    reason: str = ""
    array: str = ""  # the job array it is a member of (the Array option); empty: none
    # The latest progress its code reported (Kubeflow's update_trainjob_status; on Kubernetes the TrainJob's
    # status.trainerStatus): None, None, {} and None until a first report.
    progress_percent: Optional[int] = None
    estimated_remaining_seconds: Optional[int] = None
    metrics: Dict[str, str] = field(default_factory=dict)
    updated: Optional[datetime.datetime] = None


@dataclass
class QueueEntry:
    """tjob's: a job waiting for admission (get_queue), next first. `waits_for` says what for: "1 CPU (2 of 2
    in use)", "job x ahead of it"."""

    name: str
    position: int
    priority: int
    waits_for: str
    since: datetime.datetime
    cpus: int
    memory: int
    gpus: int


@dataclass
class Event:
    involved_object_kind: str
    involved_object_name: str
    message: str
    reason: str
    event_time: datetime.datetime
    # A Progress event (tjob's): what the training code reported then. None and empty otherwise.
    progress_percent: Optional[int] = None
    estimated_remaining_seconds: Optional[int] = None
    metrics: Dict[str, str] = field(default_factory=dict)


# --- options -----------------------------------------------------------------------------------------


@dataclass
class Name:
    """The job's name (every backend)."""

    name: str


@dataclass
class Labels:
    """The TrainJob's labels (Kubernetes only)."""

    labels: Dict[str, str]


@dataclass
class Annotations:
    """The TrainJob's annotations (Kubernetes only)."""

    annotations: Dict[str, str]


@dataclass
class TrainerCommand:
    """The command of a CustomTrainerContainer (Kubernetes only)."""

    command: List[str]


@dataclass
class TrainerArgs:
    """The arguments of a CustomTrainerContainer (Kubernetes only)."""

    args: List[str]


@dataclass
class ActiveDeadlineSeconds:
    """Kubeflow's deadline option: the job may run this many seconds (from Running), then it is stopped and
    ends Failed, reason DeadlineExceeded. Local and container: the engine enforces it (on the container backend,
    the engine of the process that submitted the job, or its supervisor with train(..., detach=True));
    Kubernetes: the TrainJob's activeDeadlineSeconds. Kubeflow's own local backends refuse it."""

    seconds: int


@dataclass
class StopWarning:
    """(tjob's) Warns the job `seconds` before its ActiveDeadlineSeconds with `signal` (a name such as "USR1",
    or a number), as Slurm's --signal=USR1@60, so that it can save a checkpoint: in a Python job,
    tjob.stop_requested() turns true. The deadline's stop follows as usual. Local backend."""

    signal: str = "USR1"
    seconds: int = 60


@dataclass
class Begin:
    """tjob's option, as Slurm's --begin: start the job no earlier than `time`, a datetime (one without a time
    zone is local time) or a string in the CLI's forms ("now+30m", "22:00", "2026-12-24T18:00", RFC 3339).
    Until then it waits, Created, reason Waiting; then it joins the admission queue as any job. A time already
    past starts it at once. Local, container and Slurm backends (docs/scheduling.md)."""

    time: Union[datetime.datetime, str]


@dataclass
class Dependencies:
    """tjob's option, as Slurm's --dependency: start only after each job of after_ok has ended Complete, each of
    after_any has ended, each of after_not_ok has ended Failed; when one cannot be met, the job ends Failed,
    reason DependencyNeverSatisfied. Local and container backends (docs/scheduling.md)."""

    after_ok: List[str] = field(default_factory=list)
    after_any: List[str] = field(default_factory=list)
    after_not_ok: List[str] = field(default_factory=list)


@dataclass
class Retries:
    """tjob's option, as Nomad's restart block: restart the job up to `max_restarts` times when its code fails
    (a node's process exits non-zero or is killed by a signal: 128 + its number), waiting `backoff_seconds`,
    then `backoff_factor` times the last wait, at most `max_backoff_seconds`. `retry_on`: only these exit
    codes are retried (empty: every failure); `never_retry`: these never are. Each attempt is in the job's
    events, the steps show their attempt, and get_job_logs(attempt=N) reads one attempt's output. Local
    backend; on Slurm every node again in the job's allocation (docs/slurm.md); on the container backend the daemon's restart policy (on-failure:max_restarts, one node, no
    retry_on/never_retry/backoff); on Kubernetes restarts are the runtime's (JobSet failurePolicy;
    docs/scheduling.md)."""

    max_restarts: int
    backoff_seconds: float = 1.0
    backoff_factor: float = 2.0
    max_backoff_seconds: float = 60.0
    retry_on: List[int] = field(default_factory=list)
    never_retry: List[int] = field(default_factory=list)


@dataclass
class Priority:
    """tjob's option: the job's place in the admission queue (higher first; default 0). Local and container
    backends; on Kubernetes give Kueue's priority-class label instead (docs/scheduling.md)."""

    priority: int


@dataclass
class Array:
    """tjob's option, as Slurm's --array: train() submits one job per index, named NAME-<i> (give the Name
    option), and returns NAME, the array's name. `spec`: indices as "0-99", "1,3,5" or "0-15:4", and "%N" for
    the most that run at once ("0-99%8"). Each member has $TJOB_ARRAY_INDEX, and ARRAY_INDEX in
    CustomTrainer.func_args becomes its index. get_array, wait_for_array, cancel_job and delete_job take the
    array's name. Local and container backends (docs/scheduling.md)."""

    spec: str


class _ArrayIndex:
    """The type of ARRAY_INDEX: in func_args, each member of an Array gets its own index there."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self):
        return "tjob.ARRAY_INDEX"

    def __reduce__(self):
        return "ARRAY_INDEX"


ARRAY_INDEX = _ArrayIndex()


@dataclass
class RuntimePatch:
    """Kubeflow's runtime patch option: tjob does not take it (train raises ValueError)."""

    training_runtime_spec: object = None


# --- backend configs ---------------------------------------------------------------------------------


@dataclass
class LocalProcessBackendConfig:
    """Jobs as local processes, each Python job in a venv of its own (tjob's default backend).

    Kubeflow's field first; then tjob's: the store (`home`, else $TJOB_HOME), the interpreter of
    Python jobs (`python`, else $TJOB_PYTHON), whether their venvs see its packages, as a system torch
    (`system_site_packages`, else $TJOB_SYSTEM_SITE_PACKAGES=1), the venv cache, and the grace period
    between SIGTERM and SIGKILL in seconds."""

    cleanup_venv: bool = True
    home: Optional[str] = None
    python: Optional[str] = None
    system_site_packages: bool = False
    venv_cache: bool = True
    grace_period: Optional[float] = None
    # Admission budgets (docs/scheduling.md): None takes $TJOB_HOME/config.yaml, else the machine's; 0: no limit.
    max_running: Optional[int] = None
    cpu_budget: Optional[int] = None
    memory_budget: Optional[Union[int, str]] = None  # bytes, or "16Gi"


@dataclass
class ContainerBackendConfig:
    """Jobs as containers of Docker or Podman (the Docker Engine API)."""

    pull_policy: str = "IfNotPresent"
    auto_remove: bool = True
    container_host: Optional[str] = None
    container_runtime: Optional[str] = None
    runtime_source: object = None
    dataset_initializer_image: str = "ghcr.io/kubeflow/trainer/dataset-initializer:latest"
    model_initializer_image: str = "ghcr.io/kubeflow/trainer/model-initializer:latest"
    initializer_timeout: int = 600
    # tjob
    home: Optional[str] = None
    image: Optional[str] = None
    network: str = "job"
    # Mounts of every node: "SOURCE:CONTAINER[:ro]" strings, or as Kubeflow's (kubeflow/sdk #636) and docker-py's
    # {SOURCE: {"bind": CONTAINER, "mode": "ro"}}; SOURCE an absolute host path or a named volume's name.
    volumes: Union[List[str], Dict[str, Dict[str, str]]] = field(default_factory=list)
    # Environment of every node, under the trainer's own env (Kubeflow's, kubeflow/sdk #636).
    env: Optional[Dict[str, str]] = None
    grace_period: Optional[float] = None
    # Admission budgets of the home's container jobs (docs/scheduling.md), as LocalProcessBackendConfig's.
    max_running: Optional[int] = None
    cpu_budget: Optional[int] = None
    memory_budget: Optional[Union[int, str]] = None  # bytes, or "16Gi"


@dataclass
class KubernetesBackendConfig:
    """TrainJobs on a cluster running Kubeflow Trainer."""

    namespace: Optional[str] = None
    config_file: Optional[str] = None
    context: Optional[str] = None
    client_configuration: object = None
    # tjob
    home: Optional[str] = None


@dataclass
class SlurmBackendConfig:
    """TrainJobs as Slurm jobs (tjob's; Kubeflow has none): sbatch, squeue and scancel run on this machine,
    each job's files in `shared_dir` (default $TJOB_HOME/slurm), which every node must mount at the same
    path. `pack_nodes`: a job's nodes are tasks on as few machines as Slurm gives (one big machine)."""

    slurm_conf: Optional[str] = None
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    sbatch_options: List[str] = field(default_factory=list)
    shared_dir: Optional[str] = None
    pack_nodes: bool = False
    # The nodes' interpreter for Python jobs (else python3 on their PATH), and whether a job's venv sees its
    # packages, as a system torch.
    python: Optional[str] = None
    system_site_packages: bool = False
    home: Optional[str] = None
    grace_period: Optional[float] = None
