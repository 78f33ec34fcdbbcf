"""Kubeflow's own update_trainjob_status, called from tjob jobs on the local and the container backend.

The function is read from a Kubeflow SDK checkout named by $TJOB_KUBEFLOW_SDK (the SDK is not on
this machine's package mirrors): its status-reporting code, unchanged, is loaded without the rest of
the SDK's import chain (which needs the Kubernetes client and Kubeflow's API models). Without a
checkout these cases are skipped. tests/integration/progress_test.cpp speaks the same protocol in
every case, with or without it.
"""
import ast
import os
import subprocess

import pytest

from tjob import CommandTrainer, ContainerBackendConfig, LocalProcessBackendConfig, TrainerClient

from conftest import TJOB, daemon_socket

SDK = os.environ.get("TJOB_KUBEFLOW_SDK")
UTILS = "kubeflow/trainer/backends/kubernetes/utils.py"
HOST_VOLUMES = ["/usr:/usr:ro", "/etc/alternatives:/etc/alternatives:ro", "/etc/ld.so.cache:/etc/ld.so.cache:ro"]


@pytest.fixture
def kubeflow_status(tmp_path):
    """A module kf_status holding the checkout's update_trainjob_status with the private helpers and
    state it uses, and the module's own imports of the standard library and requests."""
    if not SDK:
        pytest.skip("no Kubeflow SDK checkout (set TJOB_KUBEFLOW_SDK to one, e.g. of andreyvelich/sdk)")
    path = os.path.join(SDK, UTILS)
    source = open(path).read()
    tree = ast.parse(source)
    keep = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mod = getattr(node, "module", None) or node.names[0].name
            if not mod.startswith("kubeflow") and mod != "__future__":
                keep.append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if all(isinstance(t, ast.Name) and t.id.startswith("_") for t in targets):
                keep.append(node)
        elif isinstance(node, ast.FunctionDef) and (node.name == "update_trainjob_status" or node.name.startswith("_")):
            keep.append(node)
    names = [n.name for n in keep if isinstance(n, ast.FunctionDef)]
    assert "update_trainjob_status" in names, f"{path} has no update_trainjob_status"
    d = tmp_path / "kf"
    d.mkdir()
    (d / "kf_status.py").write_text("from __future__ import annotations\n" + ast.unparse(ast.Module(keep, [])))
    return str(d)


CODE = """
import sys
sys.path.insert(0, sys.argv[1])
import kf_status
ok = kf_status.update_trainjob_status(progress_percent=42, estimated_remaining_seconds=60,
                                      metrics={"loss": 0.125, "epoch": 3})
print("reported", ok, flush=True)
open(sys.argv[2]).read()
"""


def check_reported(client, name, gate, cli=()):
    lines = client.get_job_logs(name, follow=True)
    assert next(iter(lines)).strip() == "reported True"
    # While the job still runs: the engine's record, and another process's `tjob get`.
    job = client.get_job(name)
    assert job.status == "Running"
    assert job.progress_percent == 42
    assert job.estimated_remaining_seconds == 60
    assert job.metrics == {"loss": "0.125", "epoch": "3"}
    out = subprocess.run([TJOB, "get", name, "-o", "json", *cli], capture_output=True, text=True, check=True).stdout
    assert '"progress_percent": 42' in out or '"progress_percent":42' in out
    gate.release()
    assert client.wait_for_job_status(name).status == "Complete"
    progress = [e for e in client.get_job_events(name) if e.reason == "Progress"]
    assert len(progress) == 1
    assert progress[0].progress_percent == 42
    assert progress[0].metrics == {"loss": "0.125", "epoch": "3"}


def test_kubeflow_update_trainjob_status_reports_from_a_local_job(home, kubeflow_status, gate):
    client = TrainerClient(backend_config=LocalProcessBackendConfig())
    name = client.train(trainer=CommandTrainer(["/usr/bin/python3", "-c", CODE, kubeflow_status, gate.path]))
    check_reported(client, name, gate)


@pytest.mark.parametrize("daemon", ["docker", "podman"])
def test_kubeflow_update_trainjob_status_reports_from_a_container_job(home, kubeflow_status, gate, daemon):
    sock = daemon_socket(daemon)
    here = os.path.dirname(gate.path)
    config = ContainerBackendConfig(container_host=sock, container_runtime=daemon,
                                    image="localhost/tjob-host:bookworm", network="host",
                                    volumes=HOST_VOLUMES + [f"{here}:{here}", f"{kubeflow_status}:{kubeflow_status}:ro"])
    with TrainerClient(backend_config=config) as client:
        name = client.train(trainer=CommandTrainer(["/usr/bin/python3", "-c", CODE, kubeflow_status, gate.path]))
        check_reported(client, name, gate, ["--backend", "container", "--container-host", sock])
        client.delete_job(name)
