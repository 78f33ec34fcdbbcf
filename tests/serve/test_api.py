"""API v1 of `tjob serve`, route by route, against a real server on the local backend."""
import http.client
import json
import os

from conftest import HELPER, DEADLINE, tjob_cli


def test_a_job_submitted_is_the_object_tjob_get_prints(server):
    name = server.submit([HELPER, "print", "hello"], name="shape")
    server.wait(name)
    over_api = server.get("/v1/jobs/shape")
    assert over_api.status == 200
    cli = tjob_cli(server.home, "get", "shape", "-o", "json")
    assert cli.returncode == 0, cli.stderr
    assert over_api.json() == json.loads(cli.stdout)
    assert over_api.body == json.dumps(json.loads(cli.stdout), separators=(",", ":")) + "\n"


def test_submit_answers_201_with_the_job_and_its_location(server):
    r = server.post("/v1/jobs", {"trainer": {"kind": "command", "command": [HELPER, "exit", "0"]}})
    assert r.status == 201, r
    job = r.json()
    assert r.headers["Location"] == "/v1/jobs/" + job["name"]
    assert job["status"] in ("Created", "Running", "Complete")
    assert len(job["name"]) == 12 and job["name"][0].isalpha()
    assert server.wait(job["name"])["status"] == "Complete"


def test_a_python_spec_runs_its_function_with_its_arguments(server):
    src = "def train(n, word):\n    print(word * n)\n"
    r = server.post("/v1/jobs", {"name": "py", "runtime": "python", "trainer": {"kind": "python", "source": src, "function": "train",
                                                           "function_args": {"n": 3, "word": "ab"},
                                                           "system_site_packages": True}})
    assert r.status == 201, r
    server.wait("py")
    assert "ababab" in server.get("/v1/jobs/py/logs").body


def test_list_filters_by_status_and_runtime_and_pages_with_continue(server):
    names = ["l%d" % i for i in range(5)]
    for n in names:
        server.submit([HELPER, "exit", "0" if n != "l3" else "3"], name=n)
    for n in names:
        server.wait(n, "Complete,Failed")
    r = server.get("/v1/jobs")
    assert r.status == 200
    assert [j["name"] for j in r.json()["items"]] == names
    assert r.json()["continue"] is None and isinstance(r.json()["seq"], int)
    failed = server.get("/v1/jobs?status=failed").json()["items"]
    assert [j["name"] for j in failed] == ["l3"]
    assert server.get("/v1/jobs?runtime=torch-distributed").json()["items"] == []
    seen, token = [], None
    while True:
        r = server.get("/v1/jobs?limit=2" + ("&continue=" + token if token else ""))
        assert r.status == 200, r
        page = r.json()
        assert len(page["items"]) <= 2
        seen += [j["name"] for j in page["items"]]
        token = page["continue"]
        if token is None:
            break
    assert seen == names


def test_list_refuses_what_it_does_not_know(server):
    r = server.get("/v1/jobs?stauts=Running")
    assert r.status == 400
    assert r.json() == {"status": 400, "code": "bad_request", "field": "stauts",
                        "message": "query parameter 'stauts' is not known here; this route takes status, runtime, "
                                   "limit, continue"}
    r = server.get("/v1/jobs?status=Done")
    assert (r.status, r.json()["field"]) == (400, "status")
    assert "'Done' is not a status" in r.json()["message"]
    assert server.get("/v1/jobs?limit=0").status == 400
    assert server.get("/v1/jobs?continue=abc").json()["field"] == "continue"


def test_get_delete_and_not_found(server):
    server.submit([HELPER, "exit", "0"], name="gone")
    server.wait("gone")
    r = server.request("DELETE", "/v1/jobs/gone")
    assert (r.status, r.json()) == (200, {"name": "gone", "deleted": True})
    r = server.get("/v1/jobs/gone")
    assert r.status == 404
    assert r.json()["code"] == "job_not_found"
    # the name is at fault; the server's store path is not the client's business (issue 42, item 12)
    assert r.json()["field"] == "name"
    assert r.json()["message"] == ("No TrainJob with name 'gone' on this server; "
                                   "GET /v1/jobs (tjob list) shows the jobs there")
    assert str(server.home) not in r.body.decode() if isinstance(r.body, bytes) else str(server.home) not in r.body
    assert server.request("DELETE", "/v1/jobs/gone").status == 404


def test_cancel_stops_a_running_job_which_stays_failed(server):
    server.submit([HELPER, "sleep", "60000"], name="long")
    server.wait("long", "Running")
    r = server.post("/v1/jobs/long/cancel")
    assert r.status == 200, r
    job = server.wait("long", "Failed")
    assert job["reason"] == "cancelled"
    assert r.json()["name"] == "long"
    # an ended job: a no-op
    assert server.post("/v1/jobs/long/cancel?force=1").json()["status"] == "Failed"


