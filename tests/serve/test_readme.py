"""The README's tjob serve example, run word for word (build/tjob is this build's tjob)."""
import os
import re
import select
import subprocess

from conftest import BUILD, ROOT, DEADLINE, unavailable


def readme_block(title):
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text.split("## " + title + "\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def test_the_readme_runs_the_main_job_over_the_api_with_curl(tmp_path):
    if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode != 0:
        unavailable("Debian's python3-torch")
    script = readme_block("The service")
    assert script.count("build/tjob") == 1
    script = script.replace("build/tjob", os.path.join(BUILD, "tjob"))
    home = str(tmp_path / "home")
    env = dict(os.environ, TJOB_HOME=home)
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(os.path.join(ROOT, "examples"), work / "examples")
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env, capture_output=True,
                         text=True, timeout=10 * DEADLINE)
    assert out.returncode == 0, out.stderr + out.stdout
    o = out.stdout
    assert '{"name":"linear","status":' in o  # the POST's 201 body
    for i in range(1, 4):
        assert "Epoch %d/3, Loss: " % i in o
    assert "Training completed!" in o
    assert '"status":"Complete"' in o.split("Training completed!", 1)[1]
    assert o.rstrip().endswith('{"name":"linear","deleted":true}')
    # the server drained and went: wait for its process to end (a pidfd, not a timer)
    pid_file = os.path.join(home, "serve.pid")
    try:
        pid = int(open(pid_file).read())
        fd = os.pidfd_open(pid)
        ready, _, _ = select.select([fd], [], [], DEADLINE)
        os.close(fd)
        assert ready, "the server did not exit after SIGTERM"
    except (FileNotFoundError, ProcessLookupError):
        pass  # already gone
    log = open(os.path.join(home, "serve.log")).read()
    assert "level=error" not in log, log
    assert "msg=draining signal=SIGTERM" in log and "msg=stopped" in log
    assert not os.path.exists(pid_file)


def test_the_readme_runs_the_cli_against_the_server(tmp_path):
    script = readme_block("The CLI as a client").replace("build/tjob", os.path.join(BUILD, "tjob"))
    home = str(tmp_path / "home")
    env = dict(os.environ, TJOB_HOME=home)
    env.pop("TJOB_SERVER", None)
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=10 * DEADLINE)
    assert out.returncode == 0, out.stderr + out.stdout
    assert out.stdout == "hello from the server\nhello\ndeleted hello\n"
    assert "tjob: job hello Complete in " in out.stderr
    log = open(os.path.join(home, "serve.log")).read()
    # the jobs went through the server: it logged each request
    assert 'method=POST path="/v1/jobs" status=201' in log, log
    assert 'method=DELETE path="/v1/jobs/hello" status=200' in log, log
