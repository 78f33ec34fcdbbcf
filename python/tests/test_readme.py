"""The README's Python example, word for word, and its install command."""
import os
import re
import subprocess
import sys

from conftest import ROOT


def readme_block(language, after):
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text[text.index(after):]
    return re.search(r"```" + language + r"\n(.*?)```", section, re.S).group(1)


def test_the_readmes_python_example_runs_as_written(tmp_path, home):
    code = readme_block("python", "## Python")
    assert "from tjob import TrainerClient" in code
    script = tmp_path / "example.py"
    script.write_text(code)
    # as the README says: offline, torch and numpy from Debian's Python
    env = dict(os.environ, TJOB_PYTHON="/usr/bin/python3", TJOB_SYSTEM_SITE_PACKAGES="1")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600,
                       cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "step 2: loss 1.5943\n" in r.stdout
    assert r.stdout.endswith("Complete\n")


def test_the_readmes_install_command_is_the_one_test_install_runs():
    command = readme_block("sh", "To install it")
    assert command.strip() == ("/usr/bin/python3 -m venv --system-site-packages venv && venv/bin/pip install "
                               "--no-build-isolation --no-index ./python")


def test_the_readmes_watch_the_bar_arguments_are_the_examples_own():
    # the prose's --args for a job slow enough to watch (issue 42, item 14): the function takes them
    import importlib.util
    import inspect
    import json
    text = open(os.path.join(ROOT, "README.md")).read()
    args = json.loads(re.search(r"--args '(\{[^']*\})'`\s*runs for", text).group(1))
    assert args["seconds_per_epoch"] * args["epochs"] >= 10  # what "runs for 15 s" rests on
    spec = importlib.util.spec_from_file_location("train_linear", os.path.join(ROOT, "examples", "train_linear.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    inspect.signature(module.train_model).bind(**args)


def _section(title):
    text = open(os.path.join(ROOT, "README.md")).read()
    return text.split("## " + title + "\n", 1)[1].split("\n## ", 1)[0]


def test_the_readmes_sweep_commands_run_as_written(tmp_path, home):
    from conftest import BUILD

    script = re.search(r"```sh\n(.*?)```", _section("Sweeps"), re.S).group(1)
    assert script.count("build/tjob") == 2
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(os.path.join(ROOT, "examples"), work / "examples")
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script.replace("build/tjob", os.path.join(BUILD, "tjob"))],
                       cwd=str(work), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("Sweep lr-sweep: Complete\n")
    table = r.stdout.split("\nTRIAL", 1)[1]
    assert table.count("Complete") == 8
    best = re.search(r"Best: (lr-sweep-\d+) loss=", r.stdout).group(1)
    assert table.split("\n")[1].startswith(best + " ")  # best first
    assert r.stdout.rstrip().split("\n")[-1].startswith("epoch=")  # the best trial's log


def test_the_readmes_sweep_example_runs_as_written(tmp_path, home):
    code = re.search(r"```python\n(.*?)```", _section("Sweeps"), re.S).group(1)
    assert "from tjob.optimizer import OptimizerClient" in code
    script = tmp_path / "sweep.py"
    script.write_text(code)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                       cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^best: \{'lr': [0-9.e-]+, 'epochs': [36]\} \[\('loss', [0-9.e-]+\)\]$", r.stdout, re.M), r.stdout
