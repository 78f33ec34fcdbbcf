"""tjob serve's sweeps (/v1/sweeps): started, read, cancelled and deleted over the API; the server's own
engine settings run the trials, so they are the server's jobs; `tjob` on the same home sees the sweep."""
import os

from conftest import HELPER, tjob_cli


def sweep_body(command, **extra):
    body = {"name": "sw", "trial": {"trainer": {"kind": "command", "command": command}},
            "search_space": [{"name": "x", "distribution": "uniform", "min": 0, "max": 1}],
            "num_trials": 3, "parallel_trials": 2, "seed": 4}
    body.update(extra)
    return body


def test_a_sweep_over_the_api_runs_its_trials_as_the_servers_jobs(server, home):
    r = server.post("/v1/sweeps", sweep_body([HELPER, "print", "loss=${trialParameters.x}\n"]))
    assert r.status == 201, r
    assert r.headers["Location"] == "/v1/sweeps/sw"
    assert r.json()["name"] == "sw" and r.json()["request"]["seed"] == 4
    waited = tjob_cli(home, "wait", "sw")  # (the record's changes wake it: no polling)
    assert waited.stdout == "Complete\n", waited.stderr
    s = server.get("/v1/sweeps/sw").json()
    assert s["status"] == "Complete"
    assert [t["name"] for t in s["trials"]] == ["sw-0", "sw-1", "sw-2"]
    best = s["trials"][s["best"]]
    assert best["objective"] == min(t["parameters"]["x"] for t in s["trials"])
    assert [x["name"] for x in server.get("/v1/sweeps").json()["items"]] == ["sw"]
    jobs = {j["name"]: j for j in server.get("/v1/jobs").json()["items"]}
    assert {n: j["array"] for n, j in jobs.items()} == {"sw-0": "sw", "sw-1": "sw", "sw-2": "sw"}
    assert all(j["status"] == "Complete" for j in jobs.values())
    d = server.request("DELETE", "/v1/sweeps/sw")
    assert d.status == 200 and d.json() == {"name": "sw", "deleted": True}
    assert server.get("/v1/sweeps/sw").status == 404
    assert server.get("/v1/jobs").json()["items"] == []


def test_a_sweep_is_cancelled_over_the_api(server, home, tmp_path):
    gate = str(tmp_path / "gate")
    r = server.post("/v1/sweeps", sweep_body([HELPER, "wait-most", gate, "1", "60000"]))
    assert r.status == 201, r
    assert tjob_cli(home, "wait", "sw-0", "sw-1", "--status", "Running").returncode == 0
    c = server.post("/v1/sweeps/sw/cancel")
    assert c.status == 200, c
    assert c.json()["status"] == "Failed" and c.json()["reason"] == "cancelled"
    assert all(t["status"] == "Failed" for t in c.json()["trials"])
    assert {j["status"] for j in server.get("/v1/jobs").json()["items"]} == {"Failed"}


def test_bad_sweeps_are_refused_naming_the_field(server, home):
    cases = [
        (sweep_body(["true"], search_space=[]), "search_space: it is empty"),
        (sweep_body(["true"], num_trials=0), "trial_config.num_trials: 0 is not from 1 to 10000"),
        (sweep_body(["true"], algoritm="grid"), "algoritm: not a field of a sweep request"),
        (sweep_body(["true"], search_space=[{"name": "x", "distribution": "loguniform", "min": 0, "max": 1}]),
         "search_space.x: a loguniform range must be above 0"),
    ]
    for body, says in cases:
        r = server.post("/v1/sweeps", body)
        assert r.status == 400, r
        assert r.json()["code"] == "invalid_argument" and says in r.json()["message"], r
    r = server.post("/v1/sweeps", sweep_body(["true"], trial={"trainer": {"kind": "command"}}))
    assert r.status == 400 and r.json()["field"] == "trainer.command", r
    assert server.post("/v1/sweeps", "{").status == 400
    assert server.get("/v1/sweeps/nope").status == 404
    assert server.get("/v1/sweeps/No_Such").json()["code"] == "invalid_name"
    assert server.get("/v1/sweeps").json()["items"] == []
    assert not os.listdir(os.path.join(home, "sweeps")) if os.path.isdir(os.path.join(home, "sweeps")) else True
