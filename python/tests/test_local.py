"""The Python client on the local backend: real processes, real pip against the loopback index."""
import datetime
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import tjob
from tjob import (AsyncTrainerClient, BuiltinTrainer, CommandTrainer, CustomTrainer, Initializer,
                  JobFailedError, Labels, LocalProcessBackendConfig, Name, TrainerClient)

from conftest import HELPER, TJOB


def train_model(lr, epochs=2):
    import tinyjob

    print("tinyjob says", tinyjob.hello())
    for epoch in range(epochs):
        print(f"epoch {epoch} lr {lr}")


def test_the_kubeflow_example_runs_with_only_its_import_changed(home, index, system_torch):
    client = TrainerClient(backend_config=LocalProcessBackendConfig(cleanup_venv=True))
    name = client.train(trainer=CustomTrainer(func=train_model, func_args={"lr": 0.1},
                                              packages_to_install=["tinyjob"], pip_index_urls=[index],
                                              num_nodes=1))
    lines = list(client.get_job_logs(name, follow=True))
    job = client.wait_for_job_status(name)
    assert job.status == "Complete"
    assert job.name == name and len(name) == 12
    assert job.runtime.name == "torch-distributed"
    assert [s.name for s in job.steps] == ["node-0"]
    assert job.steps[0].exit_code == 0
    assert isinstance(job.creation_timestamp, datetime.datetime)
    assert job.start_time <= job.end_time
    text = "".join(lines)
    assert "tinyjob says hi" in text
    assert "epoch 1 lr 0.1\n" in text
    assert all(line.endswith("\n") for line in lines)
    # the venv went with the job (cleanup_venv)
    assert not os.path.exists(os.path.join(home, "jobs", name, "venv"))
    client.close()


def test_a_script_trainer_runs_with_its_arguments(home, index, tmp_path, system_torch):
    script = tmp_path / "train.py"
    script.write_text("import sys, tinyjob\nprint('args', sys.argv[1:], tinyjob.hello())\n")
    with TrainerClient() as client:
        name = client.train(trainer=CustomTrainer(func=str(script), args=["--lr", "0.5"],
                                                  packages_to_install=["tinyjob"], pip_index_urls=[index]),
                            options=[Name("script-job")])
        assert name == "script-job"
        client.wait_for_job_status(name)
        assert "args ['--lr', '0.5'] hi from tinyjob 1.2.0" in "".join(client.get_job_logs(name))


def hello():
    print("hello")


def test_resources_per_node_reach_the_job(home, system_torch):
    with TrainerClient() as client:
        name = client.train(runtime="python", trainer=CustomTrainer(func=hello, resources_per_node={"memory": "512Mi"}))
        client.wait_for_job_status(name)
        log = "".join(client.get_job_logs(name))
        # a memory cgroup of 512 MiB, or (where none can be made) the address-space limit, said so
        assert "512 MiB" in log and "hello\n" in log


def save_when_warned():
    import os
    import time

    import tjob

    for step in range(600):  # a training loop: a step, then a look at the warning
        if tjob.stop_requested():
            with open(os.path.join(tjob.checkpoint_dir(), "step"), "w") as f:
                f.write(str(step))
            print("rank", os.environ.get("RANK"), "warned: saved at step", step)
            return
        time.sleep(0.05)
    raise SystemExit(3)  # never warned


def test_a_warning_before_the_deadline_lets_a_torch_job_save_and_end_complete(home, system_torch):
    # The torch runtime: torchrun's agent gets the signal too, and lives (tjob handles it in every
    # process of the job), and the worker's tjob.stop_requested() turns true. Unwarned, the loop ends in
    # 30 s with exit 3; the deadline would come at 40 s.
    with TrainerClient() as client:
        name = client.train(trainer=CustomTrainer(func=save_when_warned),
                            options=[tjob.ActiveDeadlineSeconds(40), tjob.StopWarning("USR1", 32)])
        job = client.wait_for_job_status(name, timeout=120)
        assert job.runtime.name == "torch-distributed"
        assert "rank 0 warned: saved at step" in "".join(client.get_job_logs(name))
        warned = [e.message for e in client.get_job_events(name) if e.reason == "Warned"]
        assert warned == ["SIGUSR1 sent to the job's processes, 32 s before its active deadline of 40 s"]
        with pytest.raises(ValueError, match="the job has no active deadline to warn of"):
            client.train(trainer=CommandTrainer([HELPER]), options=[tjob.StopWarning()])
        with pytest.raises(ValueError, match=r"StopWarning.seconds=0: give a whole number of seconds"):
            client.train(trainer=CommandTrainer([HELPER]),
                         options=[tjob.ActiveDeadlineSeconds(9), tjob.StopWarning("USR1", 0)])
        with pytest.raises(ValueError, match=r"warning.signal: 'KILL' is not a signal a job can handle"):
            client.train(trainer=CommandTrainer([HELPER]),
                         options=[tjob.ActiveDeadlineSeconds(9), tjob.StopWarning("KILL", 5)])
        assert [j.name for j in client.list_jobs()] == [name]


