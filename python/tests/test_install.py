"""pip installs the package from the source tree with no network (Debian's setuptools, no build
isolation), and the installed package runs a job without the build tree on its path."""
import os
import shutil
import subprocess
import sys
import textwrap

from conftest import BUILD, HELPER, ROOT


def test_pip_installs_it_offline_into_a_venv_and_it_runs_a_job(tmp_path, home):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    src = tmp_path / "src"  # a copy: pip builds in the tree it is given
    shutil.copytree(os.path.join(ROOT, "python"), src, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info",
                                                                                  "__pycache__"))
    env = dict(os.environ, TJOB_SOURCE_DIR=ROOT, TJOB_BUILD_DIR=BUILD)
    env.pop("PYTHONPATH", None)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation", "--no-index", str(src)],
                         capture_output=True, text=True, env=env, timeout=900)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    script = tmp_path / "use.py"
    script.write_text(textwrap.dedent(f"""
        import tjob
        from tjob import TrainerClient, CommandTrainer
        assert tjob.__file__.startswith({str(venv)!r}), tjob.__file__
        with TrainerClient() as c:
            name = c.train(trainer=CommandTrainer([{HELPER!r}, "print", "installed\\n"]))
            print(c.wait_for_job_status(name).status, "".join(c.get_job_logs(name)), end="")
    """))
    run = subprocess.run([str(venv / "bin" / "python"), str(script)], capture_output=True, text=True, env=env,
                         cwd=str(tmp_path), timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "Complete installed\n"
