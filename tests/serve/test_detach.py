"""tjob serve --detach: serve.pid belongs to the server that listens (issue 42, item 12a)."""
import os
import select
import signal
import subprocess

from conftest import TJOB, DEADLINE


def wait_gone(pid):
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], DEADLINE)[0])
    finally:
        os.close(fd)


def test_a_refused_second_server_leaves_the_first_ones_pid_file(tmp_path):
    home = str(tmp_path / "home")
    env = dict(os.environ, TJOB_HOME=home)
    env.pop("TJOB_SERVER", None)
    pid_file = os.path.join(home, "serve.pid")
    first = subprocess.run([TJOB, "serve", "--detach"], env=env, capture_output=True, text=True, timeout=DEADLINE)
    assert first.returncode == 0, first.stderr
    pid = int(open(pid_file).read())
    try:
        os.kill(pid, 0)  # the file names the server, which runs
        second = subprocess.run([TJOB, "serve", "--detach"], env=env, capture_output=True, text=True,
                                timeout=DEADLINE)
        assert second.returncode == 1
        assert "tjob: error:" in second.stderr
        # the refused one wrote nothing over it: a kill by the file still reaches the listening server
        assert int(open(pid_file).read()) == pid
    finally:
        os.kill(pid, signal.SIGTERM)
    assert wait_gone(pid), "the server did not exit after SIGTERM"
    assert not os.path.exists(pid_file)  # the server removed its own file as it stopped