def save_when_stopped():
    import time

    import tjob
    print("up", flush=True)
    for step in range(1200):
        if tjob.stop_requested():
            print("asked to stop: saved at step", step, flush=True)
            return
        time.sleep(0.05)
    raise SystemExit(3)  # never warned


def test_cancel_with_checkpoint_warns_the_job_which_saves_and_ends_cancelled(home, system_torch):
    # tjob's own (Kubeflow has no such cancel): the job's StopWarning now, then up to its 300 s for the
    # job to end by itself; it does at once, and the end is the cancel's.
    with TrainerClient() as client:
        name = client.train(trainer=CustomTrainer(func=save_when_stopped),
                            options=[tjob.ActiveDeadlineSeconds(600), tjob.StopWarning("USR1", 300)])
        for line in client.get_job_logs(name, follow=True):
            if line.startswith("up"):
                break
        client.cancel_job(name, checkpoint=True)
        job = client.get_job(name)
        assert (job.status, job.steps[0].status) == ("Failed", "Failed")
        assert "asked to stop: saved at step" in "".join(client.get_job_logs(name))
        assert any("by a cancel with checkpoint" in e.message for e in client.get_job_events(name))
        plain = client.train(trainer=CommandTrainer([HELPER, "sleep", "60000"]))
        client.wait_for_job_status(plain, status={"Running"})
        with pytest.raises(ValueError, match="submitted without a warning signal"):
            client.cancel_job(plain, checkpoint=True)
        client.cancel_job(plain)


def test_a_failing_job_raises_with_its_step_exit_code_and_last_lines(home):
    with TrainerClient() as client:
        name = client.train(trainer=CommandTrainer([HELPER, "print", "the loss is nan\n", "exit", "3"]))
        with pytest.raises(JobFailedError) as e:
            client.wait_for_job_status(name)
        assert isinstance(e.value, RuntimeError)
        assert e.value.step == "node-0"
        assert e.value.exit_code == 3
        assert e.value.job.status == "Failed"
        assert "exit code 3" in str(e.value)
        assert "the loss is nan" in str(e.value)
        # asking for Failed is no failure
        assert client.wait_for_job_status(name, status={"Failed"}).status == "Failed"


def test_follow_yields_lines_while_the_job_is_still_running(home, gate):
    with TrainerClient() as client:
        name = client.train(trainer=CommandTrainer([HELPER, "print", "first\n", "read-fifo", gate.path,
                                                    "print", "second\n"]))
        logs = client.get_job_logs(name, follow=True)
        # the job writes "second" only after this reader has seen "first": a reader that
        # only replays what is stored would wait for the job's end and never get here
        assert next(logs) == "first\n"
        assert client.get_job(name).status == "Running"
        gate.release()
        assert list(logs) == ["second\n"]
        assert client.wait_for_job_status(name).status == "Complete"


def test_tail_timestamps_and_since(home):
    with TrainerClient() as client:
        name = client.train(trainer=CommandTrainer([HELPER, "lines", "5"]))
        client.wait_for_job_status(name)
        assert list(client.get_job_logs(name, tail=2)) == ["line 4\n", "line 5\n"]
        stamped = list(client.get_job_logs(name, timestamps=True))
        assert len(stamped) == 5 and stamped[0][29:] == "Z line 1\n"
        assert list(client.get_job_logs(name, since=datetime.timedelta(hours=1)))[-1] == "line 5\n"
        future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        assert list(client.get_job_logs(name, since=future)) == []


def test_callbacks_see_each_status_and_polling_interval_is_not_polling(home, gate):
    seen = []
    with TrainerClient() as client:
        name = client.train(trainer=CommandTrainer([HELPER, "print", "up\n", "read-fifo", gate.path]))
        assert next(client.get_job_logs(name, follow=True)) == "up\n"

        def callback(j):
            seen.append(j.status)
            if len(seen) == 1:  # the job ends only after the callback has seen it running
                gate.release()

        job = client.wait_for_job_status(name, callbacks=[callback], timeout=60, polling_interval=59)
        assert job.status == "Complete"
        assert seen[0] == "Running" and seen[-1] == "Complete"


