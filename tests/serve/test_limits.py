"""Bad input and limits of `tjob serve`: each gets its exact status and message, the server stays up, and
nothing stored changes."""
import json
import os
import resource
import signal
import socket
import ssl
import subprocess
import time

import pytest

from conftest import HELPER, DEADLINE, UnixConnection, raw, status_of, body_of, tjob_cli

COMMAND = {"kind": "command", "command": [HELPER, "exit", "0"]}


def store_state(server):
    return [(j["name"], j["status"]) for j in server.get("/v1/jobs").json()["items"]]


@pytest.fixture
def busy(server):
    """A server with one job stored, to show that nothing stored changes."""
    server.submit([HELPER, "exit", "0"], name="kept")
    server.wait("kept")
    before = store_state(server)
    yield server
    assert server.proc.poll() is None, "the server went down"
    assert server.get("/healthz").status == 200
    assert store_state(server) == before


def test_malformed_json(busy):
    r = busy.post("/v1/jobs", '{"trainer": ')
    assert r.status == 400
    err = r.json()
    assert err["code"] == "invalid_json" and err["field"] is None
    assert err["message"].startswith("the body is not JSON (")
    assert "send a job spec" in err["message"]


@pytest.mark.parametrize("spec,field,message", [
    ({"trainer": {"kind": "command", "comand": ["x"]}}, "trainer.comand",
     "job spec: trainer.comand: unknown field; a command trainer has code_dir, command, cpus, env, image, kind, memory, "
         "working_dir"),
    ({"trainer": COMMAND, "nmae": "x"}, "nmae",
     "job spec: nmae: unknown field; a job spec has active_deadline, after_any, after_not_ok, after_ok, annotations, array, array_limit, begin, labels, name, num_nodes, priority, retry, runtime, trainer, warning"),
    ({"name": "x"}, "trainer", "job spec: trainer: missing; give {\"kind\": \"command\", \"command\": [...]} or "
                               "{\"kind\": \"python\", \"source\": ...}"),
    ({"trainer": {"kind": "shell"}}, "trainer.kind",
     "job spec: trainer.kind: give \"command\" (a program) or \"python\" (Python training code)"),
    ({"trainer": {"kind": "command", "command": "true"}}, "trainer.command",
     "job spec: trainer.command: must be an array of strings"),
    ({"trainer": COMMAND, "num_nodes": 0}, "num_nodes", "job spec: num_nodes: 0 is out of range; give 1 to 1024"),
    ({"trainer": COMMAND, "labels": {"a": 1}}, "labels.a", "job spec: labels.a: must be a string"),
    ({"trainer": {"kind": "python", "source_file": "train.py"}}, "trainer.source_file",
     "job spec: trainer.source_file: give the absolute path of the training file on the server's machine"),
    ({"trainer": {"kind": "python", "source": "x", "resources_per_node": {"cpu": "lots"}}},
     "trainer.resources_per_node",
     "job spec: trainer.resources_per_node: resources_per_node cpu=lots: give a whole number of processes, 1 or more"),
    ([1, 2], "", "a job spec must be a JSON object"),
])
def test_a_spec_that_cannot_be_used_is_refused_naming_the_field(busy, spec, field, message):
    r = busy.post("/v1/jobs", spec)
    assert r.status == 400, r
    assert r.json() == {"status": 400, "code": "invalid_argument", "message": message, "field": field or None}


def test_engine_checks_name_the_field(busy):
    r = busy.post("/v1/jobs", {"name": "Bad_Name", "trainer": COMMAND})
    assert (r.status, r.json()["code"], r.json()["field"]) == (400, "invalid_name", "name")
    r = busy.post("/v1/jobs", {"name": "kept", "trainer": COMMAND})
    assert (r.status, r.json()["code"], r.json()["field"]) == (409, "duplicate_name", "name")
    r = busy.post("/v1/jobs", {"runtime": "nope", "trainer": COMMAND})
    assert (r.status, r.json()["code"], r.json()["field"]) == (404, "runtime_not_found", "runtime")
    r = busy.post("/v1/jobs", {"trainer": {"kind": "command", "command": ["/no/such/program"]}})
    assert (r.status, r.json()["code"], r.json()["field"]) == (400, "executable_not_found", "trainer.command")


