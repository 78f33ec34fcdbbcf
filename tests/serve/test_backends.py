"""Every backend behind `tjob serve`, chosen by the server's flags: the same API on dockerd, Podman and a
Kubernetes API (the stand-in)."""
import os
import subprocess
import sys

import pytest

from conftest import SUPPORT, DEADLINE, unavailable


def daemon_socket(which):
    peers = os.environ.get("TJOB_TEST_PEERS")
    sock = os.path.join(peers, which + ".sock") if peers else None
    if not sock or not os.path.exists(sock):
        unavailable(f"{which} is not running (the container_peers fixture starts it; TJOB_TEST_PEERS)")
    return "unix://" + sock


def run_a_job(server, name, expect_line):
    r = server.post("/v1/jobs", {"name": name, "trainer": {"kind": "command",
                                                            "command": ["sh", "-c", "echo hello from $0; exit 3",
                                                                        name],
                                                            "image": "localhost/tjob-bb:latest"}})
    assert r.status == 201, r
    assert r.json()["name"] == name
    follow = server.get("/v1/jobs/%s/logs?follow=1" % name)
    assert follow.status == 200 and expect_line in follow.body, (follow, server.get("/v1/jobs/" + name),
                                                                 server.get("/v1/jobs/%s/logs" % name))
    r = server.get("/v1/jobs/%s/wait?timeout=%d" % (name, DEADLINE))
    assert (r.status, r.json()["code"]) == (409, "job_failed"), r
    assert "exit code 3" in r.json()["message"]
    job = server.get("/v1/jobs/" + name).json()
    assert job["status"] == "Failed" and job["steps"][0]["exit_code"] == 3
    assert name in [j["name"] for j in server.get("/v1/jobs").json()["items"]]
    reasons = [e["reason"] for e in server.get("/v1/jobs/%s/events" % name).json()["items"]]
    assert reasons and set(reasons) <= {"Created", "Started", "Exited", "StartFailed", "Cancelled", "Lost", "Setup",
                                        "Queued", "DevicesLeased", "CancelRequested", "Admitted", "Waiting"}, reasons
    assert server.request("DELETE", "/v1/jobs/" + name).status == 200
    assert server.get("/v1/jobs/" + name).status == 404


@pytest.mark.parametrize("daemon", ["docker", "podman"])
def test_the_container_backend_behind_the_server(make_server, daemon):
    sock = daemon_socket(daemon)
    s = make_server(["--backend", "container", "--container-host", sock, "--container-runtime", daemon,
                     "--network", "none"])
    assert "backend=container" in s.log()
    run_a_job(s, "srv-" + daemon, "hello from srv-" + daemon)


@pytest.mark.parametrize("daemon", ["docker", "podman"])
def test_a_container_that_cannot_start_is_an_error_and_the_server_lives_on(make_server, daemon):
    # Issue 41: the rollback of a failed start destroyed a path twice (g++ 12), and one such request
    # killed the server with every job it owned.
    sock = daemon_socket(daemon)
    s = make_server(["--backend", "container", "--container-host", sock, "--container-runtime", daemon,
                     "--network", "none"])
    r = s.post("/v1/jobs", {"name": "nostart", "trainer": {"kind": "command", "command": ["echo", "never"],
                                                           "working_dir": "/bin/busybox",
                                                           "image": "localhost/tjob-bb:latest"}})
    assert r.status in (400, 502, 503), r
    assert "nostart" in r.json()["message"], r
    assert s.proc.poll() is None, s.log()
    assert s.get("/v1/jobs/nostart").status == 404
    assert not os.path.exists(os.path.join(s.home, "containers", "nostart"))
    run_a_job(s, "after-" + daemon, "hello from after-" + daemon)


def test_the_kubernetes_backend_behind_the_server(make_server, tmp_path):
    d = str(tmp_path / "standin")
    os.makedirs(d)
    standin = subprocess.Popen([sys.executable, os.path.join(SUPPORT, "kube_standin.py"), "serve", d,
                                "--die-with-parent"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in standin.stdout:
            if "standin: serving on" in line:
                break
        else:
            raise RuntimeError("the Kubernetes stand-in did not start: " + standin.stderr.read())
        s = make_server(["--backend", "kubernetes", "--kubeconfig", os.path.join(d, "kubeconfig")])
        assert "backend=kubernetes" in s.log()
        run_a_job(s, "srv-kube", "hello from srv-kube")
    finally:
        subprocess.run([sys.executable, os.path.join(SUPPORT, "kube_standin.py"), "stop", d], timeout=DEADLINE)
        standin.wait(timeout=DEADLINE)
