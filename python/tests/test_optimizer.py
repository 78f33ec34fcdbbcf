"""tjob.optimizer: Kubeflow's OptimizerClient (kubeflow.optimizer 0.5) on the local backend, with real jobs."""
import asyncio
import json
import os
import subprocess

import pytest

import tjob
from tjob import CommandTrainer, CustomTrainer, LocalProcessBackendConfig, TrainerClient
from tjob.optimizer import (AsyncOptimizerClient, CategoricalSearchSpace, ContinuousSearchSpace, Direction,
                            GridSearch, MedianStop, Metric, Objective, OptimizationJob, OptimizerClient, RandomSearch, Result,
                            Search, TPESearch, TrainJobTemplate, Trial, TrialConfig)

from conftest import HELPER, TJOB


def train_fn(learning_rate, num_epochs):
    """Kubeflow's documented example, with one addition: each trial counts itself in a file shared by
    the trials (under a lock) and waits, a while at most, until two have run at once: the most
    at once it records proves both the limit and the parallelism."""
    import fcntl
    import os
    import time

    path = os.environ["SWEEP_COUNTER"]

    def count(delta):
        fd = os.open(path, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        text = os.pread(fd, 64, 0).decode().split()
        now, most = (int(text[0]), int(text[1])) if text else (0, 0)
        now += delta
        most = max(most, now)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{now} {most}\n".encode(), 0)
        os.close(fd)
        return most

    count(1)
    deadline = time.time() + 30
    while count(0) < 2 and time.time() < deadline:
        time.sleep(0.01)
    loss = (learning_rate - 0.01) ** 2 * 1000 + 1.0 / num_epochs
    print(f"epoch={num_epochs} loss={loss}")
    count(-1)


def test_the_kubeflow_example_runs_with_only_its_import_changed(home, tmp_path, system_torch):
    counter = str(tmp_path / "counter")
    client = OptimizerClient(LocalProcessBackendConfig())
    name = client.optimize(
        trial_template=TrainJobTemplate(trainer=CustomTrainer(func=train_fn, env={"SWEEP_COUNTER": counter})),
        search_space={"learning_rate": Search.loguniform(0.001, 0.1), "num_epochs": Search.choice([5, 10])},
        trial_config=TrialConfig(num_trials=5, parallel_trials=2),
    )
    assert len(name) == 12 and name[0].isalpha()
    seen = []
    job = client.wait_for_job_status(name, timeout=600, callbacks=[lambda j: seen.append(j.status)])
    assert isinstance(job, OptimizationJob)
    assert job.status == "Complete" and seen[-1] == "Complete"
    with open(counter) as f:
        now, most = map(int, f.read().split())
    assert (now, most) == (0, 2)
    assert [t.name for t in job.trials] == [f"{name}-{i}" for i in range(5)]
    losses = {}
    for t in job.trials:
        assert isinstance(t, Trial)
        lr, epochs = t.parameters["learning_rate"], t.parameters["num_epochs"]
        assert isinstance(lr, float) and 0.001 <= lr <= 0.1  # numbers, as the function got them
        assert epochs in (5, 10)
        assert t.trainjob.status == "Complete" and t.trainjob.name == t.name
        (loss,) = [m for m in t.metrics if m.name == "loss"]
        assert isinstance(loss, Metric)
        assert loss.latest == pytest.approx((lr - 0.01) ** 2 * 1000 + 1.0 / epochs)
        losses[t.name] = loss.latest
    assert job.search_space["learning_rate"] == ContinuousSearchSpace(0.001, 0.1, Search.loguniform(0, 1).distribution)
    assert job.search_space["num_epochs"] == CategoricalSearchSpace([5, 10])
    assert job.objectives == [Objective()] and job.objectives[0].direction == Direction.MINIMIZE
    assert isinstance(job.algorithm, RandomSearch)
    assert job.trial_config == TrialConfig(num_trials=5, parallel_trials=2)
    best = client.get_best_results(name)
    assert isinstance(best, Result)
    best_trial = min(losses, key=losses.get)
    assert best.parameters == [t for t in job.trials if t.name == best_trial][0].parameters
    assert [m.name for m in best.metrics] == ["loss"]
    # logs: the best trial's by default, or the one named
    (line,) = [x for x in client.get_job_logs(name) if " loss=" in x]
    assert float(line.split("loss=")[1]) == pytest.approx(losses[best_trial], rel=1e-12)
    other = job.trials[0].name
    assert "loss=" in "".join(client.get_job_logs(name, trial_name=other))
    with pytest.raises(ValueError, match="has no trial"):
        client.get_job_logs(name, trial_name="nope")
    assert [j.name for j in client.list_jobs()] == [name]
    events = client.get_job_events(name)
    assert {e.involved_object_name for e in events if e.involved_object_kind == "TrainJob"} == set(losses)
    # the CLI sees the same sweep
    table = subprocess.run([TJOB, "get", name], capture_output=True, text=True, check=True).stdout
    assert f"Best: {best_trial} loss=" in table
    client.delete_job(name)
    assert client.list_jobs() == []
    assert all(not j.name.startswith(name) for j in TrainerClient().list_jobs())


def reporting(x):
    import tjob

    # three sources: tjob.report (Kubeflow's progress protocol), and name=value lines on stdout, some bad
    tjob.report(progress=50, loss=x + 1.0, accuracy=0.5)
    tjob.flush()
    print("loss=not-a-number")
    print("loss=")
    print(f"step 2: loss={x}, accuracy=0.75")
    if tjob.trial_parameters() != {"x": x}:  # (not assert: pytest rewrites those, and the job has no pytest)
        raise SystemExit(5)


def test_a_reported_float_keeps_every_digit():
    from tjob.report import _value

    # (a sweep ranks trials by it: 6 significant digits made 1.6527736833527347 into 1.65277)
    assert _value(1.6527736833527347) == "1.6527736833527347" and float(_value(0.1 + 0.2)) == 0.1 + 0.2
    assert _value(3) == "3" and _value(float("nan")) == "nan"


def test_metrics_come_from_reports_and_stdout_and_bad_lines_are_ignored(home, system_torch):
    client = OptimizerClient()
    name = client.optimize(TrainJobTemplate(CustomTrainer(func=reporting), runtime="python"),
                           search_space={"x": Search.uniform(0, 1)}, trial_config=TrialConfig(num_trials=1),
                           objectives=[Objective("loss"), Objective("accuracy", Direction.MAXIMIZE)])
    job = client.wait_for_job_status(name, timeout=300)
    (t,) = job.trials
    x = t.parameters["x"]
    metrics = {m.name: m for m in t.metrics}
    assert metrics["loss"].min == pytest.approx(x) and metrics["loss"].max == pytest.approx(x + 1)
    assert metrics["loss"].latest == pytest.approx(x)
    assert metrics["accuracy"].max == 0.75
    raw = json.loads(subprocess.run([TJOB, "get", name, "-o", "json"], capture_output=True, text=True,
                                    check=True).stdout)
    history = raw["trials"][0]["metrics"][0]["history"]
    assert [v for _, v in history] == [pytest.approx(x + 1), pytest.approx(x)]  # in the order reported
    assert raw["trials"][0]["objective"] == pytest.approx(x)


def stepping(x):
    import time

    import tjob

    for _ in range(4):
        tjob.report(loss=float(x))
        tjob.flush()
    if x > 50:  # hopeless: it would go on two minutes more, then fail, were it not stopped
        time.sleep(120)
        raise SystemExit(3)


def test_the_median_rule_stops_a_hopeless_trial_which_ends_complete(home, system_torch):
    client = OptimizerClient()
    name = client.optimize(TrainJobTemplate(CustomTrainer(func=stepping), runtime="python"),
                           search_space={"x": Search.choice([1.0, 2.0, 3.0, 100.0])}, algorithm=GridSearch(),
                           trial_config=TrialConfig(num_trials=4),
                           early_stopping=MedianStop(min_trials_required=3, start_step=2))
    job = client.wait_for_job_status(name, timeout=100)  # (the hopeless trial alone would take 120 s)
    assert job.early_stopping == MedianStop(3, 2)
    by_x = {t.parameters["x"]: t for t in job.trials}
    assert [(by_x[x].status, by_x[x].reason) for x in (1.0, 2.0, 3.0)] == [("Complete", "")] * 3
    stopped = by_x[100.0]
    assert stopped.status == "Complete"
    assert stopped.reason.startswith("EarlyStopped: its best loss 100.0 after ")
    assert "worse than the median 2.0 of 3 completed trials' running averages" in stopped.reason
    assert {m.name: m.latest for m in stopped.metrics} == {"loss": 100.0}
    assert stopped.trainjob.status != "Complete"  # its job was stopped, the trial counts as complete
    assert client.get_best_results(name).parameters["x"] == 1.0
    table = subprocess.run([TJOB, "get", name], capture_output=True, text=True, check=True).stdout
    assert "Early stopping: median rule from report 2, once 3 trials have completed" in table
    with pytest.raises(ValueError, match=r"early_stopping.start_step=0: give a whole number of 1 or more"):
        client.optimize(TrainJobTemplate(CustomTrainer(func=stepping)), search_space={"x": Search.uniform(0, 1)},
                        early_stopping=MedianStop(start_step=0))


def test_grid_and_tpe_and_a_seed(home):
    client = OptimizerClient()
    command = CommandTrainer(command=[HELPER, "print", "loss=${trialParameters.x}\n"])
    # (a command trainer: tjob's; its parameters are ${trialParameters.NAME} in its arguments)
    grid = client.optimize(TrainJobTemplate(command), search_space={"x": Search.uniform(0, 1),
                                                                    "o": Search.choice(["a", "b"])},
                           trial_config=TrialConfig(num_trials=6, parallel_trials=3), algorithm=GridSearch())
    job = client.wait_for_job_status(grid)
    points = sorted((t.parameters["x"], t.parameters["o"]) for t in job.trials)
    assert points == [(0.0, "a"), (0.0, "b"), (0.5, "a"), (0.5, "b"), (1.0, "a"), (1.0, "b")]
    assert client.get_best_results(grid).parameters["x"] == 0.0
    seeded = [client.optimize(TrainJobTemplate(command), search_space={"x": Search.uniform(0, 1)},
                              trial_config=TrialConfig(num_trials=3), algorithm=RandomSearch(random_state=7))
              for _ in range(2)]
    params = [[t.parameters for t in client.wait_for_job_status(n).trials] for n in seeded]
    assert params[0] == params[1]
    tpe = client.optimize(TrainJobTemplate(command), search_space={"x": Search.uniform(0, 1)},
                          trial_config=TrialConfig(num_trials=2), algorithm=TPESearch(random_state=1))
    assert isinstance(client.wait_for_job_status(tpe).algorithm, TPESearch)


def test_trainer_client_optimize_and_the_async_clients(home):
    command = CommandTrainer(command=[HELPER, "print", "loss=${trialParameters.x}\n"])
    with TrainerClient() as trainer:
        name = trainer.optimize(TrainJobTemplate(command), search_space={"x": Search.uniform(0, 1)},
                                trial_config=TrialConfig(num_trials=2))
    client = OptimizerClient()
    assert client.wait_for_job_status(name).status == "Complete"

    async def main():
        aclient = AsyncOptimizerClient()
        async_name = await tjob.AsyncTrainerClient().optimize(TrainJobTemplate(command),
                                                               search_space={"x": Search.uniform(0, 1)},
                                                               trial_config=TrialConfig(num_trials=1))
        job = await aclient.wait_for_job_status(async_name)
        logs = await aclient.get_job_logs(async_name)
        return job, logs

    job, logs = asyncio.run(main())
    assert job.status == "Complete"
    assert logs and logs[0].startswith("loss=")


def test_wait_names_a_failed_sweep_and_cancel_stops_it(home, tmp_path):
    client = OptimizerClient()
    failing = client.optimize(TrainJobTemplate(CommandTrainer(command=[HELPER, "exit", "3"])),
                              search_space={"x": Search.uniform(0, 1)},
                              trial_config=TrialConfig(num_trials=4, max_failed_trials=1))
    # one at a time: the second failure ends it, and no third trial is made
    with pytest.raises(RuntimeError, match=r"is Failed: 2 trials failed, more than max_failed_trials 1: "):
        client.wait_for_job_status(failing)
    assert client.wait_for_job_status(failing, status={"Failed"}).status == "Failed"
    gate = str(tmp_path / "gate")
    waiting = client.optimize(TrainJobTemplate(CommandTrainer(command=[HELPER, "wait-most", gate, "1", "60000"])),
                              search_space={"x": Search.uniform(0, 1)}, trial_config=TrialConfig(num_trials=3))
    with pytest.raises(TimeoutError):
        client.wait_for_job_status(waiting, timeout=0.5)
    client.cancel_job(waiting)
    job = client.wait_for_job_status(waiting, status={"Failed"})
    assert job.reason == "cancelled"
    assert all(t.status == "Failed" for t in job.trials)


def test_bad_input_is_a_value_error_naming_the_field_before_anything_is_made(home):
    client = OptimizerClient()
    template = TrainJobTemplate(CommandTrainer(command=["true"]))
    space = {"x": Search.uniform(0, 1)}
    cases = [
        (dict(search_space={}), "Search space must be set."),
        (dict(search_space={"x": Search.uniform(1, 0)}), "search_space.x: min 1.0 is not below max 0.0"),
        (dict(search_space={"lr": Search.loguniform(0, 1)}), "search_space.lr: a loguniform range must be above 0"),
        (dict(search_space={"x": Search.choice([])}), "search_space.x: a choice needs at least one value"),
        (dict(search_space={"x": (0, 1)}), "search_space\\['x'\\]: tuple is not a search space"),
        (dict(search_space={"x": Search.choice([object()])}), "its choices must be numbers, strings"),
        (dict(search_space=space, algorithm="bayes"), "algorithm: str is not one tjob runs"),
        (dict(search_space=space, trial_config=TrialConfig(num_trials=0)), "trial_config.num_trials: 0"),
        (dict(search_space=space, trial_config=TrialConfig(parallel_trials=0)), "trial_config.parallel_trials"),
        (dict(search_space=space, algorithm=RandomSearch(random_state=-1)), "random_state=-1"),
        (dict(search_space=space, objectives=[Objective("loss"), Objective("loss")]), "metric 'loss' is given twice"),
    ]
    for kwargs, says in cases:
        with pytest.raises(ValueError, match=says):
            client.optimize(template, **kwargs)
    with pytest.raises(ValueError, match="runtime"):
        client.optimize(TrainJobTemplate(CommandTrainer(command=["true"]), runtime="nope"), search_space=space)
    with pytest.raises(ValueError, match="initializer"):
        client.optimize(TrainJobTemplate(CommandTrainer(command=["true"]), initializer=tjob.Initializer()),
                        search_space=space)
    assert client.list_jobs() == []
    assert TrainerClient().list_jobs() == []
    assert not os.path.exists(os.path.join(home, "sweeps")) or os.listdir(os.path.join(home, "sweeps")) == []
