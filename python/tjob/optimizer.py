"""tjob.optimizer: Kubeflow's `kubeflow.optimizer` (SDK 0.5) on tjob's engine, on every backend.

    from tjob.optimizer import OptimizerClient, TrainJobTemplate, Search, Objective, TrialConfig

is the one line a Kubeflow program changes. A sweep (Kubeflow's OptimizationJob, Katib's Experiment)
is owned by a supervising process of its own (`tjob __sweep`): it outlives this program, and the
`tjob` command (`tjob get NAME`, `tjob sweeps`) sees it. Its trials are TrainJobs NAME-0, NAME-1, ...
on the backend configured (docs/sweeps.md).

Where tjob differs from Kubeflow's (each on purpose, docs/sweeps.md): any backend config is taken, not
only Kubernetes; a trial's function gets its parameters as numbers where they are numbers (Katib
substitutes them as text); Metric and Result hold numbers and native values, not strings;
wait_for_job_status is woken by the sweep's record, not by polling; TPESearch is a third algorithm.
"""
from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Union

from . import _tjob
from .client import TrainerClient, _exception
from .types import CustomTrainer, Event, Initializer, Runtime, TrainJob

__all__ = [
    "AsyncOptimizerClient", "CategoricalSearchSpace", "ContinuousSearchSpace", "Direction", "Distribution",
    "GridSearch", "MedianStop", "Metric", "Objective", "OptimizationJob", "OptimizerClient", "RandomSearch", "Result", "Search",
    "TPESearch", "TrainJobTemplate", "Trial", "TrialConfig",
]

STATUSES = {"Created", "Running", "Complete", "Failed"}


# --- the types, with Kubeflow's names ---------------------------------------------------------------


class Distribution(Enum):
    UNIFORM = "uniform"
    LOG_UNIFORM = "logUniform"


@dataclass
class ContinuousSearchSpace:
    min: Union[float, int]
    max: Union[float, int]
    distribution: Distribution


@dataclass
class CategoricalSearchSpace:
    choices: list


class Search:
    """The search space's parameters: each becomes a keyword argument of the trial's function."""

    @staticmethod
    def uniform(min: float, max: float) -> ContinuousSearchSpace:
        return ContinuousSearchSpace(min=min, max=max, distribution=Distribution.UNIFORM)

    @staticmethod
    def loguniform(min: float, max: float) -> ContinuousSearchSpace:
        return ContinuousSearchSpace(min=min, max=max, distribution=Distribution.LOG_UNIFORM)

    @staticmethod
    def choice(values: list) -> CategoricalSearchSpace:
        return CategoricalSearchSpace(choices=list(values))


@dataclass
class GridSearch:
    """Every point of the grid: a choice's values, and for a continuous parameter evenly spaced points
    (log-spaced for loguniform), as many as the number of trials allows."""

    @property
    def algorithm_name(self) -> str:
        return "grid"


@dataclass
class RandomSearch:
    """Random search; `random_state` makes it reproducible (the same seed, the same trials)."""

    random_state: Optional[int] = None

    @property
    def algorithm_name(self) -> str:
        return "random"


@dataclass
class TPESearch:
    """(tjob's) Tree-structured Parzen estimators, as Optuna's default sampler: random for the first
    10 trials, then each trial drawn where the best trials so far are dense."""

    random_state: Optional[int] = None

    @property
    def algorithm_name(self) -> str:
        return "tpe"


@dataclass
class MedianStop:
    """(tjob's; Katib's "medianstop" early stopping) A running trial is stopped once it has reported the
    objective `start_step` times and its best value so far is worse than the median of the completed
    trials' running averages over as many reports, once `min_trials_required` trials have completed. It
    ends Complete, reason EarlyStopped, with what it reported. Reports are tjob.report /
    update_trainjob_status calls; `name=value` lines on stdout are read only when a trial ends."""

    min_trials_required: int = 3
    start_step: int = 4


class Direction(Enum):
    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


@dataclass
class Objective:
    metric: str = "loss"
    direction: Direction = Direction.MINIMIZE

    def __post_init__(self):
        if isinstance(self.direction, str):
            self.direction = Direction(self.direction)


@dataclass
class TrialConfig:
    num_trials: int = 10
    parallel_trials: int = 1
    max_failed_trials: Optional[int] = None


@dataclass
class Metric:
    """A metric of a trial: its lowest, highest and latest value (numbers; Kubeflow's are strings)."""

    name: str
    min: float
    max: float
    latest: float


@dataclass
class Result:
    parameters: Dict[str, Any]
    metrics: List[Metric]


@dataclass
class Trial:
    name: str
    parameters: Dict[str, Any]
    trainjob: Optional[TrainJob]
    metrics: List[Metric] = field(default_factory=list)
    # tjob's: the trial's status (Pending until its job is submitted) and why it failed
    status: str = ""
    reason: str = ""


