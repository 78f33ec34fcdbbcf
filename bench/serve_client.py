#!/usr/bin/env python3
"""bench/serve_client.py: tjob serve driven over its unix socket, for bench/run's serve case.

    serve_client.py TJOB HOME submit N INFLIGHT PROGRAM   jobs/s: N POSTs from INFLIGHT connections, each job
                                                          run to Complete (seen on /v1/watch)
    serve_client.py TJOB HOME hold N [KINDS]              N log follows and N wait long polls held open on a
                                                          running job: the server's memory and descriptors
                                                          (KINDS: both, follow or wait)
    serve_client.py TJOB HOME watch N UNTIL               job exit → its Complete line on /v1/watch, N times

Starts `TJOB serve --detach` on HOME, prints one JSON line, stops the server.
"""
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time


def start(tjob, home):
    env = dict(os.environ, TJOB_HOME=home)
    out = subprocess.run([tjob, "--cpu-budget", "0", "serve", "--detach", "--max-connections", "4096"], env=env, capture_output=True,
                         text=True, check=True)
    sock = out.stdout.split()[0][len("unix://"):]
    pid = int(open(os.path.join(home, "serve.pid")).read())
    return sock, pid


def stop(pid):
    os.kill(pid, signal.SIGTERM)
    fd = os.pidfd_open(pid)
    import select
    select.select([fd], [], [], 60)
    os.close(fd)


async def request(reader, writer, method, path, body=b""):
    writer.write(b"%s %s HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (method.encode(), path.encode(), len(body), body))
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    data = await reader.readexactly(length)
    return status, data


async def fetch(sock, method, path):
    """One request on a connection of its own, read to its end (chunked or not): status and body."""
    reader, writer = await asyncio.open_unix_connection(sock, limit=1 << 22)
    writer.write(b"%s %s HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n" % (method.encode(), path.encode()))
    raw = await reader.read(-1)
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        out = b""
        while True:
            size_line, _, body = body.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                break
            out += body[:size]
            body = body[size + 2:]
        body = out
    return int(head[9:12]), body


async def open_watch(sock):
    reader, writer = await asyncio.open_unix_connection(sock, limit=1 << 22)
    writer.write(b"GET /v1/watch HTTP/1.1\r\nHost: b\r\n\r\n")
    await reader.readuntil(b"\r\n\r\n")
    return reader, writer


async def watch_lines(reader):
    """JSON lines of a chunked /v1/watch answer, as they come."""
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        if size == 0:
            return
        chunk = await reader.readexactly(size + 2)
        for line in chunk[:-2].splitlines():
            yield json.loads(line), time.monotonic_ns()


async def submit(sock, n, inflight, program):
    wr, ww = await open_watch(sock)
    done = asyncio.Event()
    complete = set()

    async def follow():
        async for line, _ in watch_lines(wr):
            if line["job"]["status"] in ("Complete", "Failed"):
                complete.add(line["job"]["name"])
                if len(complete) == n:
                    done.set()
                    return

    follower = asyncio.create_task(follow())
    spec = json.dumps({"trainer": {"kind": "command", "command": [program]}}).encode()
    left = [n]
    t0 = time.monotonic()

    async def client():
        reader, writer = await asyncio.open_unix_connection(sock)
        while left[0] > 0:
            left[0] -= 1
            status, _ = await request(reader, writer, "POST", "/v1/jobs", spec)
            assert status == 201, status
        writer.close()

    await asyncio.gather(*[client() for _ in range(inflight)])
    await asyncio.wait_for(done.wait(), 600)
    secs = time.monotonic() - t0
    follower.cancel()
    ww.close()
    return {"per_s": n / secs, "wall_s": secs}


def rss_kib(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def hold(sock, pid, n, kinds="both"):
    reader, writer = await asyncio.open_unix_connection(sock)
    spec = json.dumps({"name": "held", "trainer": {"kind": "command", "command": ["sleep", "3600"]}}).encode()
    status, _ = await request(reader, writer, "POST", "/v1/jobs", spec)
    assert status == 201
    status, _ = await fetch(sock, "GET", "/v1/jobs/held/wait?status=Running&timeout=60")
    assert status == 200
    base_rss, base_fds = rss_kib(pid), len(os.listdir("/proc/%d/fd" % pid))
    conns = []
    paths = {"both": [b"/v1/jobs/held/logs?follow=1", b"/v1/jobs/held/wait?timeout=3600"],
             "follow": [b"/v1/jobs/held/logs?follow=1"] * 2, "wait": [b"/v1/jobs/held/wait?timeout=3600"] * 2}[kinds]
    want = {"log_follow": sum(n for p in paths if b"logs" in p) / 1, "wait": sum(n for p in paths if b"wait" in p)}
    for i in range(2 * n):
        r, w = await asyncio.open_unix_connection(sock)
        path = paths[i % 2]
        w.write(b"GET %s HTTP/1.1\r\nHost: b\r\n\r\n" % path)
        conns.append((r, w))
    await asyncio.gather(*[w.drain() for _, w in conns])
    # the server holds them all once its metrics say so
    deadline = time.monotonic() + 120
    while True:
        status, text = await request(reader, writer, "GET", "/metrics")
        held = {k: 0.0 for k in ("log_follow", "wait")}
        for line in text.decode().splitlines():
            for k in held:
                if line.startswith('tjob_http_held{kind="%s"}' % k):
                    held[k] = float(line.split()[-1])
        if held["log_follow"] >= want["log_follow"] and held["wait"] >= want["wait"]:
            break
        assert time.monotonic() < deadline, held
        await asyncio.sleep(0.05)
    rss, fds = rss_kib(pid), len(os.listdir("/proc/%d/fd" % pid))
    for _, w in conns:
        w.close()
    await fetch(sock, "POST", "/v1/jobs/held/cancel?force=1")
    return {"bytes_per_stream": (rss - base_rss) * 1024 / (2 * n), "fds": fds, "extra_fds": fds - base_fds}


async def watch(sock, n, until):
    wr, ww = await open_watch(sock)
    reader, writer = await asyncio.open_unix_connection(sock)
    lines = watch_lines(wr)
    lat = []
    for i in range(n):
        deadline = time.monotonic_ns() + 30_000_000
        spec = json.dumps({"name": "w%d" % i, "trainer": {"kind": "command", "command": [until, str(deadline)]}})
        status, _ = await request(reader, writer, "POST", "/v1/jobs", spec.encode())
        assert status == 201
        async for line, at in lines:
            if line["job"]["name"] == "w%d" % i and line["job"]["status"] == "Complete":
                break
        status, log = await fetch(sock, "GET", "/v1/jobs/w%d/logs" % i)
        exited = int(log.strip().splitlines()[-1])
        lat.append((at - exited) / 1000)
    lat.sort()
    return {"p50_us": statistics.median(lat), "p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))]}


def main():
    tjob, home, mode = sys.argv[1:4]
    rest = sys.argv[4:]
    sock, pid = start(tjob, home)
    try:
        if mode == "submit":
            out = asyncio.run(submit(sock, int(rest[0]), int(rest[1]), rest[2]))
        elif mode == "hold":
            out = asyncio.run(hold(sock, pid, int(rest[0]), rest[1] if len(rest) > 1 else "both"))
        else:
            out = asyncio.run(watch(sock, int(rest[0]), rest[1]))
    finally:
        stop(pid)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
