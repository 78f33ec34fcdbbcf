"""tjob serve's dashboard at `/`, in a real browser: Debian's chromium, headless, driven by playwright-core
(tests/serve/node/dashboard.mjs). A job that reports its progress and loss runs on the server; the page shows
its row appear and its bar move (live, from /v1/watch), plots its loss as points arrive, tails its log as it
grows, and cancels and deletes it behind a confirmation."""
import json
import os
import shutil
import subprocess

from conftest import DEADLINE, unavailable

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


def test_the_dashboard_shows_a_job_live_and_cancels_it(make_server, tmp_path):
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
    assert seen["progress_events"] >= 1
    assert seen["dialogs"][0].startswith("Cancel job dash?")
    assert seen["dialogs"][1].startswith("Delete job dash?")
    assert seen["status"] == "Failed (cancelled)"
    assert seen["deleted"]
    assert seen["errors"] == [], "\n".join(seen["errors"])
    assert os.path.getsize(shot) > 10000
    assert s.get("/v1/jobs/dash").status == 404
