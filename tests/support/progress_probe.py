"""A job's code that reports progress to its engine the way Kubeflow's update_trainjob_status does
(POST {"trainerStatus": ...} with a bearer token, TLS verified against the CA), with good and bad
reports, for tests/integration/progress_test.cpp. Prints one line per report: CASE STATUS BODY.

    progress_probe.py battery [OTHER_URL OTHER_TOKEN_FILE]   the cases below, in order
    progress_probe.py post URL TOKEN_FILE BODY               one report (ends with `posted STATUS`)
    progress_probe.py burst N                                N good reports at once (pipelined on one connection)
"""
import http.client
import json
import os
import socket
import ssl
import sys
import urllib.parse

URL = os.environ.get("KUBEFLOW_TRAINER_SERVER_URL", "")
CA = os.environ.get("KUBEFLOW_TRAINER_SERVER_CA_CERT", "")
TOKEN_FILE = os.environ.get("KUBEFLOW_TRAINER_SERVER_TOKEN", "")


def token_of(path):
    with open(path) as f:
        return f.read().strip()


def post(url, token, body, case):
    parts = urllib.parse.urlsplit(url)
    ctx = ssl.create_default_context(cafile=CA)  # the engine's certificate must verify against the CA
    conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=10, context=ctx)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = "Bearer " + token
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", parts.path, body=data, headers=headers)
    r = conn.getresponse()
    text = r.read().decode(errors="replace").strip()
    conn.close()
    print(case, r.status, text, flush=True)
    return r.status


def unread_body(url, case):
    """A header that announces a 1 MiB body and carries no token, and no body: the engine must answer from
    the header alone (before issue 41 it waited for the body, up to its idle timeout)."""
    parts = urllib.parse.urlsplit(url)
    ctx = ssl.create_default_context(cafile=CA)
    conn = ctx.wrap_socket(socket.create_connection((parts.hostname, parts.port), timeout=8),
                           server_hostname=parts.hostname)
    conn.sendall(("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                  "Content-Length: %d\r\nExpect: 100-continue\r\n\r\n" % (parts.path, parts.hostname, 1 << 20)).encode())
    try:
        head = conn.recv(65536).decode(errors="replace")
        print(case, head.split()[1] if head else 0, head.split("\r\n\r\n", 1)[-1].strip(), flush=True)
    except socket.timeout:
        print(case, 0, "no answer before the body", flush=True)
    conn.close()


def status(**fields):
    return {"trainerStatus": fields}


def battery(other_url, other_token_file):
    mine = token_of(TOKEN_FILE)
    post(URL, mine, status(progressPercentage=10, estimatedRemainingSeconds=90,
                           metrics=[{"name": "loss", "value": "0.9"}]), "good")
    post(URL, None, status(progressPercentage=11), "no-token")
    post(URL, "0" * 64, status(progressPercentage=12), "wrong-token")
    post(URL.replace("/v1/jobs/", "/v1/jobs/no-such-job-"), "0" * 64, status(progressPercentage=12), "unknown-job")
    unread_body(URL, "body-before-token")
    post(URL, mine, b"{not json", "not-json")
    post(URL, mine, {"progressPercentage": 13}, "no-trainerStatus")
    post(URL, mine, status(progressPercentage="half"), "percent-not-number")
    post(URL, mine, status(metrics=[{"name": "lo\x07ss", "value": "1"}]), "control-name")
    post(URL, mine, status(metrics=[{"name": "x" * 65, "value": "1"}]), "long-name")
    post(URL, mine, status(metrics=[{"name": "loss", "value": ["1"]}]), "value-not-text")
    if other_url:
        post(other_url, mine, status(progressPercentage=99), "token-of-other-job")
        post(URL, token_of(other_token_file), status(progressPercentage=98), "other-token-here")
    post(URL, mine, status(progressPercentage=250, estimatedRemainingSeconds=-5), "clamped")
    many = [{"name": "m%05d" % i, "value": str(i)} for i in range(10000)]
    post(URL, mine, status(progressPercentage=60, metrics=many), "ten-thousand-metrics")
    post(URL, mine, status(progressPercentage=70, estimatedRemainingSeconds=30,
                           metrics=[{"name": "loss", "value": 0.25}, {"name": "accuracy", "value": "0.8"},
                                    {"name": "loss", "value": "0.2"}]), "last")


def main():
    mode = sys.argv[1]
    if mode == "battery":
        battery(*(sys.argv[2:4] if len(sys.argv) >= 4 else (None, None)))
    elif mode == "post":
        post(sys.argv[2], token_of(sys.argv[3]), sys.argv[4].encode(), "posted")
    elif mode == "burst":  # N reports written at once on one connection (pipelined), then the N answers
        mine = token_of(TOKEN_FILE)
        parts = urllib.parse.urlsplit(URL)
        ctx = ssl.create_default_context(cafile=CA)
        raw = socket.create_connection((parts.hostname, parts.port), timeout=30)
        conn = ctx.wrap_socket(raw, server_hostname=parts.hostname)
        n = int(sys.argv[2])
        out = b""
        for i in range(n):
            body = json.dumps(status(progressPercentage=i % 101, metrics=[{"name": "i", "value": str(i)}])).encode()
            out += ("POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"
                    "Content-Length: %d\r\n\r\n" % (parts.path, parts.hostname, mine, len(body))).encode() + body
        conn.sendall(out)
        buf = b""
        for i in range(n):
            while b"\r\n\r\n" not in buf:
                buf += conn.recv(65536)
            head, buf = buf.split(b"\r\n\r\n", 1)
            lines = head.decode().split("\r\n")
            length = next(int(l.split(":", 1)[1]) for l in lines if l.lower().startswith("content-length:"))
            while len(buf) < length:
                buf += conn.recv(65536)
            text, buf = buf[:length], buf[length:]
            print("burst-%d" % i, lines[0].split()[1], text.decode(errors="replace").strip(), flush=True)
        conn.close()

main()