def test_callbacks_are_not_called_for_other_jobs_changes(home, gate):
    seen = []
    with TrainerClient() as client:
        name = client.train(trainer=CommandTrainer([HELPER, "print", "up\n", "read-fifo", gate.path]))
        assert next(client.get_job_logs(name, follow=True)) == "up\n"

        def callback(j):
            seen.append(j.status)
            if len(seen) == 1:
                # other jobs start and end while this one waits; only then does it end
                for i in range(3):
                    client.wait_for_job_status(client.train(trainer=CommandTrainer([HELPER, "exit", "0"])))
                gate.release()

        client.wait_for_job_status(name, callbacks=[callback], timeout=60, polling_interval=59)
        assert seen == ["Running", "Complete"]


def test_a_wait_times_out_with_timeout_error_and_the_job_runs_on(home, gate):
    with TrainerClient() as client:
        name = client.train(trainer=CommandTrainer([HELPER, "read-fifo", gate.path]))
        with pytest.raises(TimeoutError):
            client.wait_for_job_status(name, timeout=1, polling_interval=0.5)
        assert client.get_job(name).status in ("Created", "Running")
        gate.release()
        assert client.wait_for_job_status(name).status == "Complete"


def _uses_module_names():
    print(os.getpid(), HELPER)


def test_bad_input_is_a_value_error_naming_the_field_before_anything_is_created(home):
    def needs(a, b):
        pass

    x = 3

    def closure():
        return x

    with TrainerClient() as client:
        cases = [
            (dict(trainer=CustomTrainer(func=lambda: None)), "lambda"),
            (dict(trainer=CustomTrainer(func=closure)), "closure over x"),
            # a value of the wrong type names its field and what it takes (issue 42)
            (dict(trainer=CustomTrainer(func=train_model, func_args={"lr": 1}, packages_to_install="numpy")),
             "CustomTrainer.packages_to_install='numpy': give a list of strings, such as ['numpy', 'torch==2.3']"),
            (dict(trainer=CustomTrainer(func=train_model, func_args={"lr": 1}, pip_index_urls="http://x")),
             "CustomTrainer.pip_index_urls='http://x': give a list of strings"),
            (dict(trainer=CustomTrainer(func=train_model, func_args=[1])), "CustomTrainer.func_args=[1]: give a dict"),
            (dict(trainer=CustomTrainer(func=train_model, func_args={"lr": 1}, num_nodes="2")),
             "CustomTrainer.num_nodes='2': give a whole number, 1 or more"),
            (dict(trainer=CustomTrainer(func=train_model, func_args={"lr": 1}, num_nodes=True)),
             "CustomTrainer.num_nodes=True"),
            (dict(trainer=CustomTrainer(func=train_model, func_args={"lr": 1}, image=3)),
             "CustomTrainer.image=3: give a string"),
            (dict(trainer=CustomTrainer(func=train_model, func_args={"lr": 1}, env=["A=1"])),
             "CustomTrainer.env=['A=1']: give a dict"),
            (dict(trainer=CommandTrainer([HELPER], working_dir=5)), "CommandTrainer.working_dir=5: give a string"),
            (dict(trainer=CommandTrainer([HELPER], num_nodes=0)), "CommandTrainer.num_nodes=0"),
            (dict(trainer=CustomTrainer(func=_uses_module_names)),
             "'_uses_module_names' uses HELPER, os from its module, which the job does not have (it runs only the "
             "function's source): import os inside the function, define what it needs inside it, or pass values "
             "in func_args"),
            (dict(trainer=CustomTrainer(func=needs, func_args={"a": 1})), "needs b"),
            (dict(trainer=CustomTrainer(func=needs, func_args={"a": 1, "b": object()})), "JSON"),
            (dict(trainer=CustomTrainer(func=needs, func_args={"a": 1, "b": [float("inf")]})), "infinite float"),
            (dict(trainer=CustomTrainer(func=needs, func_args={"a": float("nan"), "b": 2})), "NaN"),
            (dict(trainer=CustomTrainer(func=train_model, func_args={"lr": 1},
                                        resources_per_node={"gpu": -1})), "gpu=-1"),
            (dict(trainer=CustomTrainer(func=train_model, func_args={"lr": 1},
                                        resources_per_node={"tpu": 1})), "'tpu': unknown key"),
            (dict(trainer=CommandTrainer("true")), "CommandTrainer.command='true': give a list of strings"),
            (dict(trainer=CommandTrainer([])), "CommandTrainer.command=[]: give the program"),
            (dict(trainer=CustomTrainer(func=train_model, func_args={"lr": 1}, resources_per_node=2)),
             "resources_per_node=2: give a dict"),
            (dict(trainer=CommandTrainer([HELPER]), options=[Name(3)]), "Name(3): give the job's name as a string"),
            (dict(trainer=CommandTrainer([HELPER]), options=[tjob.Dependencies(after_ok=5)]),
             "Dependencies.after_ok=5: give a list of job names"),
            (dict(trainer=CommandTrainer([HELPER]), options=[tjob.Dependencies(after_any="prep")]),
             "Dependencies.after_any='prep': give a list of job names"),
            (dict(trainer=CommandTrainer([HELPER]), options=[Name("../etc")]), "../etc"),
            (dict(trainer=CommandTrainer([HELPER]), options=[Labels({"a": "b"})]), "Labels option"),
            (dict(trainer=BuiltinTrainer()), "BuiltinTrainer"),
            (dict(trainer=CommandTrainer([HELPER]), initializer=Initializer()), "initializer"),
            (dict(trainer=None), "trainer"),
            (dict(trainer=CommandTrainer([HELPER]), options=[tjob.ActiveDeadlineSeconds(0)]), "1 or more"),
            (dict(trainer=CommandTrainer([HELPER]), options=[tjob.ActiveDeadlineSeconds(1.5)]), "whole number"),
            (dict(trainer=CommandTrainer([HELPER]), options=[tjob.Priority("high")]), "Priority('high')"),
            (dict(trainer=CommandTrainer([HELPER]), options=[tjob.RuntimePatch()]), "RuntimePatch"),
            (dict(trainer=CommandTrainer([HELPER]), runtime="no-such-runtime"), "no-such-runtime"),
        ]
        for kwargs, mention in cases:
            with pytest.raises(ValueError) as e:
                client.train(**kwargs)
            assert mention in str(e.value), (kwargs, str(e.value))
        assert client.list_jobs() == []
        with pytest.raises(ValueError, match="No TrainJob"):
            client.get_job("ghost")
        with pytest.raises(ValueError, match="ghost"):
            list(client.get_job_logs("ghost"))
        with pytest.raises(ValueError, match="Timeout must be a positive number"):
            client.wait_for_job_status("ghost", timeout=0)
        with pytest.raises(ValueError, match="subset"):
            client.wait_for_job_status("ghost", status={"Done"})
    with pytest.raises(ValueError, match="Invalid backend config"):
        TrainerClient(backend_config={"kind": "local"})