def test_logs_tail_timestamps_since_and_steps(server):
    server.submit([HELPER, "lines", "5"], name="lg")
    server.wait("lg")
    full = server.get("/v1/jobs/lg/logs")
    assert full.status == 200
    assert full.headers["Content-Type"].startswith("text/plain")
    assert full.headers["Transfer-Encoding"] == "chunked"
    assert full.body == "".join("line %d\n" % i for i in range(1, 6))
    assert server.get("/v1/jobs/lg/logs?tail=2").body == "line 4\nline 5\n"
    stamped = server.get("/v1/jobs/lg/logs?timestamps=1").body.splitlines()
    assert len(stamped) == 5 and stamped[0].endswith("Z line 1") and stamped[0][4] == "-"
    assert server.get("/v1/jobs/lg/logs?since=2200-01-01T00:00:00Z").body == ""
    r = server.get("/v1/jobs/lg/logs?step=node-7")
    assert (r.status, r.json()["code"]) == (404, "step_not_found")
    r = server.get("/v1/jobs/lg/logs?since=yesterday")
    assert (r.status, r.json()["field"]) == (400, "since")


def test_a_log_follow_streams_live_while_the_job_runs(server, gate):
    # The job prints a line, then blocks on the gate until the test has read that line over HTTP: only a live
    # stream can pass (a replay after the end would wait forever, and the deadline fails it).
    server.submit([HELPER, "print", "first\n", "read-fifo", gate.path, "print", "second\n"], name="live")
    server.wait("live", "Running")
    c = server.conn()
    c.request("GET", "/v1/jobs/live/logs?follow=1")
    r = c.getresponse()
    assert r.status == 200
    assert r.readline() == b"first\n"  # before the job can end
    gate.release()
    rest = r.read()
    assert rest == b"second\n"
    c.close()
    assert server.wait("live")["status"] == "Complete"


def test_events_are_the_job_s_event_log(server):
    server.submit([HELPER, "exit", "0"], name="ev")
    server.wait("ev")
    items = server.get("/v1/jobs/ev/events").json()["items"]
    reasons = [e["reason"] for e in items]
    assert reasons[0] == "Created" and "Started" in reasons and "Exited" in reasons
    cli = json.loads(tjob_cli(server.home, "events", "ev", "-o", "json").stdout)
    assert items == cli


def test_wait_answers_when_the_status_is_reached_or_why_not(server):
    server.submit([HELPER, "print", "boom", "exit", "3"], name="bad")
    r = server.get("/v1/jobs/bad/wait?timeout=%d" % DEADLINE)
    assert r.status == 409, r
    err = r.json()
    assert err["code"] == "job_failed"
    assert "exit code 3" in err["message"] and "boom" in err["message"]
    assert server.get("/v1/jobs/bad/wait?status=Failed").json()["status"] == "Failed"
    server.submit([HELPER, "exit", "0"], name="done")
    server.wait("done")
    r = server.get("/v1/jobs/done/wait?status=Running&timeout=%d" % DEADLINE)
    assert (r.status, r.json()["code"]) == (409, "unreachable_status")
    server.submit([HELPER, "sleep", "60000"], name="slow")
    r = server.get("/v1/jobs/slow/wait?timeout=0.2")
    assert (r.status, r.json()["code"]) == (504, "timeout")
    assert server.get("/v1/jobs/slow").json()["status"] in ("Created", "Running")
    assert server.get("/v1/jobs/slow/wait?timeout=-1").json()["field"] == "timeout"
    assert server.get("/v1/jobs/slow/wait?status=Done").json()["field"] == "status"
    server.post("/v1/jobs/slow/cancel?force=1")


def watch_until(server, query, done):
    """The watch's lines until `done(line)` holds for one."""
    c = server.conn()
    c.request("GET", "/v1/watch" + query)
    r = c.getresponse()
    assert r.status == 200, r.read()
    assert r.getheader("Content-Type") == "application/x-ndjson"
    out = []
    while not out or not done(out[-1]):
        line = r.readline()
        assert line, "the watch ended early"
        out.append(json.loads(line))
    c.close()
    return out


def test_watch_begins_with_every_job_then_streams_each_change(server, gate):
    server.submit([HELPER, "exit", "0"], name="old")
    server.wait("old")
    c = server.conn()
    c.request("GET", "/v1/watch")
    r = c.getresponse()
    first = json.loads(r.readline())
    assert first["type"] == "ADDED" and first["job"]["name"] == "old"
    server.submit([HELPER, "read-fifo", gate.path], name="new")
    seen = []
    while not (seen and seen[-1]["job"]["status"] == "Running"):
        seen.append(json.loads(r.readline()))
    assert seen[0]["type"] == "ADDED" and seen[0]["job"]["name"] == "new"
    gate.release()
    while seen[-1]["job"]["status"] != "Complete":
        seen.append(json.loads(r.readline()))
    server.request("DELETE", "/v1/jobs/new")
    while seen[-1]["type"] != "DELETED":
        seen.append(json.loads(r.readline()))
    c.close()
    seqs = [first["seq"]] + [e["seq"] for e in seen]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # one number per change, no gap
    assert seen[-1]["job"]["name"] == "new"


