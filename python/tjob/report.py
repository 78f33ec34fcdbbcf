"""tjob.report: training code reports its progress, on every backend.

    import tjob
    tjob.report(progress=40, eta=120, loss=0.31, accuracy=0.88)

It speaks Kubeflow's protocol (update_trainjob_status in the Kubeflow SDK): a POST of
{"trainerStatus": {...}} to $KUBEFLOW_TRAINER_SERVER_URL with the bearer token in the file
$KUBEFLOW_TRAINER_SERVER_TOKEN names, verified against the CA in $KUBEFLOW_TRAINER_SERVER_CA_CERT.
tjob sets these in every local and container job (the job's owner serves the endpoint on
127.0.0.1); Kubeflow Trainer's controller sets them on Kubernetes. Where no endpoint can be reached
(a Slurm job's nodes), tjob sets $TJOB_PROGRESS_FILE instead: the same status is written there, the
latest replacing the one before (a new file renamed over it), for tjob to read. Outside a job it does
nothing.

This file needs only the standard library: tjob also puts it on a job's PYTHONPATH, so a job whose
Python has no tjob installed can `import tjob` and report.

report() never raises and never blocks the training loop for long (2 s at most). Reports closer
together than `min_interval` (1 s) are not sent at once: the latest is kept and goes with the next
call after the interval, or when the program exits, so the last report always arrives.
"""
import atexit
import datetime
import http.client
import json
import os
import socket
import sys
import ssl
import threading
import time
import urllib.parse

__all__ = ["report", "flush", "checkpoint_dir", "restart_count", "trial_parameters"]

_URL = "KUBEFLOW_TRAINER_SERVER_URL"
_CA = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
_TOKEN = "KUBEFLOW_TRAINER_SERVER_TOKEN"
_FILE = "TJOB_PROGRESS_FILE"
_MAX_METRICS = 256
_TOKEN_TTL = 300.0

min_interval = 1.0
"""Seconds between two reports sent; calls in between are merged into the next one."""


class _Reporter:
    def __init__(self):
        self.lock = threading.Lock()
        self.conn = None
        self.token = None
        self.token_read = 0.0
        self.last_sent = None
        self.pending = None
        self.registered = False

    def _token(self, path):
        now = time.monotonic()
        if self.token and now - self.token_read < _TOKEN_TTL:
            return self.token
        try:
            with open(path) as f:
                self.token = f.read().strip()
            self.token_read = now
        except OSError:
            self.token = None
        return self.token

    def _write(self, path, status):
        """The latest status in the file: written whole beside it, then renamed over it, so a
        reader never sees half of one (a rename is atomic on NFS as well)."""
        tmp = "%s.%s.%d.tmp" % (path, socket.gethostname(), os.getpid())
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump({"trainerStatus": status}, f)
            os.replace(tmp, path)
            return True
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False

    def _send(self, status):
        url = os.environ.get(_URL)
        if not url and os.environ.get(_FILE):
            return self._write(os.environ[_FILE], status)
        token = self._token(os.environ.get(_TOKEN, ""))
        if not url or not token:
            return False
        parts = urllib.parse.urlsplit(url)
        body = json.dumps({"trainerStatus": status}).encode()
        headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
        for attempt in range(2):  # a kept connection the server has closed: once more on a new one
            try:
                if self.conn is None:
                    ca = os.environ.get(_CA)
                    ctx = ssl.create_default_context(cafile=ca if ca and os.path.exists(ca) else None)
                    if parts.scheme == "https":
                        self.conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=2, context=ctx)
                    else:
                        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=2)
                self.conn.request("POST", parts.path or "/", body=body, headers=headers)
                response = self.conn.getresponse()
                response.read()
                return response.status == 200
            except (OSError, http.client.HTTPException):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                if attempt == 1:
                    return False
        return False

    def report(self, progress, eta, metrics):
        status = {"lastUpdatedTime": datetime.datetime.now(datetime.timezone.utc).isoformat()}
        if progress is not None:
            status["progressPercentage"] = max(0, min(100, int(progress)))
        if eta is not None:
            status["estimatedRemainingSeconds"] = max(0, int(eta))
        if metrics:
            items = list(metrics.items())[:_MAX_METRICS]
            status["metrics"] = [{"name": str(k), "value": _value(v)} for k, v in items]
        with self.lock:
            if not os.environ.get(_URL) and not os.environ.get(_FILE):
                return False
            if not self.registered:
                atexit.register(self.flush)
                self.registered = True
            now = time.monotonic()
            if self.last_sent is not None and now - self.last_sent < min_interval:
                self.pending = _merge(self.pending, status)
                return False
            status = _merge(self.pending, status)
            self.pending = None
            ok = self._send(status)
            if ok:
                self.last_sent = now
            return ok

    def flush(self):
        with self.lock:
            if self.pending is None:
                return True
            status, self.pending = self.pending, None
            ok = self._send(status)
            if ok:
                self.last_sent = time.monotonic()
            return ok


