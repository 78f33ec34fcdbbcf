"""tjob serve's dashboard at `/`, in a real browser: Debian's chromium, headless, driven by playwright-core
(tests/serve/node/dashboard.mjs). A job that reports its progress and loss runs on the server; the page shows
its row appear and its bar move (live, from /v1/watch), plots its loss as points arrive, tails its log as it
grows, and cancels and deletes it behind a confirmation."""
import json
import os
import shutil
import subprocess

from conftest import DEADLINE, tjob_cli, unavailable

NODE_TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")
CHROMIUM = os.environ.get("TJOB_CHROMIUM", "/usr/bin/chromium")

# The job: a line and a report every 0.3 s, for up to five minutes (the page cancels it).
CODE = """
import sys, time, tjob
sys.modules["tjob.report"].min_interval = 0.2
for i in range(1, 1000):
    print("step %d loss %.4f" % (i, 1.0 / i), flush=True)
    tjob.report(progress=min(99, i), eta=1000 - i, loss=round(1.0 / i, 4), step=i)
    time.sleep(0.3)
"""


def _server_for_the_browser(make_server, tmp_path):
    """A server on a unix socket and on TCP with a token, for a page in chromium (skipped where node's
    packages or chromium are missing): the server, its TCP host and port, and the token."""
    if not shutil.which("node") or not os.path.isdir(os.path.join(NODE_TOOLS, "node_modules", "playwright-core")):
        unavailable("node and tests/serve/node's packages (scripts/setup runs npm ci there)")
    if not os.access(CHROMIUM, os.X_OK):
        unavailable("chromium is not installed (scripts/setup installs Debian's)")
    token = "dashboard-test-token-0123456789"
    (tmp_path / "token").write_text(token + "\n")
    os.chmod(tmp_path / "token", 0o600)  # (a token others may read is refused)
    s = make_server(["--listen", "unix://" + str(tmp_path / "s.sock"), "--listen", "tcp://127.0.0.1:0",
                     "--token-file", str(tmp_path / "token")])
    s.socket = str(tmp_path / "s.sock")
    host, port = s.tcp()
    return s, host, port, token


def test_the_dashboard_shows_a_job_live_and_cancels_it(make_server, tmp_path):
    s, host, port, token = _server_for_the_browser(make_server, tmp_path)
    # The page's own files need no token; the API does.
    page = s.request("GET", "/")
    assert page.status == 200 and "<title>tjob</title>" in page.body
    assert page.headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    chart_lib = s.request("GET", "/ui/uplot.js")
    assert chart_lib.status == 200 and "uPlot" in chart_lib.body, "the chart library is not bundled"
    assert s.submit(["/usr/bin/python3", "-c", CODE], name="dash") == "dash"
    shot = os.environ.get("TJOB_DASHBOARD_SCREENSHOT", str(tmp_path / "dashboard.png"))
    r = subprocess.run(["node", os.path.join(NODE_TOOLS, "dashboard.mjs"), "http://%s:%d" % (host, port), token,
                        "dash", shot], capture_output=True, text=True, timeout=4 * DEADLINE, cwd=NODE_TOOLS)
    assert r.stdout.strip(), r.stderr
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert "failed" not in seen, (seen, r.stderr)
    assert r.returncode == 0, r.stderr
    assert seen["login_shown"]
    assert "token" not in seen["address"]  # taken out of the address bar
    assert seen["live"]
    assert seen["bar"][1] > seen["bar"][0] >= 1
    assert seen["bar_width"].endswith("%")
    assert seen["row"][0] == "dash" and seen["row"][1] == "Running" and seen["row"][3] == "local"
    assert seen["points"][1] > seen["points"][0] >= 1
    assert seen["log_lines"][1] > seen["log_lines"][0] >= 1
    assert seen["log_last"].startswith("step ")
    assert seen["progress_events"] == 1  # the reports are plotted; the table has one row for them (issue 42)
    assert seen["dialogs"][0].startswith("Cancel job dash?")
    assert seen["dialogs"][1].startswith("Delete job dash?")
    assert seen["status"] == "Failed (cancelled)"
    assert seen["deleted"]
    assert seen["errors"] == [], "\n".join(seen["errors"])
    assert os.path.getsize(shot) > 10000
    assert s.get("/v1/jobs/dash").status == 404


# Two nodes: node-1 fails, and node-0 is stopped because of it.
FAILING_NODE = """
def go():
    import os, sys, time
    rank = int(os.environ["GROUP_RANK"])  # (torchrun's node rank, in its workers)
    print("this is node-%d" % rank, flush=True)
    if rank == 1:
        time.sleep(1)
        raise RuntimeError("node-1 gives up")
    time.sleep(600)
"""


