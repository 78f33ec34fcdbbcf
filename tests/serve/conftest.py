"""Fixtures of tjob serve's tests: a real `tjob serve` process per test (its own $TJOB_HOME, a unix
socket, optionally TCP with a token), and a small HTTP client that speaks to it over the socket."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUPPORT = os.path.join(ROOT, "tests", "support")
BUILD = os.environ.get("TJOB_BUILD_DIR", os.path.join(ROOT, "build"))
TJOB = os.path.join(BUILD, "tjob")
HELPER = os.path.join(BUILD, "tests", "tjob-test-helper")
DEADLINE = 60  # seconds: the hard limit of every wait here


def pytest_sessionfinish(session, exitstatus):
    """A file with a skipped case reports as skipped (exit 77), never as passed."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter and reporter.stats.get("skipped") and exitstatus == 0:
        session.exitstatus = 77


def unavailable(why):
    if os.environ.get("CI"):
        pytest.fail(why + " (CI must have it)")
    pytest.skip(why)


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=DEADLINE):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


class Reply:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "Reply(%d, %r)" % (self.status, self.body[:500])


class Server:
    """A running `tjob serve`; its log lines are collected as they come."""

    def __init__(self, home, args=(), env=None):
        self.home = home
        self.socket = os.path.join(home, "tjob.sock")
        self.args = list(args)
        self.env = dict(os.environ, TJOB_HOME=home, **(env or {}))
        self.lines = []
        self.cond = threading.Condition()
        self.addresses = []
        self.start()

    def start(self):
        self.lines, self.addresses = [], []
        self.proc = subprocess.Popen([TJOB, "serve"] + self.args, env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        listeners = max(1, self.args.count("--listen"))  # one line each, as each is bound
        self.wait_log(lambda l: sum(1 for x in self.lines if x and "msg=listening" in x) >= listeners)
        self.addresses = [re.search(r"address=(\S+)", l).group(1) for l in self.lines if "msg=listening" in l]

    def _read(self):
        for line in self.proc.stderr:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)  # the end
            self.cond.notify_all()

    def wait_log(self, pred, timeout=DEADLINE):
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                for l in self.lines:
                    if l is not None and pred(l):
                        return l
                if None in self.lines:
                    raise AssertionError("tjob serve ended; its log:\n" + "\n".join(l for l in self.lines if l))
                left = end - time.monotonic()
                assert left > 0, "no such log line in time; the log:\n" + "\n".join(self.lines)
                self.cond.wait(left)

    def log(self):
        with self.cond:
            return "\n".join(l for l in self.lines if l is not None)

    def tcp(self):
        for a in self.addresses:
            if a.startswith("tcp://"):
                host, port = a[6:].rsplit(":", 1)
                return host.strip("[]"), int(port)
        raise AssertionError("not listening on TCP")

    def conn(self):
        return UnixConnection(self.socket)

    def request(self, method, path, body=None, headers=None, conn=None):
        c = conn or self.conn()
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        reply = Reply(r.status, dict(r.getheaders()), r.read().decode())
        if conn is None:
            c.close()
        return reply

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body, **kw)

    def submit(self, command, name=None, **extra):
        spec = {"trainer": {"kind": "command", "command": command}}
        if name:
            spec["name"] = name
        spec.update(extra)
        r = self.post("/v1/jobs", spec)
        assert r.status == 201, r
        return r.json()["name"]

    def wait(self, name, status="Complete"):
        r = self.get("/v1/jobs/%s/wait?status=%s&timeout=%d" % (name, status, DEADLINE))
        assert r.status == 200, r
        return r.json()

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=DEADLINE)


@pytest.fixture
def home(tmp_path):
    return str(tmp_path / "home")


@pytest.fixture
def server(home):
    s = Server(home)
    yield s
    s.stop()


@pytest.fixture
def make_server(home):
    made = []

    def make(args=(), env=None, at=None):
        s = Server(at or home, args, env)
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop(signal.SIGKILL) if s.proc.poll() is None else None


def tjob_cli(home, *args, env=None):
    return subprocess.run([TJOB] + list(args), env=dict(os.environ, TJOB_HOME=home, **(env or {})),
                          capture_output=True, text=True, timeout=DEADLINE)


class Gate:
    """A FIFO a job blocks on until the test releases it (tjob-test-helper read-fifo)."""

    def __init__(self, d):
        self.path = os.path.join(d, "gate")
        os.mkfifo(self.path)

    def release(self):
        fd = os.open(self.path, os.O_WRONLY)
        os.write(fd, b"go\n")
        os.close(fd)


@pytest.fixture
def gate(tmp_path):
    return Gate(str(tmp_path))


def raw(path, data, read=True, timeout=DEADLINE):
    """Sends bytes as they are (no client library's cleaning up) and returns what comes back."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered (and closed) before it had read it all: read that answer
    out = b""
    if read:
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
    s.close()
    return out


def status_of(response_bytes):
    m = re.match(rb"HTTP/1\.1 (\d+)", response_bytes)
    assert m, response_bytes[:200]
    return int(m.group(1))


def body_of(response_bytes):
    return json.loads(response_bytes.split(b"\r\n\r\n", 1)[1])


__all__ = ["Server", "UnixConnection", "tjob_cli", "raw", "status_of", "body_of", "HELPER", "TJOB", "DEADLINE",
           "unavailable", "sys"]