def test_watch_resumes_from_a_list_s_seq_with_no_gap(server):
    server.submit([HELPER, "exit", "0"], name="a")
    server.wait("a")
    seq = server.get("/v1/jobs").json()["seq"]
    server.submit([HELPER, "exit", "0"], name="b")
    server.wait("b")
    server.request("DELETE", "/v1/jobs/a")
    lines = watch_until(server, "?since=%d" % seq, lambda l: l["type"] == "DELETED")
    assert [l["seq"] for l in lines] == list(range(seq + 1, seq + 1 + len(lines)))  # from the list on, no gap
    kinds = [(l["type"], l["job"]["name"]) for l in lines]
    assert ("ADDED", "b") in kinds and kinds[-1] == ("DELETED", "a")
    assert [l for l in lines if l["job"]["name"] == "b"][-1]["job"]["status"] == "Complete"
    r = server.get("/v1/watch?since=%d" % (seq - 1000))
    assert (r.status, r.json()["code"]) == (410, "expired")
    r = server.get("/v1/watch?since=%d" % (seq + 10**9))
    assert r.status == 410
    assert server.get("/v1/watch?since=x").json()["field"] == "since"


def test_runtimes(server):
    items = server.get("/v1/runtimes").json()["items"]
    names = [r["name"] for r in items]
    assert "torch-distributed" in names
    one = server.get("/v1/runtimes/torch-distributed")
    assert one.json() == next(r for r in items if r["name"] == "torch-distributed")
    cli = json.loads(tjob_cli(server.home, "runtimes", "-o", "json").stdout)
    assert items == cli
    r = server.get("/v1/runtimes/nope")
    assert (r.status, r.json()["code"]) == (404, "runtime_not_found")


def test_routes_methods_and_health(server):
    health = server.get("/healthz").json()
    assert (health["status"], health["backend"]) == ("ok", "local")
    # what the backend does, which a client asks instead of its name
    caps = health["capabilities"]
    assert caps["id"] == "local" and caps["runs_here"] and caps["admission"] and caps["restarts"]
    assert not caps["keeps_labels"] and not caps["forwards"] and caps["job_files"] == "jobs"
    r = server.get("/v1/nothing")
    assert (r.status, r.json()["code"]) == (404, "not_found")
    r = server.request("PUT", "/v1/jobs")
    assert r.status == 405 and r.headers["Allow"] == "GET, POST"
    assert r.json()["code"] == "method_not_allowed"
    assert server.get("/v1/openapi.json").json()["openapi"].startswith("3.")


def test_keep_alive_serves_many_requests_on_one_connection(server):
    c = server.conn()
    for _ in range(20):
        r = server.get("/healthz", conn=c)
        assert r.status == 200
    c.close()


def test_several_jobs_in_one_server_and_the_cli_see_one_store(server):
    server.submit([HELPER, "exit", "0"], name="seen")
    server.wait("seen")
    out = tjob_cli(server.home, "list", "-o", "name")
    assert out.stdout.split() == ["seen"]
    cli_made = tjob_cli(server.home, "run", "--name", "bycli", "--", HELPER, "exit", "0")
    assert cli_made.returncode == 0, cli_made.stderr
    assert server.get("/v1/jobs/bycli").json()["status"] == "Complete"
    assert os.path.exists(os.path.join(server.home, "tjob.sock"))
    assert oct(os.stat(os.path.join(server.home, "tjob.sock")).st_mode & 0o777) == "0o600"
    assert isinstance(http.client.HTTPConnection, type)


def test_the_queue_priority_and_deadline_over_the_api(make_server, home, gate, tmp_path):
    server = make_server(["--max-running", "1", "--cpu-budget", "0"])
    order = tmp_path / "order"
    server.submit([HELPER, "read-fifo", gate.path], name="holder")
    server.submit([HELPER, "append", str(order), "low"], name="low")
    server.submit([HELPER, "append", str(order), "high"], name="high", priority=5)
    job = server.get("/v1/jobs/low").json()
    assert (job["status"], job["reason"], job["queue_position"]) == ("Created", "Queued", 2)
    items = server.get("/v1/queue").json()["items"]
    assert [(q["position"], q["name"], q["priority"]) for q in items] == [(1, "high", 5), (2, "low", 0)]
    assert items[0]["waits_for"] == "a running slot (1 of max_running 1 in use)"
    # the CLI through the server reads the same queue
    listed = tjob_cli(home, "--server", "unix://" + os.path.join(home, "tjob.sock"), "queue", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert [q["name"] for q in json.loads(listed.stdout)] == ["high", "low"]
    gate.release()
    server.wait("low")
    assert order.read_text() == "high\nlow\n"
    assert server.get("/v1/queue").json()["items"] == []
    server.submit([HELPER, "sleep", "60000"], name="slow", active_deadline=1)
    ended = server.wait("slow", status="Failed")
    assert ended["reason"] == "DeadlineExceeded"
    r = server.post("/v1/jobs", {"trainer": {"kind": "command", "command": [HELPER]}, "priority": "high"})
    assert (r.status, r.json()["field"]) == (400, "priority")
