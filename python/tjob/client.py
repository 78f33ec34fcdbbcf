"""TrainerClient: Kubeflow's client over tjob's engine (AsyncTrainerClient, its coroutines, is tjob.aio's).

The engine runs in this process on a thread of its own. Each call starts an operation there, and its
completion is queued on a channel (tjob._tjob.Channel) that wakes the caller through an eventfd: the
blocking client's thread waits for it in select() (Ctrl-C interrupts that at once, and the job goes
on), the asyncio client's loop reads it among its other descriptors. Either way the caller converts
the result itself, holding the GIL it has; the engine's thread never waits for the GIL.
"""
from __future__ import annotations

import atexit
import collections
import datetime
import json
import select
import threading
import time
import weakref
from typing import Callable, Dict, Iterator, List, Optional, Set

from . import _tjob
from ._checks import _config, _request
from .types import (
    Event,
    QueueEntry,
    Runtime,
    RuntimeKind,
    RuntimeTrainer,
    Step,
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

    def optimize(self, trial_template, **kwargs) -> str:
        """A hyperparameter sweep of `trial_template` on this client's backend (tjob.optimizer's
        OptimizerClient.optimize, the name Kubeflow is moving to: kubeflow/trainer #3881)."""
        from .optimizer import _trainer_optimize

        return _trainer_optimize(self, trial_template, **kwargs)

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

    def cancel_job(self, name: str, force: bool = False, checkpoint: bool = False) -> None:
        """Stops the job (SIGTERM, SIGKILL after the grace period; `force`: SIGKILL now). tjob's own. A job
        array's name (the Array option) stops every member that has not ended. `checkpoint`: warn the job
        first, with the StopWarning it was submitted with, and give it that warning's lead time to save and
        end by itself (local and slurm backends)."""
        try:
            _run(self._engine.cancel_job, name, force, checkpoint)
        except ValueError:
            members = _array_members(self.list_jobs(), name)
            if not members:
                raise
            for j in members:
                if j.status not in ("Complete", "Failed"):
                    _run(self._engine.cancel_job, j.name, force, checkpoint)

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
