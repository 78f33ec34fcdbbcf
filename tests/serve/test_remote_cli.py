"""tjob --server: the CLI as a client of tjob serve over https with a token, and its errors.

(The CLI's whole end-to-end suite also runs through a server: ctest's "e2e_tests via server:" cases.)"""
import http.client
import json
import os
import subprocess

from conftest import HELPER, TJOB, DEADLINE


def cli(args, env):
    return subprocess.run([TJOB] + list(args), env=env, capture_output=True, text=True, timeout=DEADLINE)


def https_server(make_server, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    (tmp_path / "token").write_text("k" * 40 + "\n")
    os.chmod(tmp_path / "token", 0o600)  # (a token others may read is refused)
    s = make_server(["--listen", "tcp://127.0.0.1:0", "--listen", "unix://" + str(tmp_path / "s.sock"),
                     "--token-file", str(tmp_path / "token"), "--tls-cert", str(cert), "--tls-key", str(key)])
    s.socket = str(tmp_path / "s.sock")  # (the test's own reads)
    return s, next(a for a in s.addresses if a.startswith("https://")), cert


def client_env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TJOB_")}
    env["TJOB_HOME"] = str(tmp_path / "client-home")  # not the server's store: nothing is found here
    env.update(extra)
    return env


def test_over_https_with_the_token_and_the_servers_ca(make_server, tmp_path):
    s, url, cert = https_server(make_server, tmp_path)
    env = client_env(tmp_path, TJOB_SERVER=url, TJOB_SERVER_CA=str(cert), TJOB_TOKEN="k" * 40)
    r = cli(["run", "--name", "over-tls", "--", HELPER, "print", "secure\n", "exit", "4"], env)
    assert (r.returncode, r.stdout) == (4, "secure\n"), r.stderr
    got = json.loads(cli(["get", "over-tls", "-o", "json"], env).stdout)
    assert got == s.get("/v1/jobs/over-tls").json()  # the server's job, as the server reads it
    # the token from a file, the CA by flag
    env2 = client_env(tmp_path)
    r = cli(["--server", url, "--server-ca", str(cert), "--token-file", str(tmp_path / "token"), "wait", "over-tls",
             "--status", "Failed"], env2)
    assert (r.returncode, r.stdout) == (0, "Failed\n"), r.stderr
    # a job that fails when Complete was asked for: the failure message with the last log lines, as locally
    r = cli(["wait", "over-tls"], env)
    assert r.returncode == 1
    assert r.stderr.startswith("tjob: error: TrainJob over-tls is Failed\n")
    assert "exit_code=4" in r.stderr and "    secure\n" in r.stderr


def test_plain_http_to_the_tls_listener_is_told_to_use_https(make_server, tmp_path):
    # issue 42, item 12: it got an empty reply, and the CLI asked whether a server was running there
    s, url, cert = https_server(make_server, tmp_path)
    host, port = url[len("https://"):].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=DEADLINE)
    conn.request("GET", "/v1/jobs", headers={"Authorization": "Bearer " + "k" * 40})
    reply = conn.getresponse()
    body = json.loads(reply.read())
    assert (reply.status, body["code"]) == (400, "tls_required")
    assert "https://HOST:PORT" in body["message"]
    conn.close()
    r = cli(["list"], client_env(tmp_path, TJOB_SERVER="tcp://%s:%s" % (host, port), TJOB_TOKEN="k" * 40))
    assert r.returncode != 0
    assert "https://HOST:PORT" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "is `tjob serve` running there?" not in r.stderr
    assert s.get("/v1/jobs").status == 200  # the server goes on


def test_the_servers_refusals_come_back_as_the_local_ones(make_server, tmp_path):
    s, url, cert = https_server(make_server, tmp_path)
    env = client_env(tmp_path, TJOB_SERVER=url, TJOB_SERVER_CA=str(cert), TJOB_TOKEN="k" * 40)
    r = cli(["get", "ghost"], env)
    assert r.returncode == 2 and "No TrainJob with name 'ghost'" in r.stderr
    r = cli(["run", "--name", "Bad_Name", "--", HELPER], env)
    assert r.returncode == 2 and "Invalid job name" in r.stderr
    r = cli(["run", "--runtime", "nope", "--", HELPER], env)
    assert r.returncode == 2 and "Runtime 'nope' not found" in r.stderr
    # a wrong token: the server's words, and which server
    bad = dict(env, TJOB_TOKEN="wrong")
    r = cli(["list"], bad)
    assert r.returncode == 1
    assert r.stderr == ("tjob: error: tjob serve at %s refused the request (401 unauthorized): the bearer token is "
                        "wrong; use the one in the server's token file\n" % url)
    assert "wrong" not in s.log().replace("is wrong", "")  # (the token is never logged)
    # another CA than the server's: its certificate is not trusted
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=other",
                    "-keyout", str(other / "key.pem"), "-out", str(other / "ca.pem")], check=True, capture_output=True)
    r = cli(["list"], dict(env, TJOB_SERVER_CA=str(other / "ca.pem")))
    assert r.returncode == 1 and "cannot reach tjob serve at " + url in r.stderr, r.stderr
    # the right CA, but a name the certificate is not for: said as such (issue 41; before, "unspecified
    # certificate verification error")
    by_name = url.replace("127.0.0.1", "localhost")
    r = cli(["list"], dict(env, TJOB_SERVER=by_name))
    assert r.returncode == 1
    assert "the server certificate of %s is not for localhost: it names IP 127.0.0.1" % by_name in r.stderr, r.stderr
    assert s.get("/v1/jobs").json()["items"] == []  # nothing was made by any of them