def test_a_backend_config_field_of_the_wrong_type_is_a_value_error_naming_it(home):
    """Issue 42: the configs' fields were passed on unchecked; a wrong type was a raw pybind11 error
    ("Unable to cast Python instance"), or was taken (a negative grace period, an int as the interpreter)."""
    cases = [
        (LocalProcessBackendConfig(cleanup_venv="no"), "LocalProcessBackendConfig.cleanup_venv='no': give True or False"),
        (LocalProcessBackendConfig(grace_period="5"), "LocalProcessBackendConfig.grace_period='5': give a number of seconds"),
        (LocalProcessBackendConfig(grace_period=-1), "LocalProcessBackendConfig.grace_period=-1"),
        (LocalProcessBackendConfig(max_running="2"), "LocalProcessBackendConfig.max_running='2': give a whole number"),
        (LocalProcessBackendConfig(cpu_budget=1.5), "LocalProcessBackendConfig.cpu_budget=1.5"),
        (LocalProcessBackendConfig(memory_budget=[1]), "LocalProcessBackendConfig.memory_budget=[1]: give bytes"),
        (LocalProcessBackendConfig(python=3), "LocalProcessBackendConfig.python=3: give a path"),
        (tjob.ContainerBackendConfig(volumes="/a:/b"), "ContainerBackendConfig.volumes='/a:/b': give a list of 'SOURCE:CONTAINER[:ro]' strings"),
        (tjob.ContainerBackendConfig(auto_remove=None), "ContainerBackendConfig.auto_remove=None"),
        (tjob.ContainerBackendConfig(initializer_timeout=0), "ContainerBackendConfig.initializer_timeout=0"),
        (tjob.KubernetesBackendConfig(namespace=3), "KubernetesBackendConfig.namespace=3: give a string"),
        (tjob.SlurmBackendConfig(sbatch_options="--time=5"), "SlurmBackendConfig.sbatch_options='--time=5'"),
        (tjob.SlurmBackendConfig(pack_nodes="yes"), "SlurmBackendConfig.pack_nodes='yes': give True or False"),
    ]
    for config, mention in cases:
        with pytest.raises(ValueError) as e:
            TrainerClient(backend_config=config)
        assert mention in str(e.value), (config, str(e.value))
    # a path may be a pathlib.Path, as elsewhere in Python
    import pathlib
    with TrainerClient(backend_config=LocalProcessBackendConfig(home=pathlib.Path(home))) as client:
        assert client.list_jobs() == []


def test_a_backend_that_cannot_be_reached_is_a_runtime_error(home, tmp_path):
    with pytest.raises(RuntimeError):
        c = TrainerClient(backend_config=tjob.ContainerBackendConfig(
            container_host="unix://" + str(tmp_path / "no.sock")))
        c.list_jobs()