def test_the_dashboard_opens_a_job_by_link_and_shows_the_failing_step_first(make_server, tmp_path):
    s, host, port, token = _server_for_the_browser(make_server, tmp_path)
    r = s.post("/v1/jobs", {"name": "pair", "runtime": "torch-distributed", "num_nodes": 2,
                            "trainer": {"kind": "python", "source": FAILING_NODE, "function": "go",
                                        "python": "/usr/bin/python3", "system_site_packages": True}})
    assert r.status == 201, r
    ended = s.wait("pair", "Failed")
    assert [st["status"] for st in ended["steps"]] == ["Failed", "Failed"], ended
    r = subprocess.run(["node", os.path.join(NODE_TOOLS, "steps.mjs"), "http://%s:%d" % (host, port), token, "pair"],
                       capture_output=True, text=True, timeout=4 * DEADLINE, cwd=NODE_TOOLS)
    assert r.stdout.strip(), r.stderr
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert "failed" not in seen, r.stdout
    assert seen["address"].endswith("/#job=pair")  # the token left the address, the job stayed
    assert seen["choices"] == ["node-0", "node-1"]
    assert seen["first_step"] == "node-1"  # the step whose failure was the job's, not the one stopped for it
    assert "node-1 gives up" in seen["first_log"]
    assert seen["second_step"] == "node-0" and "this is node-0" in seen["second_log"]
    assert seen["errors"] == [], "\n".join(seen["errors"])


# A trial: three epochs, each a line `epoch=E loss=L` (Katib's format); the loss falls towards
# (x - 0.3)^2, lower for adam.
TRIAL = """
import sys
x, opt = float(sys.argv[1]), sys.argv[2]
for e in (1, 2, 3):
    print("epoch=%d loss=%.6f" % (e, (x - 0.3) ** 2 + (0.1 if opt == "sgd" else 0) + 1.0 / (e * 10)), flush=True)
"""


def test_the_dashboard_shows_a_sweep_sorts_its_trials_and_deletes_it(make_server, tmp_path):
    s, host, port, token = _server_for_the_browser(make_server, tmp_path)
    r = s.post("/v1/sweeps", {
        "name": "sw", "seed": 3, "num_trials": 6, "parallel_trials": 3,
        "trial": {"trainer": {"kind": "command", "command": ["/usr/bin/python3", "-c", TRIAL,
                                                             "${trialParameters.x}", "${trialParameters.opt}"]}},
        "search_space": [{"name": "x", "distribution": "uniform", "min": 0, "max": 1},
                         {"name": "opt", "distribution": "choice", "choices": ["adam", "sgd"]}]})
    assert r.status == 201, r
    assert tjob_cli(s.home, "wait", "sw").stdout == "Complete\n"
    sweep = s.get("/v1/sweeps/sw").json()
    best = sweep["trials"][sweep["best"]]["name"]
    shot = os.environ.get("TJOB_SWEEP_SCREENSHOT", str(tmp_path / "sweep.png"))
    r = subprocess.run(["node", os.path.join(NODE_TOOLS, "sweep.mjs"), "http://%s:%d" % (host, port), token, "sw",
                        shot], capture_output=True, text=True, timeout=4 * DEADLINE, cwd=NODE_TOOLS)
    assert r.stdout.strip(), r.stderr
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert "failed" not in seen, (seen, r.stderr)
    assert seen["errors"] == [], "\n".join(seen["errors"])
    assert "token" not in seen["address"] and seen["address"].endswith("/#sweeps")
    assert seen["list_row"][:4] == ["sw", "Complete", "random", "6/6"]
    assert seen["list_row"][4].startswith(best + " loss=")
    assert seen["address_sweep"].endswith("/#sweep=sw")
    assert seen["status"] == "Complete"
    assert seen["best"].startswith("Best: " + best + " loss=")
    assert seen["headings"][:4] == ["Trial", "Status", "x", "opt"] and seen["headings"][4].startswith("loss (minimize)")
    losses = [float(v) for v in seen["by_objective"]["loss"]]
    assert losses == sorted(losses) and len(losses) == 6  # best first
    assert seen["by_objective"]["trials"][0] == best == seen["best_row"]
    xs = [float(v) for v in seen["by_x"]]
    assert xs == sorted(xs)
    assert [float(v) for v in seen["by_x_desc"]] == sorted(xs, reverse=True)
    assert seen["sorted_heading"] == "x \u25bc"
    assert seen["objective_points"] == "6"
    assert seen["parallel"]["lines"] == 6 and seen["parallel"]["axes"] == ["x", "opt", "loss"]
    assert seen["parallel"]["colours"] > 1  # coloured by the objective
    assert seen["curves"] == {"lines": 6, "points": 18}  # three epochs' loss per trial
    assert seen["dialogs"] == ["Delete sweep sw? It is cancelled, and every trial's job is deleted with it."]
    assert seen["deleted"]
    assert s.get("/v1/sweeps/sw").status == 404 and s.get("/v1/jobs").json()["items"] == []
    assert os.path.getsize(shot) > 10000