def test_no_server_there_and_the_servers_settings_are_refused_by_name(tmp_path):
    env = client_env(tmp_path, TJOB_SERVER="unix://" + str(tmp_path / "nobody.sock"))
    r = cli(["list"], env)
    assert r.returncode == 1
    assert r.stderr.startswith("tjob: error: cannot reach tjob serve at unix://%s: " % (tmp_path / "nobody.sock"))
    assert "is `tjob serve` running there?" in r.stderr
    for args, named in [(["--backend", "container", "list"], "--backend"),
                        (["--no-venv-cache", "run", "--", HELPER], "the venv cache's"),
                        (["--runtime-dir", str(tmp_path), "runtimes"], "--runtime-dir"),
                        (["serve"], "drop --server")]:
        r = cli(args, env)
        assert r.returncode == 2, (args, r.stderr)
        assert named in r.stderr and r.stderr.count("\n") == 1, r.stderr
    # the variables the engine reads are the server's too: refused by name, never ignored
    for var, value in [("TJOB_PYTHON", "/usr/bin/python3"), ("TJOB_SYSTEM_SITE_PACKAGES", "1"),
                       ("TJOB_VENV_CACHE", "0"), ("TJOB_VENV_CACHE_TTL", "60")]:
        r = cli(["run", "--", HELPER], dict(env, **{var: value}))
        assert r.returncode == 2, (var, r.stderr)
        assert r.stderr.startswith("tjob: error: --server unix://%s: %s=%s is " % (tmp_path / "nobody.sock", var, value)), r.stderr
        assert "unset it here" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    r = cli(["--token-file", "/x", "list"], client_env(tmp_path))
    assert r.returncode == 2 and "add --server URL" in r.stderr
    r = cli(["--server", "ftp://x", "list"], client_env(tmp_path))
    assert r.returncode == 2 and "--server ftp://x: " in r.stderr


def test_a_wait_through_the_server_is_woken_by_its_jobs_watch_line_not_by_polling(server, gate, tmp_path):
    server.submit([HELPER, "print", "up\n", "read-fifo", gate.path], name="gated")
    server.wait("gated", "Running")
    env = client_env(tmp_path, TJOB_SERVER="unix://" + server.socket)
    w = subprocess.Popen([TJOB, "wait", "gated", "--timeout", str(DEADLINE)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)

    def reads():
        return [l for l in server.log().splitlines() if 'path="/v1/jobs/gated"' in l]

    # the client opened the watch, checked the job is there and read it: then it waits
    server.wait_log(lambda l: len(reads()) >= 2)
    before = len(reads())
    # other jobs change meanwhile (watch lines for them): the waiter is not woken, and reads nothing
    for i in range(3):
        server.submit([HELPER, "exit", "0"], name="other-%d" % i)
        server.wait("other-%d" % i)
    assert len(reads()) == before
    assert w.poll() is None
    gate.release()
    out, err = w.communicate(timeout=DEADLINE)
    assert (w.returncode, out) == (0, "Complete\n"), err
    assert len(reads()) <= before + 3  # woken by the job's own lines, one read each


def test_the_venv_cache_through_the_server(server, tmp_path):
    # the cache is the server's: a Python job through it fills it, and cache list and prune reach it
    script = tmp_path / "hello.py"
    script.write_text("print('hello from the venv')\n")
    env = client_env(tmp_path, TJOB_SERVER="unix://" + server.socket)
    r = cli(["run", "--runtime", "python", "--python", "/usr/bin/python3", "--system-site-packages", str(script)],
            env)
    assert r.returncode == 0 and "hello from the venv\n" in r.stdout, r.stderr
    listed = cli(["cache", "list", "-o", "json"], env)
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    assert len(entries) == 1 and entries[0]["python"].startswith("/usr/bin/python3") and entries[0]["system_site_packages"]
    assert entries == server.get("/v1/venv-cache").json()["items"]
    pruned = cli(["cache", "prune", "--all"], env)
    assert (pruned.returncode, pruned.stdout) == (0, "removed %s\n1 cached venv(s) removed\n" % entries[0]["key"])
    assert server.get("/v1/venv-cache").json()["items"] == []
