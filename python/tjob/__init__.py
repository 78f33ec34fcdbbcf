"""tjob: Kubeflow Trainer's TrainerClient on tjob's engine.

    from tjob import TrainerClient, CustomTrainer, LocalProcessBackendConfig

is the one line a Kubeflow program changes. The engine runs in this process; jobs live in
$TJOB_HOME, where the `tjob` command and every other client see them.
"""
from .report import checkpoint_dir, flush, report, restart_count, stop_requested, trial_parameters
from .aio import AsyncTrainerClient
from .client import STATUSES, JobFailedError, TrainerClient
from .types import (
    ARRAY_INDEX,
    ActiveDeadlineSeconds,
    StopWarning,
    Array,
    Begin,
    Annotations,
    BuiltinTrainer,
    CommandTrainer,
    ContainerBackendConfig,
    CustomTrainer,
    CustomTrainerContainer,
    Dependencies,
    Event,
    Initializer,
    KubernetesBackendConfig,
    Labels,
    LocalProcessBackendConfig,
    Name,
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

__all__ = [
    "ARRAY_INDEX", "ActiveDeadlineSeconds", "Array", "AsyncTrainerClient", "Annotations", "Begin", "BuiltinTrainer", "CommandTrainer", "ContainerBackendConfig", "CustomTrainer",
    "CustomTrainerContainer", "Dependencies", "Event", "Initializer", "JobFailedError", "KubernetesBackendConfig", "Labels",
    "LocalProcessBackendConfig", "Name", "Priority", "QueueEntry", "Retries", "Runtime", "RuntimeKind", "RuntimePatch", "RuntimeTrainer", "STATUSES", "SlurmBackendConfig", "Step", "StopWarning",
    "TrainerArgs", "TrainerCommand", "TrainerType", "TrainJob", "TrainerClient", "checkpoint_dir", "flush", "report",
    "restart_count", "stop_requested", "trial_parameters",
]
