"""The same client on the container backend, against both real daemons."""
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
