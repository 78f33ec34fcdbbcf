"""Fixtures of the Python package's tests: a store per test, the loopback package index, the
Kubernetes stand-in and the container daemons, all real (tests/support)."""
import os
import re
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUPPORT = os.path.join(ROOT, "tests", "support")
BUILD = os.environ.get("TJOB_BUILD_DIR", os.path.join(ROOT, "build"))
TJOB = os.path.join(BUILD, "tjob")
HELPER = os.path.join(BUILD, "tests", "tjob-test-helper")


def pytest_sessionfinish(session, exitstatus):
    """A file with a skipped case reports as skipped (exit 77, the ctest tests' SKIP_RETURN_CODE), never
    as passed, as tests/support/doctest_main.cpp does for the C++ suites."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped and exitstatus == 0:
        session.exitstatus = 77


def unavailable(why):
    """A case that cannot run here: skipped on a developer machine, failed in CI (which has it all)."""
    if os.environ.get("CI"):
        pytest.fail(why + " (CI must have it)")
    pytest.skip(why)


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("TJOB_HOME", str(h))
    return str(h)


@pytest.fixture
def system_torch(monkeypatch):
    """The torch runtime's `torch` from Debian's python3 (no index here has it), as a user offline does."""
    monkeypatch.setenv("TJOB_PYTHON", "/usr/bin/python3")
    monkeypatch.setenv("TJOB_SYSTEM_SITE_PACKAGES", "1")


@pytest.fixture(scope="session")
def index():
    """The loopback PEP 503 index of tests/support/make_index.py (tinyjob 1.2.0 needing tinydep)."""
    d = tempfile.mkdtemp(prefix="tjob-index-")
    subprocess.run([sys.executable, os.path.join(SUPPORT, "make_index.py"), d], check=True)
    server = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", "--directory", d,
                               "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = server.stdout.readline()
    port = re.search(r"port (\d+)", line)
    assert port, line
    yield "http://127.0.0.1:%s/simple/" % port.group(1)
    server.kill()
    server.wait()


@pytest.fixture
def kube(tmp_path):
    """The Kubernetes API stand-in; yields its kubeconfig."""
    d = str(tmp_path / "standin")
    os.makedirs(d)
    server = subprocess.Popen([sys.executable, os.path.join(SUPPORT, "kube_standin.py"), "serve", d,
                               "--die-with-parent"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in server.stdout:
        if "standin: serving on" in line:
            break
    else:
        raise RuntimeError("the Kubernetes stand-in did not start: " + server.stderr.read())
    yield os.path.join(d, "kubeconfig")
    subprocess.run([sys.executable, os.path.join(SUPPORT, "kube_standin.py"), "stop", d], timeout=30)
    server.wait(timeout=15)


def daemon_socket(which):
    peers = os.environ.get("TJOB_TEST_PEERS")
    sock = os.path.join(peers, which + ".sock") if peers else None
    if not sock or not os.path.exists(sock):
        unavailable(f"{which} is not running (the container_peers fixture starts it; TJOB_TEST_PEERS)")
    return "unix://" + sock


def slurm_conf():
    """The private Slurm cluster of the slurm_peer fixture (tests/support/slurm_peer)."""
    d = os.environ.get("TJOB_TEST_SLURM")
    conf = os.path.join(d, "slurm.conf") if d else None
    if not conf or not os.path.exists(conf):
        unavailable("a Slurm cluster is not running (the slurm_peer fixture starts it; TJOB_TEST_SLURM)")
    return conf


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