def test_types_pickle_and_print_as_dataclasses(home):
    with TrainerClient() as client:
        name = client.train(trainer=CommandTrainer([HELPER, "exit", "0"]), options=[Name("pickled")])
        job = client.wait_for_job_status(name)
        again = pickle.loads(pickle.dumps(job))
        assert again == job
        assert repr(job).startswith("TrainJob(name='pickled'")
        assert pickle.loads(pickle.dumps(client.list_runtimes())) == client.list_runtimes()
        events = client.get_job_events(name)
        assert [e.reason for e in events][:2] == ["Created", "Started"]
        assert pickle.loads(pickle.dumps(events)) == events
        err = JobFailedError("boom", job)
        back = pickle.loads(pickle.dumps(err))
        assert str(back) == "boom" and back.job == job


def test_closing_a_client_ends_its_waits_and_follows_before_its_engine_goes(home, gate):
    client = TrainerClient()
    name = client.train(trainer=CommandTrainer([HELPER, "print", "up\n", "read-fifo", gate.path]))
    logs = client.get_job_logs(name, follow=True)
    assert next(logs) == "up\n"
    ended = {}

    def follow():
        try:
            list(logs)
        except RuntimeError as e:
            ended["follow"] = str(e)

    def wait():
        try:
            client.wait_for_job_status(name, timeout=600)
        except RuntimeError as e:
            ended["wait"] = str(e)

    threads = [threading.Thread(target=follow), threading.Thread(target=wait)]
    for t in threads:
        t.start()
    # both are in flight on the engine: the job waits on the gate
    while client.get_job(name).status != "Running":
        pass
    client.close()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert "shutting down" in ended["wait"] and "shutting down" in ended["follow"]
    gate.release()


def test_several_threads_share_one_client(home):
    with TrainerClient() as client:
        names, errors = [], []

        def worker(i):
            try:
                n = client.train(trainer=CommandTrainer([HELPER, "print", f"from {i}\n"]))
                client.wait_for_job_status(n)
                names.append((i, n, "".join(client.get_job_logs(n))))
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert errors == []
        assert sorted(i for i, _, _ in names) == list(range(8))
        assert all(log == f"from {i}\n" for i, _, log in names)


def test_a_job_from_one_process_is_listed_followed_and_deleted_from_another_and_the_cli(home, gate, tmp_path):
    # A detached job outlives the Python process that started it.
    starter = tmp_path / "start.py"
    command = [HELPER, "print", "hello\n", "read-fifo", gate.path, "print", "bye\n"]
    starter.write_text(textwrap.dedent(f"""
        from tjob import TrainerClient, CommandTrainer, Name
        c = TrainerClient()
        print(c.train(trainer=CommandTrainer({command!r}), options=[Name("shared")], detach=True))
    """))
    out = subprocess.run([sys.executable, str(starter)], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(tjob.__file__))))
    assert out.returncode == 0, out.stderr
    assert out.stdout == "shared\n"
    with TrainerClient() as client:
        assert [j.name for j in client.list_jobs()] == ["shared"]
        logs = client.get_job_logs("shared", follow=True)
        assert next(logs) == "hello\n"
        cli = subprocess.run([TJOB, "list", "-o", "name"], capture_output=True, text=True, timeout=60)
        assert cli.stdout == "shared\n"
        gate.release()
        assert list(logs) == ["bye\n"]
        assert client.wait_for_job_status("shared").status == "Complete"
        assert subprocess.run([TJOB, "logs", "shared"], capture_output=True, text=True).stdout == "hello\nbye\n"
        client.delete_job("shared")
        assert client.list_jobs() == []
        assert subprocess.run([TJOB, "list", "-o", "name"], capture_output=True, text=True).stdout == ""
        # and the other way: one this process started, deleted by the CLI
        other = client.train(trainer=CommandTrainer([HELPER, "exit", "0"]), options=[Name("by-cli")], detach=True)
        client.wait_for_job_status(other)
        assert subprocess.run([TJOB, "delete", "by-cli"], capture_output=True, text=True).returncode == 0
        assert client.list_jobs() == []


