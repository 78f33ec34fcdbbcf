"""The same client on the Kubernetes backend, against the API stand-in."""
import pytest

from tjob import (Annotations, CustomTrainer, CustomTrainerContainer, JobFailedError, KubernetesBackendConfig,
                  Labels, Name, TrainerArgs, TrainerClient, TrainerCommand)

from conftest import HELPER


def train_model(lr):
    print("on the cluster with lr", lr)


def test_the_kubeflow_example_on_kubernetes(home, kube):
    with TrainerClient(backend_config=KubernetesBackendConfig(config_file=kube)) as client:
        name = client.train(trainer=CustomTrainer(func=train_model, func_args={"lr": 0.1}, num_nodes=1),
                            options=[Labels({"team": "vision"}), Annotations({"note": "py"})])
        lines = list(client.get_job_logs(name, follow=True))
        job = client.wait_for_job_status(name)
        assert job.status == "Complete"
        assert job.runtime.name == "torch-distributed"
        assert "on the cluster with lr 0.1\n" in lines
        assert [e.reason for e in client.get_job_events(name)]
        client.delete_job(name)
        assert name not in [j.name for j in client.list_jobs()]


def test_a_container_trainer_with_command_and_args_and_its_failure(home, kube):
    with TrainerClient(backend_config=KubernetesBackendConfig(config_file=kube)) as client:
        name = client.train(trainer=CustomTrainerContainer(image="localhost/anything:1"),
                            options=[Name("py-cmd"), TrainerCommand([HELPER]), TrainerArgs(["print", "x\n",
                                                                                           "exit", "5"])])
        with pytest.raises(JobFailedError) as e:
            client.wait_for_job_status(name)
        assert e.value.exit_code == 5
        assert list(client.get_job_logs(name)) == ["x\n"]


def test_the_controllers_trainer_status_is_the_jobs_progress(home, kube):
    """status.trainerStatus, as the controller writes what update_trainjob_status posts, on TrainJob."""
    import datetime
    import json
    import subprocess

    with TrainerClient(backend_config=KubernetesBackendConfig(config_file=kube)) as client:
        name = client.train(trainer=CustomTrainer(func=train_model, func_args={"lr": 0.1}), options=[Name("py-prog")])
        job = client.wait_for_job_status(name)
        assert (job.progress_percent, job.estimated_remaining_seconds, job.metrics, job.updated) == (None, None, {},
                                                                                                     None)
        status = {"status": {"trainerStatus": {"progressPercentage": 40, "estimatedRemainingSeconds": 12,
                                               "metrics": [{"name": "loss", "value": "0.5"}],
                                               "lastUpdatedTime": "2026-12-04T10:00:00Z"}}}
        subprocess.run(["kubectl", "--kubeconfig", kube, "patch", "trainjob", name, "--subresource=status",
                        "--type=merge", "-p", json.dumps(status)], check=True, capture_output=True)
        job = client.get_job(name)
        assert job.progress_percent == 40
        assert job.estimated_remaining_seconds == 12
        assert job.metrics == {"loss": "0.5"}
        assert job.updated == datetime.datetime(2026, 12, 4, 10, 0, tzinfo=datetime.timezone.utc)
        client.delete_job(name)
