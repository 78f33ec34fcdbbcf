"""The same client on the container backend, against both real daemons."""
import os

import pytest

from tjob import CommandTrainer, ContainerBackendConfig, CustomTrainer, JobFailedError, Name, TrainerClient

from conftest import daemon_socket

HOST_VOLUMES = ["/usr:/usr:ro", "/etc/alternatives:/etc/alternatives:ro", "/etc/ld.so.cache:/etc/ld.so.cache:ro"]


def train_model(lr):
    import sys

    print("python", sys.version_info[0], "lr", lr)


@pytest.mark.parametrize("daemon", ["docker", "podman"])
def test_the_kubeflow_example_on_a_container_daemon(home, daemon):
    sock = daemon_socket(daemon)
    config = ContainerBackendConfig(container_host=sock, container_runtime=daemon,
                                    image="localhost/tjob-host:bookworm", network="host", volumes=HOST_VOLUMES)
    with TrainerClient(backend_config=config) as client:
        name = client.train(trainer=CustomTrainer(func=train_model, func_args={"lr": 0.1}, num_nodes=1))
        lines = list(client.get_job_logs(name, follow=True))
        job = client.wait_for_job_status(name)
        assert job.status == "Complete"
        assert "python 3 lr 0.1\n" in lines
        assert name in [j.name for j in client.list_jobs()]
        client.delete_job(name)
        assert name not in [j.name for j in client.list_jobs()]


@pytest.mark.parametrize("daemon", ["docker", "podman"])
def test_a_failing_container_job_raises_with_its_exit_code(home, daemon):
    sock = daemon_socket(daemon)
    config = ContainerBackendConfig(container_host=sock, container_runtime=daemon, network="none")
    with TrainerClient(backend_config=config) as client:
        name = client.train(trainer=CommandTrainer(["sh", "-c", "echo the end; exit 7"],
                                                   image="localhost/tjob-bb:latest"),
                            options=[Name(f"py-fail-{daemon}")])
        with pytest.raises(JobFailedError) as e:
            client.wait_for_job_status(name)
        assert e.value.step == "node-0" and e.value.exit_code == 7
        assert "the end" in str(e.value)
        client.delete_job(name)


@pytest.mark.parametrize("daemon", ["docker", "podman"])
def test_a_container_array_waits_in_the_homes_queue_under_its_budget(home, daemon):
    """tjob's admission on the container backend: with max_running=1 a second job waits Created/Queued
    (no container yet) until the first ends, and an array's members run in turn."""
    import uuid

    import tjob

    sock = daemon_socket(daemon)
    config = ContainerBackendConfig(container_host=sock, container_runtime=daemon, network="none", max_running=1)
    image = "localhost/tjob-bb:latest"
    tag = uuid.uuid4().hex[:6]  # the daemon is shared with other tests' homes
    with TrainerClient(backend_config=config) as client:
        holder = client.train(trainer=CommandTrainer(["sleep", "600"], image=image), options=[Name(f"hold-{tag}")])
        try:
            client.wait_for_job_status(holder, {"Running"}, timeout=60)
            name = client.train(trainer=CommandTrainer(["sh", "-c", "echo member $TJOB_ARRAY_INDEX"], image=image),
                                options=[Name(f"pysweep-{tag}"), tjob.Array("0-2")])
            assert name == f"pysweep-{tag}"
            members = client.get_array(name)
            assert [m.status for m in members] == ["Created"] * 3
            assert [q.name for q in client.get_queue()] == [f"{name}-{i}" for i in range(3)]
            client.cancel_job(holder)
            jobs = client.wait_for_array(name, timeout=120)
            assert [j.status for j in jobs] == ["Complete"] * 3
            for i, j in enumerate(jobs):
                assert "".join(client.get_job_logs(j.name)) == f"member {i}\n"
            assert client.get_queue() == []
            client.delete_job(name)
            assert not [j for j in client.list_jobs() if j.name.startswith(name)]
        finally:
            client.delete_job(holder)