def test_ctrl_c_in_a_wait_raises_keyboard_interrupt_and_leaves_the_job_running(home, gate, tmp_path):
    script = tmp_path / "waiter.py"
    command = [HELPER, "print", "up\n", "read-fifo", gate.path]
    script.write_text(textwrap.dedent(f"""
        import sys, time
        from tjob import TrainerClient, CommandTrainer, Name
        c = TrainerClient()
        name = c.train(trainer=CommandTrainer({command!r}),
                       options=[Name("waited")], detach=True)
        try:
            # the callback runs inside the wait: the signal comes while it waits, once the job runs
            # (on a loaded machine its first state seen may still be Created)
            c.wait_for_job_status(name, timeout=600,
                                  callbacks=[lambda j: j.status == "Running" and print("waiting", flush=True)])
            print("not interrupted")
        except KeyboardInterrupt:
            print("interrupted", c.get_job(name).status, flush=True)
        try:
            for line in c.get_job_logs(name, follow=True):
                print("following", flush=True)  # then the log has nothing more until the gate opens
            print("not interrupted")
        except KeyboardInterrupt:
            print("interrupted", c.get_job(name).status, flush=True)
    """))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(tjob.__file__))))
    assert p.stdout.readline() == "waiting\n"
    p.send_signal(signal.SIGINT)
    assert p.stdout.readline() == "interrupted Running\n"
    assert p.stdout.readline() == "following\n"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert out == "interrupted Running\n", err
    with TrainerClient() as client:
        assert client.get_job("waited").status == "Running"
        gate.release()
        assert client.wait_for_job_status("waited").status == "Complete"


def test_an_async_client_follows_and_waits_without_a_thread_per_call(home, gate):
    import asyncio

    async def main():
        async with AsyncTrainerClient() as client:
            name = await client.train(trainer=CommandTrainer([HELPER, "print", "one\n", "read-fifo", gate.path,
                                                              "print", "two\n"]))
            got = []
            async for line in client.get_job_logs(name, follow=True):
                got.append(line)
                if line == "one\n":
                    assert (await client.get_job(name)).status == "Running"
                    await asyncio.get_running_loop().run_in_executor(None, gate.release)
            assert got == ["one\n", "two\n"]
            job = await client.wait_for_job_status(name)
            assert job.status == "Complete"
            with pytest.raises(JobFailedError):
                bad = await client.train(trainer=CommandTrainer([HELPER, "exit", "4"]))
                await client.wait_for_job_status(bad)
            return threading.active_count()

    before = threading.active_count()
    during = asyncio.run(main())
    assert during <= before + 2  # the engine's thread (and asyncio's resolver, at most)


def test_a_thousand_async_jobs_submitted_and_awaited_together(home):
    import asyncio

    async def main():
        async with AsyncTrainerClient() as client:
            names = await asyncio.gather(*[client.train(trainer=CommandTrainer([HELPER, "print", f"{i}\n"]))
                                           for i in range(1000)])
            jobs = await asyncio.gather(*[client.wait_for_job_status(n) for n in names])
            return names, jobs

    names, jobs = asyncio.run(main())
    assert len(set(names)) == 1000
    assert all(j.status == "Complete" for j in jobs)


def test_a_deadline_stops_the_job_and_the_queue_orders_by_priority(home, gate, tmp_path):
    """ActiveDeadlineSeconds is enforced (Kubeflow's local backends refuse it); Priority orders the queue."""
    order = tmp_path / "order"
    with TrainerClient(backend_config=LocalProcessBackendConfig(max_running=1, cpu_budget=0,
                                                                 memory_budget="1Gi")) as client:
        slow = client.train(trainer=CommandTrainer([HELPER, "sleep", "60000"]),
                            options=[tjob.ActiveDeadlineSeconds(1), Name("slow")])
        job = client.wait_for_job_status(slow, status={"Failed"}, timeout=60)
        assert job.steps[0].status == "Failed"
        reasons = [e.reason for e in client.get_job_events(slow)]
        assert "CancelRequested" in reasons
        blocker = client.train(trainer=CommandTrainer([HELPER, "read-fifo", gate.path]))
        for name, prio in (("low", 0), ("high", 9)):
            client.train(trainer=CommandTrainer([HELPER, "append", str(order), name]),
                         options=[Name(name), tjob.Priority(prio)])
        assert client.get_job("low").status == "Created"
        queue = client.get_queue()
        assert [(q.name, q.position, q.priority) for q in queue] == [("high", 1, 9), ("low", 2, 0)]
        assert queue[0].waits_for == "a running slot (1 of max_running 1 in use)"
        assert queue[1].waits_for == "job high ahead of it"
        assert queue[0].cpus == 1 and queue[0].since.tzinfo is not None
        gate.release()
        client.wait_for_job_status("low", timeout=60)
        assert order.read_text() == "high\nlow\n"
        client.wait_for_job_status(blocker, timeout=60)
    with pytest.raises(ValueError, match="memory_budget"):
        TrainerClient(backend_config=LocalProcessBackendConfig(memory_budget="lots"))


