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