@pytest.mark.parametrize("daemon", ["docker", "podman"])
def test_volumes_and_env_in_kubeflows_shape_reach_every_node(home, daemon, tmp_path):
    """ContainerBackendConfig(volumes={SOURCE: {"bind": ..., "mode": ...}}, env={...}) as kubeflow/sdk #636 has
    them (issue 40): a host directory bound read-only, a named volume read-write, and the backend's env under
    the trainer's own."""
    import subprocess
    import uuid

    sock = daemon_socket(daemon)
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("x,y\n1,2\n")
    vol = "tjob-py-" + uuid.uuid4().hex[:8]
    config = ContainerBackendConfig(container_host=sock, container_runtime=daemon, network="none",
                                    volumes={data: {"bind": "/data", "mode": "ro"}, vol: {"bind": "/cache"}},
                                    env={"FROM": "backend", "KEPT": "yes"})
    try:
        with TrainerClient(backend_config=config) as client:
            script = 'cat /data/train.csv; echo "$FROM $KEPT" > /cache/said; cat /cache/said; touch /data/x 2>/dev/null || echo ro'
            name = client.train(trainer=CommandTrainer(["sh", "-c", script], env={"FROM": "trainer"},
                                                       image="localhost/tjob-bb:latest"))
            job = client.wait_for_job_status(name)
            lines = list(client.get_job_logs(name))
            assert job.status == "Complete"
            assert lines[:3] == ["x,y\n", "1,2\n", "trainer yes\n"]
            assert lines[-1] == "ro\n"  # the mode reached the daemon
            client.delete_job(name)
    finally:
        subprocess.run(["docker", "-H", sock, "volume", "rm", vol], capture_output=True)
    with pytest.raises(ValueError, match=r"ContainerBackendConfig.volumes=.*give a list of 'SOURCE:CONTAINER"):
        TrainerClient(backend_config=ContainerBackendConfig(container_host=sock, volumes={"/a": "/b"}))
    with pytest.raises(ValueError, match=r"ContainerBackendConfig.env=\['A=1'\]: give a dict"):
        TrainerClient(backend_config=ContainerBackendConfig(container_host=sock, env=["A=1"]))


@pytest.mark.parametrize("daemon", ["docker", "podman"])
def test_the_kubeflow_sweep_example_runs_in_containers_at_most_two_at_once(home, daemon, tmp_path):
    """Kubeflow's optimize() example (tests/test_optimizer.py's train_fn), each trial a container; the
    trials count themselves in a file of a directory they all mount."""
    from tjob.optimizer import OptimizerClient, Search, TrainJobTemplate, TrialConfig
    from test_optimizer import train_fn

    sock = daemon_socket(daemon)
    shared = str(tmp_path / "shared")
    os.makedirs(shared)
    config = ContainerBackendConfig(container_host=sock, container_runtime=daemon,
                                    image="localhost/tjob-host:bookworm", network="host",
                                    volumes=HOST_VOLUMES + [f"{shared}:{shared}:rw"])
    client = OptimizerClient(config)
    name = client.optimize(
        trial_template=TrainJobTemplate(trainer=CustomTrainer(func=train_fn,
                                                              env={"SWEEP_COUNTER": shared + "/counter"})),
        search_space={"learning_rate": Search.loguniform(0.001, 0.1), "num_epochs": Search.choice([5, 10])},
        trial_config=TrialConfig(num_trials=5, parallel_trials=2),
    )
    job = client.wait_for_job_status(name, timeout=600)
    assert [t.trainjob.status for t in job.trials] == ["Complete"] * 5
    with open(shared + "/counter") as f:
        assert f.read().split() == ["0", "2"]
    best = client.get_best_results(name)
    assert best is not None and set(best.parameters) == {"learning_rate", "num_epochs"}
    client.delete_job(name)
    with TrainerClient(backend_config=config) as trainer:
        assert not [j for j in trainer.list_jobs() if j.name.startswith(name)]
