"""GET /metrics in Prometheus' text format, scraped by a real Prometheus (Debian's) that the test starts on
loopback, with the server's bearer token."""
import json
import os
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request

from conftest import HELPER, DEADLINE, SUPPORT, unavailable

sys.path.insert(0, SUPPORT)
from kube_standin import free_port  # noqa: E402  (below the ephemeral range, as its torch pods' ports)


def metric(text, name, **labels):
    want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        n, _, ls = key.partition("{")
        got = ",".join(sorted(ls.rstrip("}").split(","))) if ls else ""
        if n == name and got == want:
            return float(value)
    return None


def test_metrics_count_jobs_and_requests(server):
    before = server.get("/metrics")
    assert before.status == 200 and before.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    c = server.conn()
    c.request("GET", "/v1/watch")
    watch = c.getresponse()
    server.submit([HELPER, "exit", "0"], name="m1")
    server.submit([HELPER, "exit", "4"], name="m2")
    ended = set()
    while len(ended) < 2:
        job = json.loads(watch.readline())["job"]
        if job["status"] in ("Complete", "Failed"):
            ended.add(job["name"])
    text = server.get("/metrics").body  # while the watch is open
    c.close()
    assert metric(text, "tjob_jobs", backend="local", status="Complete") == 1
    assert metric(text, "tjob_jobs", backend="local", status="Failed") == 1
    assert metric(text, "tjob_jobs", backend="local", status="Running") == 0
    assert metric(text, "tjob_jobs_submitted_total", backend="local") == 2
    assert metric(text, "tjob_jobs_ended_total", backend="local", status="Failed") == 1
    assert metric(text, "tjob_job_start_seconds_count", backend="local") == 2
    assert metric(text, "tjob_job_run_seconds_count", backend="local") == 2
    assert metric(text, "tjob_http_requests_total", code="201") == 2
    assert metric(text, "tjob_http_held", kind="watch") == 1
    assert metric(text, "tjob_http_held", kind="wait") == 0
    assert metric(text, "tjob_reactor_lag_seconds_count") >= 0
    assert metric(text, "tjob_http_connections") >= 1


def test_setup_phases_and_the_venv_cache_are_measured(server, tmp_path):
    # two Python jobs with the same venv, one after the other: the first builds the cached venv (a miss),
    # the second copies it (a hit); their Setup events become the setup histogram once each ends
    c = server.conn()
    c.request("GET", "/v1/watch")
    watch = c.getresponse()
    spec = {"trainer": {"kind": "python", "source": "print('measured')\n", "python": "/usr/bin/python3",
                        "system_site_packages": True}, "runtime": "python"}
    for name in ("py-miss", "py-hit"):
        spec["name"] = name
        assert server.post("/v1/jobs", spec).status == 201
        while True:  # its end, as the server's watch saw it
            job = json.loads(watch.readline())["job"]
            if job["name"] == name and job["status"] in ("Complete", "Failed"):
                assert job["status"] == "Complete", server.get("/v1/jobs/%s/logs" % name).body
                break
    text = server.get("/metrics").body  # once every job the watch saw end has been read
    c.close()
    assert metric(text, "tjob_venv_cache_total", result="miss") == 1
    assert metric(text, "tjob_venv_cache_total", result="hit") == 1
    assert metric(text, "tjob_setup_seconds_count", phase="cache copy") == 2
    assert metric(text, "tjob_setup_seconds_count", phase="venv") == 1  # built once, for the cache
    assert metric(text, "tjob_setup_seconds_sum", phase="venv") > 0
    # a command job has no setup: nothing more is counted for it
    server.submit([HELPER, "exit", "0"], name="plain")
    server.wait("plain")
    assert metric(server.get("/metrics").body, "tjob_setup_seconds_count", phase="cache copy") == 2


def test_prometheus_scrapes_tjob(make_server, tmp_path):
    if not shutil.which("prometheus"):
        unavailable("Debian's prometheus")
    token = tmp_path / "token"
    token.write_text("p" * 40)
    os.chmod(token, 0o600)  # (a token others may read is refused)
    s = make_server(["--listen", "unix://" + str(tmp_path / "home" / "tjob.sock"), "--listen", "tcp://127.0.0.1:0",
                     "--token-file", str(token)])
    host, port = s.tcp()
    s.submit([HELPER, "exit", "0"], name="scraped")
    s.wait("scraped")
    config = tmp_path / "prometheus.yml"
    config.write_text("""global:
  scrape_interval: 1s
scrape_configs:
  - job_name: tjob
    scheme: http
    authorization:
      type: Bearer
      credentials_file: %s
    static_configs:
      - targets: ["%s:%d"]
""" % (token, host, port))
    web = free_port()
    prom = subprocess.Popen(["prometheus", "--config.file=" + str(config), "--storage.tsdb.path=" + str(tmp_path / "tsdb"),
                             "--web.listen-address=127.0.0.1:%d" % web, "--log.level=warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # each scrape is a request in the server's log: wait for the third, so the second (after the job
        # ended) is stored by the time we ask
        s.wait_log(lambda l: len([x for x in s.lines if x and 'path="/metrics"' in x and "status=200" in x]) >= 3,
                   timeout=DEADLINE)

        def query(q):
            url = "http://127.0.0.1:%d/api/v1/query?query=%s" % (web, urllib.parse.quote(q))
            with urllib.request.urlopen(url, timeout=DEADLINE) as r:
                return json.loads(r.read())["data"]["result"]

        assert query('up{job="tjob"}')[0]["value"][1] == "1"
        ended = query('tjob_jobs_ended_total{status="Complete"}')
        assert ended and ended[0]["value"][1] == "1" and ended[0]["metric"]["backend"] == "local"
        assert query("tjob_jobs_submitted_total")[0]["value"][1] == "1"
        assert query("tjob_reactor_lag_seconds_count")
        assert "p" * 40 not in s.log()
    finally:
        prom.terminate()
        prom.wait(timeout=DEADLINE)