@dataclass
class OptimizationJob:
    name: str
    search_space: Dict[str, Union[ContinuousSearchSpace, CategoricalSearchSpace]]
    objectives: List[Objective]
    algorithm: Union[GridSearch, RandomSearch, TPESearch]
    trial_config: TrialConfig
    trials: List[Trial]
    creation_timestamp: datetime.datetime
    status: str = "Unknown"
    # tjob's: why it failed, and whether a process owns it now (a sweep whose owner died is resumed with
    # OptimizerClient.resume_job or `tjob optimize --resume NAME`)
    reason: str = ""
    owned: bool = False
    early_stopping: Optional[MedianStop] = None


@dataclass
class TrainJobTemplate:
    trainer: CustomTrainer
    runtime: Optional[Union[str, Runtime]] = None
    initializer: Optional[Initializer] = None

    def keys(self):
        return ["trainer", "runtime", "initializer"]

    def __getitem__(self, key):
        return getattr(self, key)


# --- between these and the engine's sweep -----------------------------------------------------------


def _space(name: str, spec) -> Dict:
    if isinstance(spec, ContinuousSearchSpace):
        dist = "loguniform" if spec.distribution == Distribution.LOG_UNIFORM else "uniform"
        for bound in ("min", "max"):
            v = getattr(spec, bound)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"search_space[{name!r}].{bound}={v!r}: give a number")
        return {"name": name, "distribution": dist, "min": spec.min, "max": spec.max}
    if isinstance(spec, CategoricalSearchSpace):
        try:
            json.dumps(spec.choices)
        except TypeError:
            raise ValueError(f"search_space[{name!r}]: its choices must be numbers, strings, booleans or "
                             "None (they are passed to the function as they are)") from None
        return {"name": name, "distribution": "choice", "choices": list(spec.choices)}
    raise ValueError(f"search_space[{name!r}]: {type(spec).__name__} is not a search space; use Search.uniform, "
                     "Search.loguniform or Search.choice")


def _sweep(search_space, trial_config, objectives, algorithm, name, early_stopping=None) -> Dict:
    if not search_space:
        raise ValueError("Search space must be set.")
    if not isinstance(search_space, dict):
        raise ValueError("search_space: give a dict of parameter name to Search.uniform/loguniform/choice")
    trial_config = trial_config or TrialConfig()
    if not isinstance(trial_config, TrialConfig):
        raise ValueError(f"trial_config: {type(trial_config).__name__} is not a TrialConfig")
    algorithm = algorithm or RandomSearch()
    if not isinstance(algorithm, (GridSearch, RandomSearch, TPESearch)):
        raise ValueError(f"algorithm: {type(algorithm).__name__} is not one tjob runs; use GridSearch, RandomSearch "
                         "or TPESearch")
    out = {"search_space": [_space(k, v) for k, v in search_space.items()],
           "objectives": [{"metric": o.metric, "direction": Direction(o.direction).value}
                          for o in (objectives or [Objective()])],
           "algorithm": algorithm.algorithm_name, "num_trials": trial_config.num_trials,
           "parallel_trials": trial_config.parallel_trials, "max_failed_trials": trial_config.max_failed_trials}
    for key in ("num_trials", "parallel_trials"):
        if isinstance(out[key], bool) or not isinstance(out[key], int):
            raise ValueError(f"trial_config.{key}={out[key]!r}: give a whole number")
    seed = getattr(algorithm, "random_state", None)
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"{type(algorithm).__name__}.random_state={seed!r}: give a whole number of 0 or more")
        out["seed"] = seed
    if name is not None:
        out["name"] = name
    if early_stopping is not None:
        if not isinstance(early_stopping, MedianStop):
            raise ValueError(f"early_stopping: {type(early_stopping).__name__} is not one tjob runs; use MedianStop")
        for key in ("min_trials_required", "start_step"):
            v = getattr(early_stopping, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"early_stopping.{key}={v!r}: give a whole number of 1 or more")
        out["early_stopping"] = {"algorithm": "medianstop", "min_trials_required": early_stopping.min_trials_required,
                                 "start_step": early_stopping.start_step}
    return out


def _trial_request(client, trial_template, search_space) -> Dict:
    """The trial's request as TrainerClient.train makes it. A function gets each parameter as a keyword
    argument: in the template they are Katib's placeholders (Kubeflow's way), which the engine replaces
    with each trial's values (as numbers where they are numbers)."""
    if not isinstance(trial_template, TrainJobTemplate):
        raise ValueError("trial_template: give a TrainJobTemplate(trainer=CustomTrainer(...))")
    trainer = trial_template.trainer
    if isinstance(trainer, CustomTrainer) and callable(trainer.func):
        args = dict(trainer.func_args or {})
        args.update({k: "${trialParameters.%s}" % k for k in search_space})
        trainer = dataclasses.replace(trainer, func_args=args)
    return client._request(trial_template.runtime, trial_template.initializer, trainer, None)


