"""tjob serve against a client that means harm (issue 41, docs/security.md): connections without the
token, bodies sent before it, plain HTTP off loopback, a forged access log, files that others can read."""
import json
import os
import re
import socket
import stat
import time

from conftest import DEADLINE, raw, status_of, body_of, tjob_cli

TOKEN = "t" * 40


def private_token(tmp_path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    os.chmod(path, 0o600)
    return str(path)


def tcp_server(make_server, tmp_path, *extra):
    s = make_server(["--listen", "unix://" + str(tmp_path / "s.sock"), "--listen", "tcp://127.0.0.1:0",
                     "--token-file", private_token(tmp_path)] + list(extra))
    s.socket = str(tmp_path / "s.sock")
    return s


def unix_get(s, tmp_path, path="/v1/jobs"):
    out = raw(str(tmp_path / "s.sock"), b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    return status_of(out)


def answer_of(sock):
    """The answer on a socket up to its close (b"" when closed unanswered)."""
    out = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        out += chunk
    return out


def test_tokenless_tcp_clients_cannot_lock_the_owner_out(make_server, tmp_path):
    # Before: one budget for every listener, counted before the token: 1,030 such connections made the 0600
    # unix socket answer 503 to its owner.
    s = tcp_server(make_server, tmp_path, "--max-connections", "256")  # (64 pending in all: one address hits 16 first)
    host, port = s.tcp()
    held = []
    try:
        for _ in range(16):  # the most one address may have open without the token
            c = socket.create_connection((host, port), timeout=DEADLINE)
            c.sendall(b"GET /v1/jobs HTTP/1.1\r\n")  # half a header, and no more
            held.append(c)
        # one more from the same address is refused at once, saying why
        extra = socket.create_connection((host, port), timeout=DEADLINE)
        out = answer_of(extra)
        extra.close()
        assert status_of(out) == 503
        assert "have not sent the token, the limit for one address" in body_of(out)["message"]
        # the owner's socket is another listener, with a budget of its own
        for _ in range(5):
            assert unix_get(s, tmp_path) == 200
        assert s.proc.poll() is None
    finally:
        for c in held:
            c.close()
    # once they are gone, a client with the token is served over TCP
    deadline = time.monotonic() + DEADLINE
    while True:
        c = socket.create_connection((host, port), timeout=DEADLINE)
        c.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() +
                  b"\r\nConnection: close\r\n\r\n")
        out = answer_of(c)
        c.close()
        if out and status_of(out) == 200:
            break
        assert status_of(out) == 503 and time.monotonic() < deadline, out  # the closes are still coming in


def test_a_connection_that_never_finishes_its_header_is_cut_off(make_server, tmp_path):
    s = tcp_server(make_server, tmp_path, "--header-timeout", "0.5")
    host, port = s.tcp()
    c = socket.create_connection((host, port), timeout=DEADLINE)
    c.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n")
    began = time.monotonic()
    assert answer_of(c) == b""  # closed by the server, not by our timeout
    assert time.monotonic() - began < DEADLINE
    c.close()
    # A client that showed the token is no stranger: its idle time is --idle-timeout's, not the header's.
    c = socket.create_connection((host, port), timeout=DEADLINE)
    c.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() + b"\r\n\r\n")
    first = c.recv(65536)
    assert status_of(first) == 200
    c.settimeout(1.5)
    try:
        assert c.recv(10) == b"", "closed after its answer"
        raise AssertionError("a client with the token was cut off at the header timeout")
    except socket.timeout:
        pass  # still open, as it should be
    c.close()


def test_the_token_is_checked_before_the_body_is_read(make_server, tmp_path):
    # Before: up to 1 MiB of body was read (and 100 Continue sent) before the token was looked at.
    s = tcp_server(make_server, tmp_path)
    host, port = s.tcp()
    for auth in (b"", b"Authorization: Bearer wrong-" + b"x" * 40 + b"\r\n"):
        c = socket.create_connection((host, port), timeout=10)
        c.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + auth +
                  b"Content-Length: 1048576\r\nExpect: 100-continue\r\n\r\n")
        out = answer_of(c)  # no body sent: the answer comes from the header alone
        c.close()
        assert status_of(out) == 401, out[:200]
        assert b"100 Continue" not in out
    assert s.get("/v1/jobs").json()["items"] == []  # (over the unix socket: nothing was made)