@pytest.mark.parametrize("target,status,code", [
    ("/v1/jobs/..", 400, "invalid_name"),
    ("/v1/jobs/../../etc/passwd", 400, "invalid_name"),
    ("/v1/jobs/a%2Fb", 400, "invalid_name"),
    ("/v1/jobs/a%2F..%2F..%2Fetc", 400, "invalid_name"),
    ("/v1/jobs/%00x", 400, "bad_request"),
    ("/v1/jobs/%zz", 400, "bad_request"),
    ("v1/jobs", 400, "bad_request"),
    ("/v1/jobs/kept/logs?tail=%", 400, "bad_request"),
])
def test_hostile_paths(busy, target, status, code):
    out = raw(busy.socket, b"GET " + target.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status_of(out) == status, out
    assert body_of(out)["code"] == code


def test_the_job_name_in_a_path_is_checked(busy):
    out = raw(busy.socket, b"GET /v1/jobs/a%2Fb HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    err = body_of(out)
    assert err["field"] == "name"
    assert err["message"].startswith("the job name in the path: ")


def test_a_100_mb_body_is_refused_before_it_is_read(busy):
    # the head and the first 64 KiB of the body; the server answers without reading the rest
    out = raw(busy.socket, b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           b"Content-Length: %d\r\n\r\n{" % (100 << 20) + b" " * 65536)
    assert status_of(out) == 413
    assert body_of(out) == {"status": 413, "code": "too_large", "field": None,
                            "message": "the body is 104857600 bytes; a job spec may have at most 1048576"}


def test_a_chunked_body_over_the_limit_is_refused(busy):
    body = b"".join(b"%x\r\n%s\r\n" % (65536, b" " * 65536) for _ in range(20)) + b"0\r\n\r\n"
    out = raw(busy.socket, b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    assert status_of(out) == 413
    assert body_of(out)["message"] == "the body is over 1048576 bytes"


def test_a_header_flood(busy):
    headers = b"".join(b"X-Flood-%d: %s\r\n" % (i, b"y" * 100) for i in range(2000))
    try:
        out = raw(busy.socket, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
    except (BrokenPipeError, ConnectionResetError):
        out = None  # the server answered and closed while we were still sending
    if out is not None:
        assert status_of(out) == 431
        assert body_of(out) == {"status": 431, "code": "headers_too_large", "field": None,
                                "message": "the request line and headers are over 16384 bytes"}


def test_not_http(busy):
    out = raw(busy.socket, b"\x16\x03\x01\x02\x00hello\r\n\r\n")
    assert status_of(out) == 400
    assert body_of(out)["code"] == "bad_request"


def test_idempotency_key_makes_a_retried_post_return_the_same_job(server, make_server):
    busy = server
    busy.submit([HELPER, "exit", "0"], name="kept")
    spec = {"trainer": COMMAND}
    key = {"Idempotency-Key": "7d1f3a0e-1111-4a4a-9b9b-000000000001"}
    first = busy.post("/v1/jobs", spec, headers=key)
    assert first.status == 201
    again = busy.post("/v1/jobs", spec, headers=key)
    assert again.status == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["name"] == first.json()["name"]
    other = busy.post("/v1/jobs", {"trainer": {"kind": "command", "command": [HELPER, "exit", "1"]}}, headers=key)
    assert other.status == 422
    assert other.json()["code"] == "idempotency_key_reused"
    assert first.json()["name"] in other.json()["message"]
    # the key outlives the server
    busy.stop()
    s = make_server()
    after = s.post("/v1/jobs", spec, headers=key)
    assert after.status == 200 and after.json()["name"] == first.json()["name"]
    names = [j["name"] for j in s.get("/v1/jobs").json()["items"]]
    assert sorted(names) == sorted(["kept", first.json()["name"]])
    s.stop()
    busy.start()


def test_tcp_needs_the_token_and_never_logs_it(make_server, tmp_path):
    token_file = tmp_path / "token"
    token = "s3cr3t-" + "x" * 40
    token_file.write_text(token + "\n")
    os.chmod(token_file, 0o600)  # (a token others may read is refused)
    s = make_server(["--listen", "tcp://127.0.0.1:0", "--token-file", str(token_file)])
    host, port = s.tcp()
    import http.client

    def get(path, auth=None):
        c = http.client.HTTPConnection(host, port, timeout=DEADLINE)
        c.request("GET", path, headers={"Authorization": auth} if auth else {})
        r = c.getresponse()
        out = (r.status, dict(r.getheaders()), r.read())
        c.close()
        return out

    status, headers, body = get("/v1/jobs")
    assert status == 401 and headers["WWW-Authenticate"] == 'Bearer realm="tjob"'
    assert json.loads(body) == {"status": 401, "code": "unauthorized", "field": None,
                                "message": "this server needs a token: send Authorization: Bearer <token> (the "
                                           "server's token file, or --token-file)"}
    status, _, body = get("/v1/jobs", "Bearer wrong-token-" + "y" * 30)
    assert status == 401
    assert json.loads(body)["message"] == "the bearer token is wrong; use the one in the server's token file"
    assert get("/v1/jobs", "Bearer " + token)[0] == 200
    assert get("/healthz")[0] == 200  # health checks need no token
    s.wait_log(lambda l: "status=401" in l)
    assert token not in s.log() and "wrong-token" not in s.log()
    # where the token is, and the dashboard (issue 42)
    s.wait_log(lambda l: ('msg="clients send the token in %s (Authorization: Bearer); the dashboard is at '
                          'http://127.0.0.1:%d/"' % (token_file, port)) in l)
    assert not os.path.exists(os.path.join(s.home, "tjob.sock"))  # only what --listen says


def test_a_training_file_is_named_only_over_the_unix_socket(make_server, tmp_path):
    # a file by path is read on the server's machine: only a client there (the 0600 unix socket) names one
    (tmp_path / "token").write_text("t" * 32)
    os.chmod(tmp_path / "token", 0o600)
    (tmp_path / "sibling.py").write_text("WORD = 'from the sibling module'\n")
    (tmp_path / "train.py").write_text("import sibling\nprint(sibling.WORD)\n")
    s = make_server(["--listen", "unix://" + str(tmp_path / "s.sock"), "--listen", "tcp://127.0.0.1:0",
                     "--token-file", str(tmp_path / "token")])
    s.socket = str(tmp_path / "s.sock")
    host, port = s.tcp()
    import http.client
    spec = {"name": "by-path", "trainer": {"kind": "python", "source_file": str(tmp_path / "train.py"),
                                           "python": "/usr/bin/python3", "system_site_packages": True}}
    c = http.client.HTTPConnection(host, port, timeout=DEADLINE)
    c.request("POST", "/v1/jobs", body=json.dumps(spec),
              headers={"Authorization": "Bearer " + "t" * 32, "Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 400
    assert json.loads(r.read()) == {
        "status": 400, "code": "invalid_argument", "field": "trainer.source_file",
        "message": "job spec: trainer.source_file: a spec over TCP carries the code itself; send the file's text "
                   "as \"source\" (a file is named only by a client on the server's unix socket)"}
    c.close()
    assert s.post("/v1/jobs", spec).status == 201
    assert s.wait("by-path")["status"] == "Complete"
    assert s.get("/v1/jobs/by-path/logs").body.endswith("from the sibling module\n")


def test_tcp_without_a_token_file_makes_one(make_server):
    s = make_server(["--listen", "tcp://127.0.0.1:0"])
    path = os.path.join(s.home, "serve.token")
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert len(open(path).read().strip()) == 64


def test_tls(make_server, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    (tmp_path / "token").write_text("t" * 32)
    os.chmod(tmp_path / "token", 0o600)
    s = make_server(["--listen", "tcp://127.0.0.1:0", "--token-file", str(tmp_path / "token"), "--tls-cert",
                     str(cert), "--tls-key", str(key)])
    assert s.addresses[0].startswith("https://127.0.0.1:")
    host, port = s.addresses[0][8:].rsplit(":", 1)
    import http.client
    ctx = ssl.create_default_context(cafile=str(cert))
    c = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=DEADLINE)
    c.request("GET", "/v1/runtimes", headers={"Authorization": "Bearer " + "t" * 32})
    r = c.getresponse()
    assert r.status == 200 and json.loads(r.read())["items"]


def test_a_client_that_goes_away_mid_stream_ends_only_its_stream(busy, gate):
    busy.submit([HELPER, "print", "up\n", "read-fifo", gate.path], name="streamed")
    busy.wait("streamed", "Running")
    c = busy.conn()
    c.request("GET", "/v1/jobs/streamed/logs?follow=1")
    sock = c.sock  # (the response takes it over)
    r = c.getresponse()
    assert r.readline() == b"up\n"
    sock.shutdown(socket.SHUT_RDWR)
    r.close()
    busy.wait_log(lambda l: 'path="/v1/jobs/streamed/logs"' in l and "status=499" in l)
    # and a long poll too
    c = busy.conn()
    c.request("GET", "/v1/jobs/streamed/wait?timeout=600")
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    busy.wait_log(lambda l: 'path="/v1/jobs/streamed/wait"' in l and "status=499" in l)
    assert busy.get("/v1/jobs/streamed").json()["status"] == "Running"
    gate.release()
    busy.wait("streamed")
    busy.request("DELETE", "/v1/jobs/streamed")


def test_an_idle_connection_is_closed(make_server):
    s = make_server(["--idle-timeout", "0.3"])
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(DEADLINE)
    sock.connect(s.socket)
    assert sock.recv(10) == b""  # the server closed it, not our timeout
    sock.close()


def test_connections_over_the_limit_get_503_and_the_server_stays_up(make_server):
    s = make_server(["--max-connections", "4"])
    held = []
    for _ in range(4):
        c = UnixConnection(s.socket)
        c.connect()
        held.append(c)
    # the four are counted once accepted; a request on each proves it
    for c in held:
        assert s.get("/healthz", conn=c).status == 200
    out = raw(s.socket, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(out) == 503
    assert body_of(out) == {"status": 503, "code": "unavailable", "field": None,
                            "message": "the server has 4 connections open, its limit; retry later"}
    for c in held:
        c.close()
    deadline = time.monotonic() + DEADLINE
    while status_of(raw(s.socket, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) != 200:
        assert time.monotonic() < deadline  # the server sees the closes as they come


def test_ten_thousand_connections_at_once(make_server, tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    (tmp_path / "token").write_text("t" * 32)
    os.chmod(tmp_path / "token", 0o600)
    s = make_server(["--max-connections", "1024", "--listen", "tcp://127.0.0.1:0", "--listen",
                     "unix://" + str(tmp_path / "owner.sock"), "--token-file", str(tmp_path / "token")])
    host, port = s.tcp()
    socks, connected = [], 0
    try:
        for _ in range(min(10000, hard - 300)):
            c = socket.socket()
            c.setblocking(False)
            if c.connect_ex((host, port)) in (0, 115):  # EINPROGRESS: the handshake completes in the kernel
                connected += 1
            socks.append(c)
        # none of them has sent the token: the server holds 16 (the most one address may keep waiting)
        # and refuses the rest with a 503 or, while 64 such answers are already going out (a flood),
        # closes them unanswered
        probe = socket.create_connection((host, port), timeout=DEADLINE)
        probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            answer = probe.recv(4096)
        except ConnectionResetError:
            answer = b""
        assert answer == b"" or status_of(answer) == 503, answer
        probe.close()
        fds = len(os.listdir("/proc/%d/fd" % s.proc.pid))
        assert fds < 200, fds  # the limit holds: the rest are not the server's descriptors
        # and the owner's socket, a listener of its own, answers through the flood
        owner = raw(str(tmp_path / "owner.sock"), b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert status_of(owner) == 200
    finally:
        for c in socks:
            c.close()
    assert connected > 5000
    assert s.proc.poll() is None
    deadline = time.monotonic() + DEADLINE
    # the server sees the 10,000 closes one by one while the backlog still hands it connections it refuses,
    # some unanswered (the flood rule above): until it has caught up, a probe may be reset, closed or 503'd.
    # A connect refused means nothing listens: a server that has died fails the test at once, with its log
    # (a full backlog drops a handshake, it does not refuse it).
    while True:
        try:
            probe = socket.create_connection((host, port), timeout=DEADLINE)
        except ConnectionRefusedError:
            log = s.log()[-4000:]
            assert s.proc.poll() is None, "tjob serve died after the flood (exit %r); its log:\n%s" % (
                s.proc.poll(), log)
            assert time.monotonic() < deadline, "the server still refuses connections; its log:\n" + log
            continue
        try:
            probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = probe.recv(4096)
        except (ConnectionResetError, BrokenPipeError):
            answer = b""
        probe.close()
        if answer and status_of(answer) == 200:
            break
        assert answer == b"" or status_of(answer) == 503, answer
        assert time.monotonic() < deadline, answer


def test_sigterm_drains(make_server, gate):
    s = make_server()
    s.submit([HELPER, "print", "up\n", "read-fifo", gate.path], name="survivor")
    s.wait("survivor", "Running")
    stream = s.conn()
    stream.request("GET", "/v1/jobs/survivor/logs?follow=1")
    sr = stream.getresponse()
    assert sr.readline() == b"up\n"
    poll = s.conn()
    poll.request("GET", "/v1/jobs/survivor/wait?timeout=600")
    watch = s.conn()
    watch.request("GET", "/v1/watch")
    wr = watch.getresponse()
    assert json.loads(wr.readline())["job"]["name"] == "survivor"
    idle = UnixConnection(s.socket)
    idle.connect()
    s.proc.send_signal(signal.SIGTERM)
    # the stream and the watch end with their last chunk: a clean end, not a cut
    assert sr.read() == b""
    assert wr.read() == b""
    pr = poll.getresponse()
    assert pr.status == 503
    assert json.loads(pr.read()) == {"status": 503, "code": "shut_down", "field": None,
                                     "message": "tjob serve is shutting down; retry against the next server"}
    assert idle.sock.recv(10) == b""
    assert s.proc.wait(timeout=DEADLINE) == 0
    assert "msg=draining signal=SIGTERM" in s.log() and "msg=stopped" in s.log()
    assert not os.path.exists(s.socket)
    # the job was not cancelled: its process still runs, blocked on the gate
    assert any(gate.path.encode() in open("/proc/%s/cmdline" % p, "rb").read()
               for p in os.listdir("/proc") if p.isdigit() and os.path.exists("/proc/%s/cmdline" % p))
    out = tjob_cli(s.home, "events", "survivor", "-o", "json")
    assert "CancelRequested" not in out.stdout