def _value(v):
    """A metric's value as text, a float to its last digit (a sweep ranks trials by it); a 0-d tensor or a
    NumPy scalar by its Python value."""
    item = getattr(v, "item", None)
    if callable(item) and not isinstance(v, (int, float, str)):
        try:
            v = item()
        except (TypeError, ValueError, RuntimeError):
            pass
    if isinstance(v, float):
        return float.__repr__(v)
    return str(v)


def _merge(old, new):
    """A report kept back, then a newer one: the newer fields win, metrics merge by name."""
    if old is None:
        return new
    merged = dict(old)
    merged.update({k: v for k, v in new.items() if k != "metrics"})
    if "metrics" in old or "metrics" in new:
        by_name = {m["name"]: m["value"] for m in old.get("metrics", [])}
        by_name.update({m["name"]: m["value"] for m in new.get("metrics", [])})
        merged["metrics"] = [{"name": k, "value": v} for k, v in list(by_name.items())[:_MAX_METRICS]]
    return merged


_reporter = _Reporter()


def report(progress=None, eta=None, **metrics):
    """Reports the job's progress: `progress` in percent (0 to 100), `eta` in seconds left, and any
    metrics as keywords (loss=0.31). True when this report was taken now; False when there is no
    endpoint (not in a job), it failed, or it was kept back to go with the next (see min_interval).
    Never raises."""
    try:
        return _reporter.report(progress, eta, metrics)
    except Exception:  # noqa: BLE001 - progress must never stop training
        return False


def flush():
    """Sends a report kept back (report() does it at exit); True when there was none or it went."""
    try:
        return _reporter.flush()
    except Exception:  # noqa: BLE001
        return False


def checkpoint_dir():
    """The job's checkpoint directory ($TJOB_CHECKPOINT_DIR), which every attempt of the job sees: save
    there, and resume from what is there when restart_count() > 0. None outside a tjob job. The
    directory is the job's own: removed with the job."""
    d = os.environ.get("TJOB_CHECKPOINT_DIR")
    return d or None


def restart_count():
    """How many times the job was restarted before this attempt ($TJOB_RESTART_COUNT: 0 on the first
    attempt, as Slurm's SLURM_RESTART_COUNT). 0 outside a job, or where the backend does not say."""
    try:
        return max(0, int(os.environ.get("TJOB_RESTART_COUNT", "0")))
    except ValueError:
        return 0


def stop_requested():
    """Whether this job was warned that it is about to be stopped: its warning signal arrived (`tjob train
    --deadline 2h --signal USR1@5m`, the StopWarning option), so it should save a checkpoint to
    checkpoint_dir() and return. tjob handles the signal in every process of a Python job; the first call
    here installs the handler where nothing did (a Python without tjob's hook). False outside such a job."""
    name = os.environ.get("TJOB_STOP_SIGNAL")
    if name and not getattr(sys, "_tjob_stop_handled", False):
        sys._tjob_stop_handled = True
        try:
            import signal
            number = int(name) if name.isdigit() else signal.Signals["SIG" + name]
            if signal.getsignal(number) == signal.SIG_DFL:
                signal.signal(number, lambda signum, frame: setattr(sys, "_tjob_stop_requested", True))
        except (KeyError, ValueError, OSError):
            pass
    return bool(getattr(sys, "_tjob_stop_requested", False))


def trial_parameters():
    """The parameters of this sweep trial (tjob optimize, OptimizerClient.optimize), as a dict:
    {"lr": 0.01, "epochs": 5}. A function trial also gets them as keyword arguments; a script or a
    command can read them here. {} outside a trial."""
    try:
        value = json.loads(os.environ.get("TJOB_TRIAL_PARAMETERS", "{}"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
