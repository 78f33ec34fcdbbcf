"""The same client on the slurm backend, against the private Slurm cluster of the slurm_peer fixture:
Kubeflow's example unchanged but for its backend config, a torch job of two nodes, and one that restarts."""
from tjob import CustomTrainer, Labels, Retries, SlurmBackendConfig, TrainerClient

from conftest import slurm_conf


def config():
    # one machine: a job's nodes are tasks packed on it; Debian's torch through the venv's system site
    return SlurmBackendConfig(slurm_conf=slurm_conf(), pack_nodes=True, python="/usr/bin/python3",
                              system_site_packages=True)


def train_model(lr):
    print("on slurm with lr", lr)


def test_the_kubeflow_example_on_slurm(home):
    with TrainerClient(backend_config=config()) as client:
        name = client.train(trainer=CustomTrainer(func=train_model, func_args={"lr": 0.1}, num_nodes=1),
                            options=[Labels({"team": "vision"})])
        lines = list(client.get_job_logs(name, follow=True))
        job = client.wait_for_job_status(name)
        assert job.status == "Complete"
        assert job.runtime.name == "torch-distributed"
        assert "on slurm with lr 0.1\n" in lines
        assert [e.reason for e in client.get_job_events(name)][0] == "Created"
        assert name in [j.name for j in client.list_jobs()]
        client.delete_job(name)
        assert name not in [j.name for j in client.list_jobs()]


def all_reduce():
    import os

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    print("node", os.environ["GROUP_RANK"], "world", dist.get_world_size(), "sum", int(t.item()), flush=True)
    dist.destroy_process_group()


def test_a_torch_job_of_two_nodes_meets_on_the_first_and_reduces(home):
    with TrainerClient(backend_config=config()) as client:
        name = client.train(trainer=CustomTrainer(func=all_reduce, num_nodes=2))
        job = client.wait_for_job_status(name, timeout=300)
        assert job.status == "Complete"
        assert [s.name for s in job.steps] == ["node-0", "node-1"]
        for i in (0, 1):
            assert f"node {i} world 2 sum 3\n" in list(client.get_job_logs(name, step=f"node-{i}"))


def all_reduce_after_a_failure():
    import os

    import torch
    import torch.distributed as dist

    import tjob

    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    if tjob.restart_count() == 0 and os.environ["GROUP_RANK"] == "1":
        raise SystemExit(75)  # the first attempt's node-1 fails after the first step
    print("attempt", tjob.restart_count() + 1, "world", dist.get_world_size(), "sum", int(t.item()), flush=True)
    dist.destroy_process_group()


def test_a_torch_job_restarts_as_a_gang_and_meets_again(home):
    # Retries on Slurm (docs/slurm.md): every node runs again, on a fresh rendezvous.
    with TrainerClient(backend_config=config()) as client:
        name = client.train(trainer=CustomTrainer(func=all_reduce_after_a_failure, num_nodes=2),
                            options=[Retries(max_restarts=2, backoff_seconds=0)])
        job = client.wait_for_job_status(name, status={"Complete", "Failed"}, timeout=300)
        assert job.status == "Complete", list(client.get_job_logs(name, step="node-1"))
        assert [s.attempt for s in job.steps] == [2, 2]
        for i in (0, 1):
            assert "attempt 2 world 2 sum 3\n" in list(client.get_job_logs(name, step=f"node-{i}", attempt=2))
        restarting = [e for e in client.get_job_events(name) if e.reason == "Restarting"]
        assert len(restarting) == 2 and "on node-1" in restarting[0].message