def test_dependencies_chain_jobs_and_a_broken_link_fails_its_dependent(home, gate, tmp_path):
    order = tmp_path / "order"
    with TrainerClient() as client:
        client.train(trainer=CommandTrainer([HELPER, "read-fifo", gate.path, "append", str(order), "prep"]),
                     options=[Name("prep")])
        client.train(trainer=CommandTrainer([HELPER, "append", str(order), "fit"]),
                     options=[Name("fit"), tjob.Dependencies(after_ok=["prep"])])
        client.train(trainer=CommandTrainer([HELPER, "append", str(order), "alarm"]),
                     options=[Name("alarm"), tjob.Dependencies(after_not_ok=["prep"])])
        assert client.get_job("fit").status == "Created"
        gate.release()
        assert client.wait_for_job_status("fit", timeout=60).status == "Complete"
        assert client.wait_for_job_status("alarm", status={"Failed"}, timeout=60).status == "Failed"
        assert order.read_text() == "prep\nfit\n"
        with pytest.raises(ValueError, match="no such job"):
            client.train(trainer=CommandTrainer([HELPER]), options=[tjob.Dependencies(after_ok=["ghost"])])
        with pytest.raises(ValueError, match="a list of job names"):
            client.train(trainer=CommandTrainer([HELPER]), options=[tjob.Dependencies(after_ok="prep")])


def test_begin_holds_a_job_back_until_its_time(home):
    """Begin (tjob's option, Slurm's --begin): Created, reason Waiting, until then; never started before it."""
    begin = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) + datetime.timedelta(seconds=2)
    with TrainerClient() as client:
        name = client.train(trainer=CommandTrainer([HELPER, "print", "began\n"]),
                            options=[Name("later"), tjob.Begin(begin)])
        job = client.get_job(name)
        assert (job.status, job.reason) == ("Created", "Waiting")
        done = client.wait_for_job_status(name, timeout=60)
        assert done.start_time is not None and done.start_time >= begin
        # a naive datetime is local time; a string takes the CLI's forms
        naive = client.train(trainer=CommandTrainer([HELPER, "print", "x\n"]),
                             options=[tjob.Begin(datetime.datetime.now() + datetime.timedelta(days=1))])
        text = client.train(trainer=CommandTrainer([HELPER, "print", "x\n"]), options=[tjob.Begin("now+1d")])
        for waiting in (naive, text):
            assert client.get_job(waiting).reason == "Waiting"
            client.delete_job(waiting)
        with pytest.raises(ValueError, match=r"begin: \"soon\" is not a time; give now\+N"):
            client.train(trainer=CommandTrainer([HELPER]), options=[tjob.Begin("soon")])
        with pytest.raises(ValueError, match=r"Begin\(5\): give a datetime"):
            client.train(trainer=CommandTrainer([HELPER]), options=[tjob.Begin(5)])


def test_retries_restart_a_failing_job_and_each_attempt_keeps_its_log(home, tmp_path):
    """Retries (tjob's option): fails twice, passes on the third attempt; never_retry is not retried."""
    counter = tmp_path / "attempts"
    with TrainerClient() as client:
        name = client.train(trainer=CommandTrainer([HELPER, "fail-until", str(counter), "3", "75", "print", "ok\n"]),
                            options=[Name("flaky"), tjob.Retries(max_restarts=3, backoff_seconds=0.1)])
        job = client.wait_for_job_status(name, timeout=60)
        assert job.steps[0].attempt == 3
        assert [e.reason for e in client.get_job_events(name)].count("Restarting") == 2
        assert list(client.get_job_logs(name, attempt=2)) == ["attempt 2\n"]
        assert list(client.get_job_logs(name)) == ["attempt 1\n", "attempt 2\n", "attempt 3\n", "ok\n"]
        never = client.train(trainer=CommandTrainer([HELPER, "exit", "2"]),
                             options=[tjob.Retries(max_restarts=3, never_retry=[2])])
        with pytest.raises(tjob.JobFailedError):
            client.wait_for_job_status(never, timeout=60)
        assert client.get_job(never).steps[0].attempt == 1
        with pytest.raises(ValueError, match=r"Retries.max_restarts=-1: give a whole number of restarts, 0 to 1000"):
            client.train(trainer=CommandTrainer([HELPER]), options=[tjob.Retries(max_restarts=-1)])
        with pytest.raises(ValueError, match="retry_on"):
            client.train(trainer=CommandTrainer([HELPER]), options=[tjob.Retries(max_restarts=1, retry_on="1")])


def trial(lr, index):
    import os

    print(f"trial {index} lr {lr} env {os.environ['TJOB_ARRAY_INDEX']}")


