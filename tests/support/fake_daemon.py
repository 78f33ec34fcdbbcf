"""A misbehaving Docker Engine API on a unix socket, for fault tests.

    python3 fake_daemon.py SOCKET MODE

It answers /_ping and /version as Docker 20.10 does, then, per MODE:
  500       every other request gets 500 with a Docker error body;
  cut       every other request gets a head promising 1000 bytes, 10 of them, then a close;
  bigframe  one exited job `big` whose log stream announces a 2 GiB frame;
  noevents  one job `big` that runs for 2 s after the first listing, then exits 0; /events is 500.
  reset     every other request gets half a head, then a TCP-style reset (SO_LINGER 0);
  slow      every other request is answered after 30 s;
  garbage   every other request gets 200 with a body that is not JSON.
  killrace  one job `big` listed running; it has exited by the time it is signalled, and the kill
            gets Podman's answer (500, "can only kill running containers"); /events is 500.
  pingonly  /version is 500 (its ping's headers must do); no containers.
  oldping   its ping has no Api-Version header (/version must be asked; it says so on stdout); no containers.
  tls:DIR   as pingonly, but on TCP 127.0.0.1 (SOCKET is ignored) with TLS from DIR/server.pem and
            DIR/server-key.pem, asking for a client certificate signed by DIR/ca.pem; prints `ready PORT`.
"""
import json
import os
import socket
import socketserver
import struct
import sys
import threading
import time

SOCK, MODE = sys.argv[1], sys.argv[2]

CONTAINER = {"Id": "c0ffee", "Names": ["/big-node-0"], "State": "exited", "Created": 1700000000,
             "Labels": {"trainer.kubeflow.org/trainjob-name": "big",
                        "trainer.kubeflow.org/step": "node-0",
                        "trainer.kubeflow.org/runtime-name": "torch-distributed"}}
INSPECT = {"Id": "c0ffee", "Config": {"Tty": False, "Labels": CONTAINER["Labels"]},
           "State": {"Status": "exited", "ExitCode": 0, "OOMKilled": False, "Pid": 0, "Error": "",
                     # as Podman 4.3 records a container that exits at once: its start 2 ms after its end
                     "StartedAt": "2026-12-07T03:28:06.717222003Z", "FinishedAt": "2026-12-07T03:28:06.715202465Z"}}


FIRST_LIST = []
KILLED = []
LOCK = threading.Lock()


def state():
    """`noevents`: running for 2 s after the first listing, then exited."""
    with LOCK:
        if not FIRST_LIST:
            FIRST_LIST.append(time.monotonic())
        if MODE == "killrace":
            done = bool(KILLED)
        else:
            done = MODE != "noevents" or time.monotonic() - FIRST_LIST[0] > 2
    return "exited" if done else "running"


class Handler(socketserver.StreamRequestHandler):
    def send(self, status, body, ctype="application/json", extra="", api="Api-Version: 1.41\r\n"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        head = "HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s%sConnection: close\r\n\r\n" % (
            status, ctype, len(data), api, extra)
        self.wfile.write(head.encode() + data)

    def handle(self):
        line = self.rfile.readline().decode()
        length = 0
        while True:
            h = self.rfile.readline()
            if h in (b"\r\n", b"\n", b""):
                break
            if h.lower().startswith(b"content-length:"):
                length = int(h.split(b":")[1])
        if length:
            self.rfile.read(length)
        path = line.split(" ")[1] if " " in line else "/"
        if path.endswith("/_ping"):
            return self.send(200, b"OK", "text/plain", api="" if MODE == "oldping" else "Api-Version: 1.41\r\n")
        if path.endswith("/version"):
            if MODE == "pingonly":
                return self.send(500, {"message": "/version is broken here"})
            print("asked /version", flush=True)
            return self.send(200, {"Version": "20.10.24", "ApiVersion": "1.41", "MinAPIVersion": "1.12"})
        if MODE in ("pingonly", "oldping") and "/containers/json" in path:
            return self.send(200, [])
        if MODE == "500":
            return self.send(500, {"message": "injected failure: the daemon is broken"})
        if MODE == "cut":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n[{\"Id\":\"ab")
            self.wfile.flush()
            return
        if MODE == "reset":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Ty")
            self.wfile.flush()
            self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.request.close()
            return
        if MODE == "slow":
            time.sleep(30)
            return self.send(200, [])
        if MODE == "garbage":
            return self.send(200, b"<html>this is not the Engine API</html>", "text/html")
        if MODE in ("bigframe", "noevents", "killrace"):
            if "/events" in path:
                return self.send(500, {"message": "events are broken here"})
            if MODE == "killrace" and "/kill" in path:
                with LOCK:
                    KILLED.append(path)
                print("asked to kill", flush=True)
                return self.send(500, {"message": "can only kill running containers. c0ffee is in state "
                                                  "exited: container state improper"})
            st = state()
            if "/containers/json" in path:
                return self.send(200, [dict(CONTAINER, State=st)])
            if path.split("?")[0].endswith("/json"):
                return self.send(200, dict(INSPECT, State=dict(INSPECT["State"], Status=st)))
            if "/logs" in path:
                frame = bytes([1, 0, 0, 0, 0x7F, 0xFF, 0xFF, 0xFF]) + b"x" * 100
                return self.send(200, frame, "application/vnd.docker.raw-stream")
        return self.send(404, {"message": "page not found"})


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class TlsServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, certs):
        super().__init__(("127.0.0.1", 0), Handler)
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(certs, "server.pem"), os.path.join(certs, "server-key.pem"))
        ctx.load_verify_locations(os.path.join(certs, "ca.pem"))
        ctx.verify_mode = ssl.CERT_REQUIRED  # as dockerd --tlsverify: the client shows its certificate
        self.ctx = ctx

    def get_request(self):
        sock, addr = super().get_request()
        return self.ctx.wrap_socket(sock, server_side=True), addr

    def handle_error(self, request, client_address):
        pass  # a client that refused our certificate: nothing to print


if MODE.startswith("tls:"):
    certs = MODE[4:]
    MODE = "pingonly"
    with TlsServer(certs) as srv:
        print("ready %d" % srv.server_address[1], flush=True)
        srv.serve_forever()
else:
    if os.path.exists(SOCK):
        os.unlink(SOCK)
    with Server(SOCK, Handler) as srv:
        print("ready", flush=True)
        srv.serve_forever()