def _median_stop(d: Optional[Dict]) -> Optional[MedianStop]:
    return MedianStop(d["min_trials_required"], d["start_step"]) if d else None


def _metrics(t: Dict) -> List[Metric]:
    return [Metric(name=m["name"], min=m["min"], max=m["max"], latest=m["latest"]) for m in t["metrics"]]


def _answer(pair):
    value, error = pair
    if error is not None:
        raise _exception(error)
    return value


def _time(text: Optional[str]) -> Optional[datetime.datetime]:
    if not text:
        return None
    return datetime.datetime.fromisoformat(text.replace("Z", "")[:26]).replace(tzinfo=datetime.timezone.utc)


class OptimizerClient:
    """Kubeflow's OptimizerClient on any tjob backend (its config as TrainerClient takes it; default: local)."""

    def __init__(self, backend_config=None):
        self._trainer = TrainerClient(backend_config)
        self._config = self._trainer._config_dict

    def optimize(self, trial_template: TrainJobTemplate, *, trial_config: Optional[TrialConfig] = None,
                 search_space: Dict[str, Any], objectives: Optional[List[Objective]] = None,
                 algorithm=None, name: Optional[str] = None, early_stopping: Optional[MedianStop] = None) -> str:
        """Starts a sweep; returns its name (`name`, tjob's: yours; default generated). Bad input is refused
        (ValueError naming the field) before any trial exists. `early_stopping` (tjob's): MedianStop()."""
        sweep = _sweep(search_space, trial_config, objectives, algorithm, name, early_stopping)
        req = _trial_request(self._trainer, trial_template, search_space)
        return _answer(_tjob.optimize(req, json.dumps(sweep), self._config))

    def _raw(self, name: str) -> Dict:
        return json.loads(_answer(_tjob.get_sweep(name, self._config)))

    def _job(self, d: Dict, with_jobs: bool = True) -> OptimizationJob:
        r = d["request"]
        space: Dict[str, Union[ContinuousSearchSpace, CategoricalSearchSpace]] = {}
        for p in r["search_space"]:
            if p["distribution"] == "choice":
                space[p["name"]] = CategoricalSearchSpace(choices=p["choices"])
            else:
                space[p["name"]] = ContinuousSearchSpace(
                    min=p["min"], max=p["max"],
                    distribution=Distribution.LOG_UNIFORM if p["distribution"] == "loguniform" else Distribution.UNIFORM)
        algorithm = {"grid": GridSearch(), "tpe": TPESearch(r["seed"])}.get(r["algorithm"], RandomSearch(r["seed"]))
        jobs: Dict[str, TrainJob] = {}
        if with_jobs:
            jobs = {j.name: j for j in self._trainer.list_jobs() if j.array == d["name"] or
                    j.name.startswith(d["name"] + "-")}
        trials = [Trial(name=t["name"], parameters=t["parameters"], trainjob=jobs.get(t["name"]), metrics=_metrics(t),
                        status=t["status"], reason=t["reason"]) for t in d["trials"]]
        return OptimizationJob(
            name=d["name"], search_space=space,
            objectives=[Objective(o["metric"], Direction(o["direction"])) for o in r["objectives"]],
            algorithm=algorithm,
            trial_config=TrialConfig(r["num_trials"], r["parallel_trials"], r["max_failed_trials"]),
            trials=trials, creation_timestamp=_time(d["creation_timestamp"]), status=d["status"], reason=d["reason"],
            owned=d["owned"], early_stopping=_median_stop(r.get("early_stopping")))

    def list_jobs(self) -> List[OptimizationJob]:
        jobs = {}
        listed = json.loads(_answer(_tjob.list_sweeps(self._config)))
        if listed:
            jobs = {j.name: j for j in self._trainer.list_jobs()}
        out = []
        for d in listed:
            o = self._job(d, with_jobs=False)
            for t in o.trials:
                t.trainjob = jobs.get(t.name)
            out.append(o)
        return out

    def get_job(self, name: str) -> OptimizationJob:
        return self._job(self._raw(name))

    def get_job_logs(self, name: str, trial_name: Optional[str] = None, follow: bool = False) -> Iterator[str]:
        """A trial's log: `trial_name`'s, else the best trial's, else the first trial's (Kubeflow's rule)."""
        d = self._raw(name)
        if trial_name is None:
            if d["best"] is not None:
                trial_name = d["trials"][d["best"]]["name"]
            elif d["trials"]:
                trial_name = d["trials"][0]["name"]
            else:
                return iter(())
        elif trial_name not in {t["name"] for t in d["trials"]}:
            raise ValueError(f"OptimizationJob {name!r} has no trial {trial_name!r}")
        return self._trainer.get_job_logs(trial_name, follow=follow)

    def get_best_results(self, name: str) -> Optional[Result]:
        d = self._raw(name)
        if d["best"] is None:
            return None
        best = d["trials"][d["best"]]
        return Result(parameters=best["parameters"], metrics=_metrics(best))

    def wait_for_job_status(self, name: str, status: Set[str] = {"Complete"}, timeout: int = 3600,
                            polling_interval: int = 2,
                            callbacks: Optional[List[Callable[[OptimizationJob], None]]] = None) -> OptimizationJob:
        """Waits until the sweep is in one of `status`, woken by its record's changes (`polling_interval` is
        accepted and not used). RuntimeError when it ends Failed and Failed was not asked for (with its
        reason), or when its owner has died (resume_job goes on); TimeoutError at `timeout` seconds."""
        wanted = set(status)
        if not wanted <= STATUSES:
            raise ValueError(f"status={sorted(wanted)}: each must be one of {sorted(STATUSES)}")
        if timeout <= 0:
            raise ValueError(f"timeout={timeout}: give a number of seconds above 0")
        deadline = time.monotonic() + timeout
        raw = _answer(_tjob.get_sweep(name, self._config))
        while True:
            d = json.loads(raw)
            if callbacks:
                job = self._job(d)
                for cb in callbacks:
                    cb(job)
            if d["status"] in wanted:
                return self._job(d)
            if d["status"] == "Failed":
                raise RuntimeError(f"OptimizationJob {name} is Failed: {d['reason']}")
            if d["status"] == "Complete":
                raise RuntimeError(f"OptimizationJob {name} is Complete, not {sorted(wanted)}")
            if not d["owned"] and d["status"] != "Created":
                raise RuntimeError(f"OptimizationJob {name} has no owner (its process died): resume_job({name!r}) "
                                   "or `tjob optimize --resume` goes on")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"Timeout waiting for OptimizationJob {name} to reach status: {sorted(wanted)} "
                                   f"(it is {d['status']})")
            raw = _answer(_tjob.wait_sweep(name, raw, min(left, 60.0), self._config))

    def delete_job(self, name: str) -> None:
        """Cancels what runs, deletes every trial's TrainJob and the sweep."""
        _answer(_tjob.delete_sweep(name, self._config))

    def get_job_events(self, name: str) -> List[Event]:
        """The events of its trials' TrainJobs, oldest first."""
        d = self._raw(name)
        events: List[Event] = []
        for t in d["trials"]:
            if t["status"] != "Pending":
                try:
                    events.extend(self._trainer.get_job_events(t["name"]))
                except ValueError:  # its job was deleted
                    pass
        return sorted(events, key=lambda e: e.event_time)

    # tjob's own
    def cancel_job(self, name: str) -> None:
        """Stops every trial that has not ended; the sweep ends Failed, reason cancelled."""
        _answer(_tjob.cancel_sweep(name, self._config))

    def resume_job(self, name: str) -> None:
        """Hands a sweep whose owner died to a new one; it goes on where it stopped, no trial run twice."""
        _answer(_tjob.resume_sweep(name, self._config))

    def close(self):
        self._trainer.close()