def test_an_array_sweeps_a_function_with_its_index_in_func_args(home, system_torch, gate, tmp_path):
    """The Array option: NAME-<i> with ARRAY_INDEX in func_args and $TJOB_ARRAY_INDEX; the array's name is one
    handle for get_array, wait_for_array, cancel_job and delete_job."""
    with TrainerClient(backend_config=LocalProcessBackendConfig(cpu_budget=0)) as client:
        name = client.train(runtime="python", trainer=CustomTrainer(func=trial, func_args={"lr": 0.5, "index": tjob.ARRAY_INDEX}),
                            options=[Name("sweep"), tjob.Array("0-4:2%2")])
        assert name == "sweep"
        jobs = client.wait_for_array(name, timeout=120)
        assert [j.name for j in jobs] == ["sweep-0", "sweep-2", "sweep-4"]
        assert all(j.status == "Complete" and j.array == "sweep" for j in jobs)
        for i in (0, 2, 4):
            assert f"trial {i} lr 0.5 env {i}\n" in list(client.get_job_logs(f"sweep-{i}"))
        assert [j.name for j in client.get_array("sweep")] == ["sweep-0", "sweep-2", "sweep-4"]
        # held members: one cancel of the array's name stops them all, one delete removes them
        held = client.train(trainer=CommandTrainer([HELPER, "read-fifo", gate.path]),
                            options=[Name("held"), tjob.Array("0-2")])
        client.cancel_job(held)
        with pytest.raises(JobFailedError):
            client.wait_for_array(held, timeout=60)
        assert {j.status for j in client.get_array(held)} == {"Failed"}
        client.delete_job(held)
        with pytest.raises(ValueError, match="No job array"):
            client.get_array(held)
        # all or nothing: a member whose name is taken submits none
        client.train(trainer=CommandTrainer([HELPER, "exit", "0"]), options=[Name("dup-1")])
        with pytest.raises(ValueError, match="dup-1"):
            client.train(trainer=CommandTrainer([HELPER, "exit", "0"]), options=[Name("dup"), tjob.Array("0-2")])
        assert sorted(j.name for j in client.list_jobs() if j.name.startswith("dup")) == ["dup-1"]
        for bad, why in ((tjob.Array("3-1"), "runs backwards"), (tjob.Array(""), "give the indices")):
            with pytest.raises(ValueError, match=why):
                client.train(trainer=CommandTrainer([HELPER]), options=[Name("b"), bad])
        with pytest.raises(ValueError, match="needs the Name option"):
            client.train(trainer=CommandTrainer([HELPER]), options=[tjob.Array("0-1")])


def test_a_detached_array_has_one_supervisor(home, tmp_path):
    with TrainerClient() as client:
        name = client.train(trainer=CommandTrainer([HELPER, "ppid"]), options=[Name("own"), tjob.Array("0-3")],
                            detach=True)
        jobs = client.wait_for_array(name, timeout=60)
        owners = {"".join(client.get_job_logs(j.name)) for j in jobs}
        assert len(owners) == 1 and owners != {f"{os.getpid()}\n"}


def test_a_working_dir_travels_with_the_job_and_is_importable(home, tmp_path):
    """CustomTrainer(working_dir=...) (issue 40; Ray's runtime_env working_dir): the function imports the
    directory's package and reads its data file; the excluded directory does not travel."""
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "__init__.py").write_text("def double(x):\n    return 2 * x\n")
    (project / "n.txt").write_text("21\n")
    (project / "runs").mkdir()
    (project / "runs" / "old.log").write_text("not sent\n")
    (project / ".gitignore").write_text("runs/\n")

    def train():
        import os

        import pkg
        print("answer", pkg.double(int(open("n.txt").read())), "runs" in os.listdir("."))

    with TrainerClient(backend_config=LocalProcessBackendConfig(python=sys.executable)) as client:
        name = client.train(runtime="python", trainer=CustomTrainer(func=train, working_dir=project))
        job = client.wait_for_job_status(name)
        assert job.status == "Complete"
        assert "answer 42 False\n" in list(client.get_job_logs(name))
        with pytest.raises(ValueError, match="CustomTrainer.working_dir=.*is not a directory"):
            client.train(runtime="python", trainer=CustomTrainer(func=train, working_dir=project / "nowhere"))


def test_an_attempt_resumes_from_the_checkpoint_directory_with_the_helpers(home):
    """tjob.checkpoint_dir() and tjob.restart_count() (issue 37): the first attempt saves and fails, the
    restart finds what it saved."""
    def train():
        import os

        import tjob
        path = os.path.join(tjob.checkpoint_dir(), "epoch")
        if tjob.restart_count() == 0:
            open(path, "w").write("3")
            raise SystemExit(5)
        print("restart", tjob.restart_count(), "resumes at epoch", open(path).read())

    with TrainerClient(backend_config=LocalProcessBackendConfig(python=sys.executable)) as client:
        name = client.train(runtime="python", trainer=CustomTrainer(func=train),
                            options=[tjob.Retries(max_restarts=1, backoff_seconds=0)])
        assert client.wait_for_job_status(name).status == "Complete"
        assert "restart 1 resumes at epoch 3\n" in list(client.get_job_logs(name))
    assert tjob.checkpoint_dir() is None and tjob.restart_count() == 0  # outside a job