def test_plain_http_off_loopback_needs_tls_or_insecure(make_server, tmp_path, home):
    r = tjob_cli(home, "serve", "--listen", "tcp://0.0.0.0:0", "--token-file", private_token(tmp_path))
    assert r.returncode != 0
    assert "0.0.0.0 is not a loopback address" in r.stderr and "--tls-cert" in r.stderr
    # --insecure says so: it listens (spoken to here over loopback only)
    s = make_server(["--listen", "tcp://0.0.0.0:0", "--token-file", private_token(tmp_path), "--insecure"])
    assert s.addresses[0].startswith("tcp://0.0.0.0:")
    # and a client refuses to send its token in clear to a host that is not this machine
    r = tjob_cli(home, "--server", "tcp://tjob-remote.invalid:8080", "list", env={"TJOB_TOKEN": TOKEN})
    assert r.returncode != 0
    assert "would send the token, and every job, in clear" in r.stderr and "https://" in r.stderr


def test_the_access_log_escapes_what_a_client_sends(server):
    # Before: the path was written between quotes as it came, so a " or a \ in it ended or broke the field.
    forged = b'/nope"status=200"\\x'
    out = raw(server.socket, b"GET " + forged + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status_of(out) == 404
    line = server.wait_log(lambda l: "msg=request" in l and "nope" in l)
    m = re.search(r'path="((?:[^"\\]|\\.)*)" status=(\d+) ', line)
    assert m, line
    assert re.sub(r"\\(.)", r"\1", m.group(1)) == forged.decode() and m.group(2) == "404", line


def test_idempotency_records_are_private(server):
    r = server.post("/v1/jobs", {"trainer": {"kind": "command", "command": ["true"]}},
                    headers={"Idempotency-Key": "k-1", "Content-Type": "application/json"})
    assert r.status == 201, r
    d = os.path.join(server.home, "serve", "idempotency")
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    files = [os.path.join(d, f) for f in os.listdir(d)]
    assert files
    for f in files:
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o600, f


def test_secret_files_that_others_can_read_are_refused(tmp_path, home):
    token = tmp_path / "open-token"
    token.write_text(TOKEN + "\n")
    os.chmod(token, 0o644)
    r = tjob_cli(home, "serve", "--listen", "tcp://127.0.0.1:0", "--token-file", str(token))
    assert r.returncode != 0
    assert "is readable by others (mode 0644)" in r.stderr and "chmod 600 " + str(token) in r.stderr
    key = tmp_path / "key.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    os.chmod(key, 0o640)
    r = tjob_cli(home, "serve", "--listen", "tcp://127.0.0.1:0", "--token-file", private_token(tmp_path),
                 "--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(key))
    assert r.returncode != 0 and "--tls-key " + str(key) + " is readable by others (mode 0640)" in r.stderr
    # the client's token file too
    r = tjob_cli(home, "--server", "tcp://127.0.0.1:9", "--token-file", str(token), "list")
    assert r.returncode != 0 and "is readable by others" in r.stderr


def test_a_local_job_gets_what_it_asked_for_not_the_servers_environment(make_server, tmp_path):
    env = {"SERVER_SECRET": "s3cret", "LC_ALL": "C.UTF-8"}
    script = "echo secret=${SERVER_SECRET:-none} locale=${LC_ALL:-none} path=${PATH:+set} mine=${MINE:-none}"
    spec = {"trainer": {"kind": "command", "command": ["sh", "-c", script], "env": {"MINE": "yes"}}}
    s = make_server(env=env)
    r = s.post("/v1/jobs", spec)
    assert r.status == 201, r
    s.wait(r.json()["name"])
    assert s.get("/v1/jobs/%s/logs" % r.json()["name"]).body == "secret=none locale=C.UTF-8 path=set mine=yes\n"
    # --inherit-environment: the server's whole environment, as before
    s = make_server(["--inherit-environment"], env=env, at=str(tmp_path / "other-home"))
    r = s.post("/v1/jobs", spec)
    s.wait(r.json()["name"])
    assert s.get("/v1/jobs/%s/logs" % r.json()["name"]).body == "secret=s3cret locale=C.UTF-8 path=set mine=yes\n"