class AsyncOptimizerClient:
    """OptimizerClient's methods as coroutines (each runs in a worker thread: they read files and start
    processes, they do not wait on the engine's reactor)."""

    def __init__(self, backend_config=None):
        self._sync = OptimizerClient(backend_config)

    def __getattr__(self, attr):
        method = getattr(self._sync, attr)
        if not callable(method) or attr.startswith("_"):
            return method
        if attr == "get_job_logs":
            async def logs(*args, **kwargs):
                return await asyncio.to_thread(lambda: list(method(*args, **kwargs)))
            return logs

        async def call(*args, **kwargs):
            return await asyncio.to_thread(method, *args, **kwargs)
        return call


def _trainer_optimize(client, trial_template: TrainJobTemplate, **kwargs) -> str:
    """TrainerClient.optimize: OptimizerClient's optimize on that client's backend."""
    search_space = kwargs.pop("search_space", None)
    sweep = _sweep(search_space, kwargs.pop("trial_config", None), kwargs.pop("objectives", None),
                   kwargs.pop("algorithm", None), kwargs.pop("name", None), kwargs.pop("early_stopping", None))
    if kwargs:
        raise TypeError(f"optimize() got unexpected arguments: {', '.join(sorted(kwargs))}")
    req = _trial_request(client, trial_template, search_space)
    return _answer(_tjob.optimize(req, json.dumps(sweep), client._config_dict))
