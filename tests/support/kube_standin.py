#!/usr/bin/env python3
"""A stand-in Kubernetes API server with a small Kubeflow Trainer controller.

There is no real API server on these machines (reference/peers.md section 3), so
the kubernetes backend is tested against this one. It behaves as the real one
does where our client and kubectl can tell: discovery, CRUD with server-set
uid / resourceVersion / creationTimestamp, optimistic concurrency (409), Status
error objects, list + watch (chunked JSON lines, bookmarks, timeoutSeconds, 410
Expired for a compacted version), pods and their logs, core/v1 events, HTTPS
with a CA made here and a bearer token.

Behind it a controller turns each TrainJob into one pod per node, laid out as
JobSet lays them out, and runs each pod's `node` container command as a local
process (the image is not used): real output, real exit codes, pod phases
Pending -> Running -> Succeeded|Failed, and the TrainJob's Complete / Failed
conditions. Differences from a cluster: PET_MASTER_ADDR is 127.0.0.1 with a
free port (pods share the host's network), and pods run in a directory of
their own under DIR/pods/.

  kube_standin.py serve DIR [--no-tls] [--token T] [--bookmark-interval S] [--start-delay S]
                           [--die-with-parent]
      writes DIR/ready.json ({url, port, ca, token}) and DIR/kubeconfig, then serves
  kube_standin.py start DIR [options]
      the same in the background (log in DIR/standin.log); returns once it serves
  kube_standin.py ctl DIR ACTION [JSON]
      drives faults: drop-watches, compact, fail (JSON {count, code, path}),
      delay (JSON {seconds, path}), inject-line (JSON {line}),
      inject-long-line (JSON {bytes}), set-token (JSON {token}: the one accepted from now on),
      stats, reset-stats
  kube_standin.py stop DIR
"""

import copy
import datetime
import http.server
import json
import os
import random
import re
import signal
import socket
import socketserver
import ssl
import string
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
SERVER_VERSION = {"major": "1", "minor": "30", "gitVersion": "v1.30.0-standin",
                  "gitCommit": "standin", "gitTreeState": "clean", "buildDate": "2026-12-02T00:00:00Z",
                  "goVersion": "go1.22", "compiler": "gc", "platform": "linux/amd64"}

def parse_bool(v):
    """A boolean query parameter as the API server reads it (Go's strconv.ParseBool):
    the Python client sends watch=True, kubectl watch=true, curl users watch=1."""
    return v in ("1", "t", "T", "true", "TRUE", "True")


# plural -> (group, version, kind, namespaced, short names)
RESOURCES = {
    "pods": ("", "v1", "Pod", True, ["po"]),
    "events": ("", "v1", "Event", True, ["ev"]),
    "namespaces": ("", "v1", "Namespace", False, ["ns"]),
    "configmaps": ("", "v1", "ConfigMap", True, ["cm"]),
    "trainjobs": (GROUP, VERSION, "TrainJob", True, []),
    "trainingruntimes": (GROUP, VERSION, "TrainingRuntime", True, []),
    "clustertrainingruntimes": (GROUP, VERSION, "ClusterTrainingRuntime", False, []),
}
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
TRAINJOB_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
RESERVED_ENV = {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}
HISTORY = 5000  # watch events kept; older versions are Expired


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_ns(ns, fixed):
    """A time in nanoseconds as RFC 3339 in UTC: the CRI log file's (Go's
    RFC3339Nano, trailing zeros dropped) or, `fixed`, what the kubelet puts
    before each line for timestamps=true (always nine digits)."""
    secs, frac = divmod(ns, 10**9)
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
    digits = "%09d" % frac
    if not fixed:
        digits = digits.rstrip("0")
    return base + ("." + digits if digits else "") + "Z"


def parse_rfc3339_ns(v):
    """A query parameter's RFC 3339 time (fraction and zone offset allowed, as
    Go's time.Parse reads it) in nanoseconds; None when it is not one."""
    m = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})", v or "")
    if not m:
        return None
    y, mo, d, h, mi, sec = (int(x) for x in m.groups()[:6])
    try:
        secs = int(datetime.datetime(y, mo, d, h, mi, sec, tzinfo=datetime.timezone.utc).timestamp())
    except ValueError:
        return None
    zone = m.group(8)
    if zone not in ("Z", "z"):
        off = int(zone[1:3]) * 3600 + int(zone[4:6]) * 60
        secs -= off if zone[0] == "+" else -off
    return secs * 10**9 + int(((m.group(7) or "") + "000000000")[:9])


def copy_cri_log(fd, log):
    """What a container runtime does with a container's output: each line
    goes to the log file as a CRI entry, `<time> stdout F <line>`; a line
    longer than 16 KiB, or the last one without a newline, as `P` pieces."""
    pending = b""
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            data = b""
        stamp = rfc3339_ns(time.time_ns(), False).encode()
        if not data:
            if pending:
                log.write(b"%s stdout P %s\n" % (stamp, pending))
                log.flush()
            os.close(fd)
            return
        pending += data
        *lines, pending = pending.split(b"\n")
        out = [b"%s stdout F %s\n" % (stamp, line) for line in lines]
        while len(pending) >= 16384:
            out.append(b"%s stdout P %s\n" % (stamp, pending[:16384]))
            pending = pending[16384:]
        log.write(b"".join(out))
        log.flush()


def status_obj(code, reason, message, details=None):
    s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
         "message": message, "reason": reason, "code": code}
    if details:
        s["details"] = details
    return s


class ApiError(Exception):
    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.status = status_obj(code, reason, message, details)


def not_found(plural, name):
    group = RESOURCES[plural][0]
    what = plural + ("." + group if group else "")
    return ApiError(404, "NotFound", '%s "%s" not found' % (what, name),
                    {"name": name, "group": group, "kind": plural})


def invalid(kind, name, causes):
    msg = '%s.%s "%s" is invalid: %s' % (kind, GROUP if kind == "TrainJob" else "", name,
                                         ", ".join("%s: %s" % (c["field"], c["message"]) for c in causes))
    return ApiError(422, "Invalid", msg, {"name": name, "kind": kind, "causes": causes})


def match_labels(selector, labels):
    """Kubernetes label selector syntax: k=v, k==v, k!=v, k, !k, k in (a,b), k notin (a,b)."""
    if not selector:
        return True
    parts, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    for p in (x.strip() for x in parts):
        if not p:
            continue
        m = re.match(r"^([^\s!=]+)\s+(in|notin)\s+\((.*)\)$", p)
        if m:
            vals = {v.strip() for v in m.group(3).split(",")}
            has = m.group(1) in labels and labels[m.group(1)] in vals
            if (m.group(2) == "in") != has:
                return False
            continue
        if "!=" in p:
            k, v = p.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in p:
            k, v = p.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif p.startswith("!"):
            if p[1:] in labels:
                return False
        elif p not in labels:
            return False
    return True


def match_fields(selector, obj):
    if not selector:
        return True
    for p in selector.split(","):
        neg = "!=" in p
        k, v = p.split("!=" if neg else "=", 1)
        k = k.strip().replace("==", "")
        cur = obj
        for part in k.split("."):
            cur = cur.get(part, {}) if isinstance(cur, dict) else {}
        val = cur if isinstance(cur, str) else ""
        if (val == v.strip()) == neg:
            return False
    return True


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class Store:
    """Objects, the resourceVersion counter and the watch history."""

    def __init__(self):
        self.lock = threading.Condition()
        self.rv = 100
        self.objects = {}  # (plural, ns, name) -> obj
        self.history = []  # (rv, type, plural, ns, obj)
        self.oldest = self.rv  # a watch from below this version is Expired
        self.generation = 0  # wakes watchers on compaction / drops

    def _record(self, type_, plural, ns, obj):
        self.history.append((int(obj["metadata"]["resourceVersion"]), type_, plural, ns, copy.deepcopy(obj)))
        if len(self.history) > HISTORY:
            dropped = self.history[: len(self.history) - HISTORY]
            self.history = self.history[len(self.history) - HISTORY:]
            self.oldest = dropped[-1][0]
        self.lock.notify_all()

    def _bump(self, obj):
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def create(self, plural, ns, obj):
        with self.lock:
            md = obj.setdefault("metadata", {})
            if not md.get("name") and md.get("generateName"):
                md["name"] = md["generateName"] + "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(5))
            name = md.get("name", "")
            group, version, kind, namespaced, _ = RESOURCES[plural]
            if not name:
                raise invalid(kind, name, [{"field": "metadata.name", "message": "Required value: name or generateName is required", "reason": "FieldValueRequired"}])
            if (plural, ns, name) in self.objects:
                raise ApiError(409, "AlreadyExists", '%s%s "%s" already exists' % (plural, "." + group if group else "", name),
                               {"name": name, "group": group, "kind": plural})
            md["uid"] = str(uuid.uuid4())
            md["creationTimestamp"] = now_iso()
            md["generation"] = 1
            if namespaced:
                md["namespace"] = ns
            else:
                md.pop("namespace", None)
            obj["apiVersion"] = (group + "/" + version) if group else version
            obj["kind"] = kind
            self._bump(obj)
            self.objects[(plural, ns, name)] = obj
            self._record("ADDED", plural, ns, obj)
            return copy.deepcopy(obj)

    def get(self, plural, ns, name):
        with self.lock:
            obj = self.objects.get((plural, ns, name))
            if obj is None:
                raise not_found(plural, name)
            return copy.deepcopy(obj)

    def list(self, plural, ns, label_sel="", field_sel=""):
        with self.lock:
            items = [copy.deepcopy(o) for (p, n, _), o in sorted(self.objects.items())
                     if p == plural and (ns is None or n == ns)
                     and match_labels(label_sel, o["metadata"].get("labels") or {})
                     and match_fields(field_sel, o)]
            return items, str(self.rv)

    def update(self, plural, ns, name, obj, status_only=False, check_rv=True):
        with self.lock:
            cur = self.objects.get((plural, ns, name))
            if cur is None:
                raise not_found(plural, name)
            rv = obj.get("metadata", {}).get("resourceVersion")
            if check_rv and rv and rv != cur["metadata"]["resourceVersion"]:
                group = RESOURCES[plural][0]
                raise ApiError(409, "Conflict",
                               'Operation cannot be fulfilled on %s%s "%s": the object has been modified; '
                               "please apply your changes to the latest version and try again"
                               % (plural, "." + group if group else "", name),
                               {"name": name, "group": group, "kind": plural})
            new = copy.deepcopy(cur)
            if status_only:
                new["status"] = copy.deepcopy(obj.get("status", {}))
            else:
                if plural == "trainjobs":
                    old_spec, new_spec = cur.get("spec", {}), obj.get("spec", {})
                    for f in ("runtimeRef", "initializer", "trainer"):
                        if old_spec.get(f) != new_spec.get(f):
                            raise invalid("TrainJob", name, [{"field": "spec." + f, "message": "Invalid value: field is immutable", "reason": "FieldValueInvalid"}])
                for k, v in obj.items():
                    if k not in ("metadata", "status"):
                        new[k] = copy.deepcopy(v)
                for k in ("labels", "annotations", "finalizers"):
                    if k in obj.get("metadata", {}):
                        new["metadata"][k] = copy.deepcopy(obj["metadata"][k])
                if new.get("spec") != cur.get("spec"):
                    new["metadata"]["generation"] = cur["metadata"].get("generation", 1) + 1
            if new == cur:
                return copy.deepcopy(cur)
            self._bump(new)
            self.objects[(plural, ns, name)] = new
            self._record("MODIFIED", plural, ns, new)
            return copy.deepcopy(new)

    def mutate(self, plural, ns, name, fn):
        """Controller-side read-modify-write without a version check."""
        with self.lock:
            cur = self.objects.get((plural, ns, name))
            if cur is None:
                return None
            new = copy.deepcopy(cur)
            fn(new)
            if new == cur:
                return cur
            self._bump(new)
            self.objects[(plural, ns, name)] = new
            self._record("MODIFIED", plural, ns, new)
            return copy.deepcopy(new)

    def delete(self, plural, ns, name):
        with self.lock:
            cur = self.objects.pop((plural, ns, name), None)
            if cur is None:
                raise not_found(plural, name)
            cur = copy.deepcopy(cur)
            self._bump(cur)
            self._record("DELETED", plural, ns, cur)
            return cur

    def compact(self):
        with self.lock:
            self.history = []
            self.oldest = self.rv
            self.generation += 1
            self.lock.notify_all()


class Faults:
    def __init__(self):
        self.lock = threading.Condition()  # notified when a request or a watch is counted
        self.fail = []  # [{"count", "code", "path"}]
        self.delay = None  # {"seconds", "path"}
        self.inject = []  # lines to send on the open watches
        self.drop = 0  # generation: watches opened before it end
        self.requests = []  # (method, path, query-has-watch)
        self.watches_opened = 0

    def take_failure(self, path):
        with self.lock:
            for f in self.fail:
                if f["count"] > 0 and path.startswith(f.get("path", "/")):
                    f["count"] -= 1
                    return f.get("code", 500)
        return None


class Controller:
    """Turns TrainJobs into pods that run as local processes."""

    def __init__(self, server):
        self.server = server
        self.store = server.store
        self.procs = {}  # pod name -> Popen
        self.jobs = {}  # (ns, name) -> uid handled
        self.lock = threading.Lock()
        threading.Thread(target=self.loop, daemon=True).start()

    def event(self, ns, kind, name, uid, reason, message, type_="Normal"):
        t = now_iso()
        ev = {"metadata": {"name": "%s.%x" % (name, random.getrandbits(48)), "namespace": ns},
              "involvedObject": {"kind": kind, "name": name, "namespace": ns, "uid": uid,
                                 "apiVersion": (GROUP + "/" + VERSION) if kind == "TrainJob" else "v1"},
              "reason": reason, "message": message, "type": type_, "count": 1,
              "firstTimestamp": t, "lastTimestamp": t, "source": {"component": "standin-controller"}}
        try:
            self.store.create("events", ns, ev)
        except ApiError:
            pass

    def loop(self):
        seen = self.store.rv
        while True:
            with self.store.lock:
                self.store.lock.wait(0.5)
                jobs = [(n, name, copy.deepcopy(o)) for (p, n, name), o in self.store.objects.items() if p == "trainjobs"]
            live = set()
            for ns, name, tj in jobs:
                live.add((ns, name))
                try:
                    self.reconcile(ns, name, tj)
                except Exception as e:  # keep serving whatever one job does
                    print("controller: %s/%s: %r" % (ns, name, e), file=sys.stderr, flush=True)
            with self.lock:
                gone = [k for k in self.jobs if k not in live]
            for ns, name in gone:
                self.garbage_collect(ns, name)

    def runtime_of(self, ns, tj):
        ref = tj.get("spec", {}).get("runtimeRef", {})
        kind = ref.get("kind", "ClusterTrainingRuntime")
        try:
            if kind == "TrainingRuntime":
                return self.store.get("trainingruntimes", ns, ref.get("name", ""))
            return self.store.get("clustertrainingruntimes", "", ref.get("name", ""))
        except ApiError:
            return None

    def pods_of(self, ns, name):
        items, _ = self.store.list("pods", ns, "jobset.sigs.k8s.io/jobset-name=" + name)
        return items

    def set_condition(self, ns, name, type_, reason, message):
        def fn(o):
            st = o.setdefault("status", {})
            conds = [c for c in st.get("conditions", []) if c["type"] != type_]
            conds.append({"type": type_, "status": "True", "reason": reason, "message": message,
                          "lastTransitionTime": now_iso()})
            st["conditions"] = conds
        self.store.mutate("trainjobs", ns, name, fn)

    def reconcile(self, ns, name, tj):
        uid = tj["metadata"]["uid"]
        conds = {c["type"]: c for c in tj.get("status", {}).get("conditions", []) if c.get("status") == "True"}
        if "Complete" in conds or "Failed" in conds:
            return
        pods = self.pods_of(ns, name)
        spec = tj.get("spec", {})
        if spec.get("suspend"):
            if pods or "Suspended" not in conds:
                for p in pods:
                    self.kill_pod(ns, p["metadata"]["name"], delete=True)
                self.set_condition(ns, name, "Suspended", "Suspended", "TrainJob is suspended")
                self.event(ns, "TrainJob", name, uid, "Suspended", "TrainJob is suspended")
            return
        with self.lock:
            started = self.jobs.get((ns, name)) == uid
            self.jobs[(ns, name)] = uid
        if not started and not pods:
            self.start(ns, name, tj)
            return
        if not pods:
            return
        phases = [p.get("status", {}).get("phase") for p in pods]
        failed = [p for p in pods if p.get("status", {}).get("phase") == "Failed"]
        if failed:
            for p in pods:
                if p.get("status", {}).get("phase") in ("Pending", "Running"):
                    self.kill_pod(ns, p["metadata"]["name"])
            bad = failed[0]
            code = bad.get("status", {}).get("containerStatuses", [{}])[0].get("state", {}).get("terminated", {}).get("exitCode")
            msg = "jobset failed: pod %s failed with exit code %s" % (bad["metadata"]["name"], code)
            self.set_condition(ns, name, "Failed", "FailedJobs", msg)
            self.event(ns, "TrainJob", name, uid, "Failed", msg, "Warning")
        elif phases and all(ph == "Succeeded" for ph in phases):
            self.set_condition(ns, name, "Complete", "AllJobsCompleted", "jobset completed successfully")
            self.event(ns, "TrainJob", name, uid, "Completed", "TrainJob completed")

    def start(self, ns, name, tj):
        uid = tj["metadata"]["uid"]
        rt = self.runtime_of(ns, tj)
        spec = tj.get("spec", {})
        trainer = spec.get("trainer") or {}
        if rt is None:
            msg = "the runtime %s %s does not exist" % (spec.get("runtimeRef", {}).get("kind", "ClusterTrainingRuntime"),
                                                       spec.get("runtimeRef", {}).get("name"))
            self.set_condition(ns, name, "Failed", "TrainingRuntimeNotSupported", msg)
            self.event(ns, "TrainJob", name, uid, "Failed", msg, "Warning")
            return
        policy = rt.get("spec", {}).get("mlPolicy", {})
        nodes = trainer.get("numNodes") or policy.get("numNodes") or 1
        node_tmpl = {}
        for rj in rt.get("spec", {}).get("template", {}).get("spec", {}).get("replicatedJobs", []):
            for c in rj.get("template", {}).get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
                if c.get("name") == "node":
                    node_tmpl = c
        command = trainer.get("command") or node_tmpl.get("command") or []
        args = trainer.get("args") or node_tmpl.get("args") or []
        image = trainer.get("image") or node_tmpl.get("image", "")
        env = list(node_tmpl.get("env", [])) + list(trainer.get("env", []))
        resources = trainer.get("resourcesPerNode") or node_tmpl.get("resources") or {}
        nproc = trainer.get("numProcPerNode") or 1
        port = free_port()
        self.event(ns, "TrainJob", name, uid, "Created", "created JobSet %s" % name)
        for idx in range(int(nodes)):
            pod_env = env + [{"name": "PET_NNODES", "value": str(nodes)},
                             {"name": "PET_NPROC_PER_NODE", "value": str(nproc)},
                             {"name": "PET_NODE_RANK", "value": str(idx)},
                             {"name": "PET_MASTER_ADDR", "value": "127.0.0.1"},
                             {"name": "PET_MASTER_PORT", "value": str(port)}]
            pod = {"metadata": {
                "name": "%s-node-0-%d-%s" % (name, idx, "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(5))),
                "labels": {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": "node",
                           "jobset.sigs.k8s.io/job-index": "0", "batch.kubernetes.io/job-completion-index": str(idx),
                           "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"},
                "annotations": {"batch.kubernetes.io/job-completion-index": str(idx)},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name + "-node-0", "uid": uid, "controller": True}]},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "node", "image": image, "command": command, "args": args,
                                                                    "env": pod_env, "resources": resources}]},
                "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}],
                           # the kubelet reports imageID "" until the image is there
                           "containerStatuses": [{"name": "node", "ready": False, "restartCount": 0, "image": image,
                                                  "imageID": "", "started": False,
                                                  "state": {"waiting": {"reason": "ContainerCreating"}}}]}}
            created = self.store.create("pods", ns, pod)
            self.event(ns, "Pod", created["metadata"]["name"], created["metadata"]["uid"], "Scheduled",
                       "Successfully assigned %s/%s to standin-node" % (ns, created["metadata"]["name"]))
            threading.Thread(target=self.run_pod, args=(ns, created), daemon=True).start()

    def pod_dir(self, pod_name):
        d = os.path.join(self.server.dir, "pods", pod_name)
        os.makedirs(d, exist_ok=True)
        return d

    def run_pod(self, ns, pod):
        name = pod["metadata"]["name"]
        c = pod["spec"]["containers"][0]
        time.sleep(self.server.start_delay)
        d = self.pod_dir(name)
        log_path = os.path.join(d, "node.log")
        argv = list(c.get("command") or []) + list(c.get("args") or [])
        # What a container would see: an image's PATH, a home of its own (pip
        # --user installs go there), the pod's name; not the server's environment.
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOME": d, "HOSTNAME": name, "LANG": "C.UTF-8"}
        if "PIP_CONFIG_FILE" in os.environ:
            env["PIP_CONFIG_FILE"] = os.environ["PIP_CONFIG_FILE"]
        for e in c.get("env", []):
            env[e["name"]] = e.get("value", "")
        with self.lock:
            if self.store.objects.get(("pods", ns, name)) is None:
                return  # deleted before it started
            log = open(log_path, "wb")
            r, w = os.pipe()
            try:
                proc = subprocess.Popen(argv, stdout=w, stderr=w, stdin=subprocess.DEVNULL,
                                        cwd=d, env=env, start_new_session=True)
            except OSError as e:
                os.write(w, ('exec: "%s": %s\n' % (argv[0] if argv else "", e.strerror)).encode())
                proc = None
            os.close(w)
            copier = threading.Thread(target=copy_cri_log, args=(r, log), daemon=True)
            copier.start()
            if proc is not None:
                self.procs[name] = proc
        if proc is None:
            copier.join()
            log.close()
            self.finish_pod(ns, name, 128, "StartError")
            return

        def running(o):
            # as a kubelet reports a started container: its runtime id and the image's digest
            o["status"]["phase"] = "Running"
            o["status"]["startTime"] = now_iso()
            o["status"]["hostIP"] = o["status"]["podIP"] = "127.0.0.1"
            o["status"]["podIPs"] = [{"ip": "127.0.0.1"}]
            o["status"]["qosClass"] = "BestEffort"
            cs = o["status"]["containerStatuses"][0]
            cs["containerID"] = "standin://%s" % uuid.uuid4().hex
            cs["imageID"] = "%s@sha256:%s" % (cs["image"], "0" * 64)
            cs["state"] = {"running": {"startedAt": now_iso()}}
            cs["ready"] = cs["started"] = True
        self.store.mutate("pods", ns, name, running)
        self.event(ns, "Pod", name, pod["metadata"]["uid"], "Started", "Started container node")
        code = proc.wait()
        try:  # a container's other processes end with its first
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        copier.join()
        log.close()
        with self.lock:
            self.procs.pop(name, None)
        if code < 0:
            code = 128 - code
        self.finish_pod(ns, name, code, "Completed" if code == 0 else "Error")

    def finish_pod(self, ns, name, code, reason):
        def done(o):
            o["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
            cs = o["status"]["containerStatuses"][0]
            cs["ready"] = cs["started"] = False
            cs["state"] = {"terminated": {"exitCode": code, "reason": reason, "finishedAt": now_iso(),
                                          "startedAt": cs.get("state", {}).get("running", {}).get("startedAt", now_iso())}}
            if "containerID" in cs:
                cs["state"]["terminated"]["containerID"] = cs["containerID"]
        pod = self.store.mutate("pods", ns, name, done)
        if pod is not None:
            self.event(ns, "Pod", name, pod["metadata"]["uid"], "Completed" if code == 0 else "BackOff",
                       "container node exited with code %d" % code, "Normal" if code == 0 else "Warning")

    def kill_pod(self, ns, name, delete=False):
        with self.lock:
            proc = self.procs.get(name)
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except OSError:
                pass
            deadline = time.time() + 5
            while proc.poll() is None and time.time() < deadline:
                time.sleep(0.02)
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
        if delete:
            try:
                self.store.delete("pods", ns, name)
            except ApiError:
                pass

    def garbage_collect(self, ns, name):
        with self.lock:
            self.jobs.pop((ns, name), None)
        for p in self.pods_of(ns, name):
            self.kill_pod(ns, p["metadata"]["name"], delete=True)


def free_port():
    """A port nobody holds, drawn below the kernel's ephemeral range: one that
    bind(0) picked and we let go can be handed to another program before the
    torch pods (or another program given the port) bind it."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    for _ in range(64 if low > 11024 else 0):  # (no room below a range that starts low)
        port = random.randint(max(10000, low - 16384), low - 1)
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TORCH_RUNTIME = {
    "metadata": {"name": "torch-distributed", "labels": {"trainer.kubeflow.org/framework": "torch"}},
    "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
             "template": {"spec": {"replicatedJobs": [{
                 "name": "node",
                 "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                              "spec": {"template": {"spec": {"containers": [{
                                  "name": "node", "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
                                  "command": ["/bin/bash", "-c", "echo 'no command given'"]}]}}}}}]}}},
}


def discovery_v1():
    return {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "shortNames": ["po"],
         "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]},
        {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
        {"name": "pods/status", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get", "patch", "update"]},
        {"name": "events", "singularName": "event", "namespaced": True, "kind": "Event", "shortNames": ["ev"],
         "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]},
        {"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace", "shortNames": ["ns"],
         "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]},
        {"name": "configmaps", "singularName": "configmap", "namespaced": True, "kind": "ConfigMap", "shortNames": ["cm"],
         "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}]}


def discovery_trainer():
    verbs = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]
    res = []
    for plural in ("trainjobs", "trainingruntimes", "clustertrainingruntimes"):
        _, _, kind, namespaced, _ = RESOURCES[plural]
        res.append({"name": plural, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind,
                    "verbs": verbs, "storageVersionHash": "standin"})
        res.append({"name": plural + "/status", "singularName": "", "namespaced": namespaced, "kind": kind,
                    "verbs": ["get", "patch", "update"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP + "/" + VERSION, "resources": res}


def openapi_doc(gv):
    """Enough OpenAPI v3 for kubectl to see that the server validates fields
    itself (fieldValidation), so it sends ?fieldValidation=Strict instead of
    validating against a downloaded schema."""
    if gv not in ("api/v1", "apis/%s/%s" % (GROUP, VERSION)):
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    params = [{"name": n, "in": "query", "schema": {"type": "string"}}
              for n in ("dryRun", "fieldManager", "fieldValidation")]
    paths = {}
    for plural, (group, version, kind, namespaced, _) in RESOURCES.items():
        if (group == "") != (gv == "api/v1"):
            continue
        base = "/" + gv + ("/namespaces/{namespace}/" if namespaced else "/") + plural
        gvk = {"group": group, "version": version, "kind": kind}
        op = lambda action: {"x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk,
                             "parameters": params, "responses": {"200": {"description": "OK"}}}
        paths[base] = {"post": op("post"), "get": op("list"), "parameters": params}
        paths[base + "/{name}"] = {"get": op("get"), "put": op("put"), "patch": op("patch"),
                                   "delete": op("delete"), "parameters": params}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
            "paths": paths, "components": {"schemas": {}}}


def age(ts):
    try:
        then = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except (TypeError, ValueError):
        return "<unknown>"
    secs = int((datetime.datetime.now(datetime.timezone.utc) - then).total_seconds())
    return "%ds" % secs if secs < 120 else "%dm" % (secs // 60)


def table(plural, objs, rv):
    """The meta.k8s.io/v1 Table kubectl asks for, with the CRD's printer
    columns for TrainJobs (State = .status.conditions[-1:].type, Age)."""
    if plural == "trainjobs":
        cols = [("Name", "string", "name"), ("State", "string", ""), ("Age", "date", "")]
        cells = lambda o: [o["metadata"]["name"],
                           ((o.get("status") or {}).get("conditions") or [{}])[-1].get("type", ""),
                           age(o["metadata"].get("creationTimestamp"))]
    elif plural == "pods":
        cols = [("Name", "string", "name"), ("Ready", "string", ""), ("Status", "string", ""),
                ("Restarts", "string", ""), ("Age", "string", "")]
        cells = lambda o: [o["metadata"]["name"],
                           "%d/1" % int(bool(o.get("status", {}).get("containerStatuses", [{}])[0].get("ready"))),
                           (o.get("status", {}).get("containerStatuses", [{}])[0].get("state", {}).get("terminated", {}).get("reason")
                            or o.get("status", {}).get("phase", "")),
                           "0", age(o["metadata"].get("creationTimestamp"))]
    else:
        cols = [("Name", "string", "name"), ("Age", "date", "")]
        cells = lambda o: [o["metadata"]["name"], age(o["metadata"].get("creationTimestamp"))]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
            "columnDefinitions": [{"name": n, "type": t, "format": f, "description": n, "priority": 0} for n, t, f in cols],
            "rows": [{"cells": cells(o), "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                                    "metadata": o["metadata"]}} for o in objs]}


def group_list():
    gv = {"groupVersion": GROUP + "/" + VERSION, "version": VERSION}
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [{"name": GROUP, "versions": [gv], "preferredVersion": gv}]}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "standin"

    def log_message(self, fmt, *args):
        if os.environ.get("STANDIN_VERBOSE"):
            sys.stderr.write("standin: " + fmt % args + "\n")

    # -- plumbing
    def send_json(self, code, obj, headers=None):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def send_status(self, st):
        self.send_json(st["code"], st)

    def start_chunked(self, content_type):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, data):
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    def end_chunked(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def body_json(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        ctype = self.headers.get("Content-Type", "")
        try:
            if "yaml" in ctype:
                raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted media types include: application/json, application/merge-patch+json")
            return json.loads(raw or b"{}")
        except ValueError as e:
            raise ApiError(400, "BadRequest", "the body of the request could not be decoded: %s" % e)

    def handle_any(self, method):
        srv = self.server
        url = urllib.parse.urlsplit(self.path)
        path, q = url.path, dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        if path.startswith("/_standin/"):
            return self.control(method, path)
        with srv.faults.lock:
            srv.faults.requests.append((method, path, parse_bool(q.get("watch", ""))))
            srv.faults.lock.notify_all()
            delay = srv.faults.delay
        peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
        if srv.token and self.headers.get("Authorization") != "Bearer " + srv.token and not peer:
            return self.send_status(status_obj(401, "Unauthorized", "Unauthorized"))
        if delay and path.startswith(delay.get("path", "/")):
            time.sleep(delay["seconds"])
        code = srv.faults.take_failure(path)
        if code:
            return self.send_status(status_obj(code, "InternalError" if code >= 500 else "BadRequest",
                                               "Internal error occurred: injected fault %d" % code))
        try:
            if method == "DELETE":
                # A DELETE may carry DeleteOptions (kubectl and the Python client send
                # them): read them, or their bytes would be taken for the next request.
                opts = self.body_json()
                policy = opts.get("propagationPolicy")
                if policy not in (None, "Orphan", "Background", "Foreground"):
                    raise ApiError(422, "Invalid", "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: "
                                   "Unsupported value: \"%s\": supported values: \"Foreground\", \"Background\", "
                                   "\"Orphan\"" % policy)
            self.route(method, path, q)
        except ApiError as e:
            self.send_status(e.status)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PUT(self):
        self.handle_any("PUT")

    def do_PATCH(self):
        self.handle_any("PATCH")

    def do_DELETE(self):
        self.handle_any("DELETE")

    # -- routes
    def route(self, method, path, q):
        st = self.server.store
        if path == "/version":
            return self.send_json(200, SERVER_VERSION)
        if path in ("/api", "/api/"):
            return self.send_json(200, {"kind": "APIVersions", "versions": ["v1"],
                                        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
        if path == "/api/v1":
            return self.send_json(200, discovery_v1())
        if path in ("/apis", "/apis/"):
            return self.send_json(200, group_list())
        if path == "/apis/" + GROUP:
            return self.send_json(200, dict(group_list()["groups"][0], kind="APIGroup", apiVersion="v1"))
        if path == "/apis/%s/%s" % (GROUP, VERSION):
            return self.send_json(200, discovery_trainer())
        if path == "/openapi/v3":
            return self.send_json(200, {"paths": {gv: {"serverRelativeURL": "/openapi/v3/%s?hash=standin" % gv}
                                                  for gv in ("api/v1", "apis/%s/%s" % (GROUP, VERSION))}})
        if path.startswith("/openapi/v3/"):
            return self.send_json(200, openapi_doc(path[len("/openapi/v3/"):]))
        if path.startswith("/openapi/"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        m = re.match(r"^/(?:api/v1|apis/%s/%s)(?:/namespaces/([^/]+))?/([a-z]+)(?:/([^/]+))?(?:/([a-z]+))?$"
                     % (re.escape(GROUP), VERSION), path)
        if not m:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ns, plural, name, sub = m.group(1), m.group(2), m.group(3), m.group(4)
        if plural not in RESOURCES:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        group, version, kind, namespaced, _ = RESOURCES[plural]
        if (group == "") != path.startswith("/api/v1"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if namespaced and ns is None and name is not None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        key_ns = ns if namespaced else ""
        if plural == "namespaces" and name is None and method == "GET" and False:
            pass
        if name is None:
            if method == "GET":
                if parse_bool(q.get("watch", "")):
                    return self.watch(plural, ns if namespaced else "", q)
                return self.list_objects(plural, ns if namespaced else None, q, kind, group, version)
            if method == "POST":
                obj = self.body_json()
                if namespaced and ns is None:
                    raise ApiError(404, "NotFound", "the server could not find the requested resource")
                if plural == "trainjobs":
                    self.validate_trainjob(obj)
                if q.get("dryRun"):
                    return self.send_json(201, obj)
                return self.send_json(201, st.create(plural, key_ns, obj))
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if sub == "log" and plural == "pods" and method == "GET":
            return self.pod_log(key_ns, name, q)
        if sub not in (None, "status"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if method == "GET":
            return self.send_json(200, st.get(plural, key_ns, name))
        if method == "PUT":
            obj = self.body_json()
            if obj.get("metadata", {}).get("name") not in (None, name):
                raise ApiError(400, "BadRequest", "the name of the object (%s) does not match the name on the URL (%s)" % (obj["metadata"]["name"], name))
            return self.send_json(200, st.update(plural, key_ns, name, obj, status_only=sub == "status"))
        if method == "PATCH":
            ctype = self.headers.get("Content-Type", "")
            patch = self.body_json()
            cur = st.get(plural, key_ns, name)
            if "merge-patch" in ctype or "strategic-merge-patch" in ctype:
                new = merge_patch(cur, patch)
            else:
                raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json")
            return self.send_json(200, st.update(plural, key_ns, name, new, status_only=sub == "status",
                                                 check_rv="resourceVersion" in patch.get("metadata", {})))
        if method == "DELETE":
            gone = st.delete(plural, key_ns, name)
            return self.send_json(200, gone if plural != "pods" else gone)
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def validate_trainjob(self, obj):
        name = obj.get("metadata", {}).get("name", "")
        causes = []
        if name and (not TRAINJOB_NAME_RE.match(name) or len(name) > 63):
            causes.append({"field": "metadata.name", "reason": "FieldValueInvalid",
                           "message": "Invalid value: \"%s\": must match ^[a-z]([-a-z0-9]*[a-z0-9])?$ and be at most 63 characters" % name})
        if not obj.get("spec", {}).get("runtimeRef", {}).get("name"):
            causes.append({"field": "spec.runtimeRef.name", "reason": "FieldValueRequired", "message": "Required value"})
        for e in obj.get("spec", {}).get("trainer", {}).get("env", []) or []:
            if e.get("name") in RESERVED_ENV:
                causes.append({"field": "spec.trainer.env", "reason": "FieldValueInvalid",
                               "message": "Invalid value: must not have reserved envs, invalid envs configured: %s" % e["name"]})
        nn = obj.get("spec", {}).get("trainer", {}).get("numNodes")
        if nn is not None and (not isinstance(nn, int) or nn < 0):
            causes.append({"field": "spec.trainer.numNodes", "reason": "FieldValueInvalid", "message": "Invalid value: %r: should be greater than or equal to 0" % nn})
        if causes:
            raise invalid("TrainJob", name, causes)

    def list_objects(self, plural, ns, q, kind, group, version):
        items, rv = self.server.store.list(plural, ns, q.get("labelSelector", ""), q.get("fieldSelector", ""))
        cont = ""
        limit = int(q.get("limit") or 0)
        start = int(q.get("continue") or 0) if q.get("continue") else 0
        if limit:
            page = items[start:start + limit]
            if start + limit < len(items):
                cont = str(start + limit)
            items = page
        md = {"resourceVersion": rv}
        if cont:
            md["continue"] = cont
        if "as=Table" in self.headers.get("Accept", ""):
            t = table(plural, items, rv)
            if cont:
                t["metadata"]["continue"] = cont
            return self.send_json(200, t)
        self.send_json(200, {"apiVersion": (group + "/" + version) if group else version,
                             "kind": kind + "List", "metadata": md, "items": items})

    def watch(self, plural, ns, q):
        srv = self.server
        st = srv.store
        label_sel, field_sel = q.get("labelSelector", ""), q.get("fieldSelector", "")
        bookmarks = parse_bool(q.get("allowWatchBookmarks", ""))
        timeout = float(q.get("timeoutSeconds") or 1800)
        deadline = time.time() + timeout
        rv_param = q.get("resourceVersion", "")
        _, version_group = RESOURCES[plural][1], RESOURCES[plural][0]
        api_version = (version_group + "/" + RESOURCES[plural][1]) if version_group else RESOURCES[plural][1]

        def wanted(p, n, obj):
            return (p == plural and (not ns or n == ns)
                    and match_labels(label_sel, obj["metadata"].get("labels") or {})
                    and match_fields(field_sel, obj))

        as_table = "as=Table" in self.headers.get("Accept", "")

        def line(type_, obj):
            if as_table and type_ in ("ADDED", "MODIFIED", "DELETED"):
                obj = table(plural, [obj], obj["metadata"].get("resourceVersion", ""))
            return (json.dumps({"type": type_, "object": obj}) + "\n").encode()

        with srv.faults.lock:
            srv.faults.watches_opened += 1
            srv.faults.lock.notify_all()
            drop_gen = srv.faults.drop
            injected = len(srv.faults.inject)
        self.start_chunked("application/json")
        with st.lock:
            gen = st.generation
            if rv_param in ("", "0"):
                start = st.rv
                initial = [("ADDED", copy.deepcopy(o)) for (p, n, _), o in sorted(st.objects.items()) if wanted(p, n, o)]
            else:
                try:
                    start = int(rv_param)
                except ValueError:
                    start = -1
                initial = []
                if start < st.oldest:
                    err = status_obj(410, "Expired", "too old resource version: %s (%d)" % (rv_param, st.oldest))
                    initial = [("ERROR", err)]
                    start = None
        for type_, obj in initial:
            self.chunk(line(type_, obj))
        if start is None:
            return self.end_chunked()
        last = start
        last_bookmark = time.time()
        while True:
            with st.lock:
                pending = [h for h in st.history if h[0] > last]
                if not pending:
                    st.lock.wait(0.1)
                    pending = [h for h in st.history if h[0] > last]
                compacted = st.generation != gen
                current_rv = st.rv
            with srv.faults.lock:
                dropped = srv.faults.drop != drop_gen
                lines = srv.faults.inject[injected:]
                injected = len(srv.faults.inject)
            for line in lines:
                self.chunk(line.encode() + b"\n")
            if dropped:
                self.close_connection = True
                return  # cut mid-stream: no terminating chunk
            if compacted:
                err = status_obj(410, "Expired", "too old resource version: %d (%d)" % (last, current_rv))
                self.chunk((json.dumps({"type": "ERROR", "object": err}) + "\n").encode())
                return self.end_chunked()
            for rv, type_, p, n, obj in pending:
                last = rv
                if wanted(p, n, obj):
                    self.chunk(line(type_, obj))
            if bookmarks and time.time() - last_bookmark >= srv.bookmark_interval:
                last_bookmark = time.time()
                last = max(last, current_rv) if not pending else last
                bm = {"kind": RESOURCES[plural][2], "apiVersion": api_version, "metadata": {"resourceVersion": str(last)}}
                self.chunk((json.dumps({"type": "BOOKMARK", "object": bm}) + "\n").encode())
            if time.time() >= deadline:
                return self.end_chunked()

    def pod_log(self, ns, name, q):
        st = self.server.store
        pod = st.get("pods", ns, name)
        container = q.get("container") or "node"
        if container != "node":
            raise ApiError(400, "BadRequest", 'container %s is not valid for pod %s' % (container, name))
        phase = pod.get("status", {}).get("phase")
        path = os.path.join(self.server.dir, "pods", name, "node.log")
        if phase == "Pending" or not os.path.exists(path):
            raise ApiError(400, "BadRequest", 'container "node" in pod "%s" is waiting to start: ContainerCreating' % name)
        follow = parse_bool(q.get("follow", ""))
        stamps = parse_bool(q.get("timestamps", ""))
        tail = q.get("tailLines")
        since = None
        if q.get("sinceTime") is not None and q.get("sinceSeconds") is not None:
            raise ApiError(422, "Invalid", "PodLogOptions \"%s\" is invalid: [sinceSeconds: Invalid value: "
                           "\"\": at most one of `sinceTime` or `sinceSeconds` may be specified]" % name)
        if q.get("sinceTime") is not None:
            since = parse_rfc3339_ns(q["sinceTime"])
            if since is None:
                raise ApiError(400, "BadRequest", 'parsing time "%s" as "2006-01-02T15:04:05Z07:00": cannot parse'
                               % q["sinceTime"])
            # the API server passes it on to the kubelet as time.RFC3339: whole seconds
            since -= since % 10**9
        elif q.get("sinceSeconds") is not None:
            since = time.time_ns() - int(q["sinceSeconds"]) * 10**9

        def render(entries):
            # the kubelet's reading of CRI entries: `F` ends a line, `P` is a
            # piece of one; older than sinceTime is left out
            out = []
            for e in entries:
                ts, _, rest = e.partition(b" ")
                _, _, rest = rest.partition(b" ")  # the stream
                tag, _, content = rest.partition(b" ")
                t = parse_rfc3339_ns(ts.decode())
                if since is not None and t is not None and t < since:
                    continue
                if stamps:
                    out.append(rfc3339_ns(t or 0, True).encode() + b" ")
                out.append(content[:-1] + (b"\n" if tag == b"F" else b""))
            return b"".join(out)

        self.start_chunked("text/plain")
        with open(path, "rb") as f:
            held = b""  # an entry not yet whole in the file

            def entries():
                nonlocal held
                held += f.read()
                *whole, held = held.split(b"\n")
                return [e + b"\n" for e in whole]

            first = entries()
            if tail is not None:  # the last lines of the file, then sinceTime within them
                n = int(tail)
                first = first[-n:] if n > 0 else []
            self.chunk(render(first))
            while follow:
                more = entries()
                if more:
                    self.chunk(render(more))
                    continue
                try:
                    cur = st.get("pods", ns, name)
                except ApiError:
                    break
                if cur.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                    self.chunk(render(entries()))
                    break
                time.sleep(0.05)
        self.end_chunked()

    def control(self, method, path):
        srv = self.server
        f = srv.faults
        n = int(self.headers.get("Content-Length") or 0)
        arg = json.loads(self.rfile.read(n) or b"{}") if n else {}
        action = path[len("/_standin/"):]
        if action == "await":
            return self.send_json(200, {"ok": self.await_condition(arg)})
        with f.lock:
            if action == "stats":
                return self.send_json(200, {"requests": [list(r) for r in f.requests], "watches_opened": f.watches_opened})
            if action == "reset-stats":
                f.requests, f.watches_opened = [], 0
            elif action == "fail":
                f.fail.append({"count": arg.get("count", 1), "code": arg.get("code", 500), "path": arg.get("path", "/")})
            elif action == "delay":
                f.delay = arg if arg.get("seconds") else None
            elif action == "inject-line":
                f.inject.append(arg["line"])
            elif action == "inject-long-line":
                f.inject.append("x" * int(arg["bytes"]))
            elif action == "set-token":
                srv.token = arg["token"]
            elif action == "drop-watches":
                f.drop += 1
            elif action != "compact":
                return self.send_json(404, {"error": "unknown action " + action})
        if action == "compact":
            srv.store.compact()
        self.send_json(200, {"ok": True})


    def await_condition(self, arg):
        """Blocks until the condition `arg` names holds (True) or its timeout passes
        (False), woken by the change itself, never by polling: watches_at_least N,
        requests_more_than N (of any kind), lists_of PLURAL more_than N (GETs of the
        collection, or of a path ending so, that are not watches), or no_pods (in any
        namespace)."""
        srv = self.server
        deadline = time.monotonic() + float(arg.get("timeout", 30))
        if "no_pods" in arg:
            lock, holds = srv.store.lock, lambda: not srv.store.list("pods", None)[0]
        else:
            f = srv.faults

            def holds():
                if "watches_at_least" in arg:
                    return f.watches_opened >= int(arg["watches_at_least"])
                if "requests_more_than" in arg:
                    return len(f.requests) > int(arg["requests_more_than"])
                plural = "/" + arg["lists_of"]
                n = sum(1 for m, p, w in f.requests if m == "GET" and not w and p.endswith(plural))
                return n > int(arg["more_than"])
            lock = f.lock
        with lock:
            while not holds():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                lock.wait(left)
        return True


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, handler, directory, token, bookmark_interval, start_delay):
        self.dir = directory
        self.token = token
        self.bookmark_interval = bookmark_interval
        self.start_delay = start_delay
        self.store = Store()
        self.faults = Faults()
        super().__init__(addr, handler)
        self.store.create("namespaces", "", {"metadata": {"name": "default"}, "status": {"phase": "Active"}})
        self.store.create("clustertrainingruntimes", "", copy.deepcopy(TORCH_RUNTIME))
        self.controller = Controller(self)


def make_certs(d):
    """A CA, a server certificate for 127.0.0.1 / localhost and a client
    certificate (CN tjob-user) signed by it, made with openssl (EC P-256 keys:
    quick to make)."""
    run = lambda *a: subprocess.run(a, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    p = lambda n: os.path.join(d, n)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("openssl", "req", "-x509", *ec, "-keyout", p("ca.key"), "-out", p("ca.crt"),
        "-days", "2", "-subj", "/CN=tjob-standin-ca")
    for who, cn, ext in (("server", "kube-apiserver", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
                         ("client", "tjob-user", "extendedKeyUsage=clientAuth\n")):
        run("openssl", "req", *ec, "-keyout", p(who + ".key"), "-out", p(who + ".csr"), "-subj", "/CN=" + cn)
        with open(p(who + ".ext"), "w") as f:
            f.write(ext)
        run("openssl", "x509", "-req", "-in", p(who + ".csr"), "-CA", p("ca.crt"), "-CAkey", p("ca.key"),
            "-CAcreateserial", "-out", p(who + ".crt"), "-days", "2", "-extfile", p(who + ".ext"))
    return p("ca.crt"), p("server.crt"), p("server.key")


def die_with_parent():
    """SIGTERM when the process that started us dies (Linux PR_SET_PDEATHSIG),
    so a test killed mid-run leaves no server or pod behind."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM, 0, 0, 0)
    if os.getppid() == 1:  # the parent was already gone
        os.kill(os.getpid(), signal.SIGTERM)


def serve(d, tls=True, token=None, bookmark_interval=1.0, start_delay=0.1):
    os.makedirs(d, exist_ok=True)
    token = token if token is not None else "standin-" + uuid.uuid4().hex
    srv = Server(("127.0.0.1", 0), Handler, d, token, bookmark_interval, start_delay)
    port = srv.server_address[1]
    ca = ""
    if tls:
        ca, crt, key = make_certs(d)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        # a client may prove who it is with a certificate from this CA instead of the token
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.load_verify_locations(ca)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    url = ("https" if tls else "http") + "://127.0.0.1:%d" % port
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config", "current-context": "standin",
        "clusters": [{"name": "standin", "cluster": dict({"server": url}, **({"certificate-authority": ca} if tls else {}))}],
        "users": [{"name": "standin-user", "user": {"token": token}}],
        "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "standin-user", "namespace": "default"}}],
    }
    with open(os.path.join(d, "kubeconfig"), "w") as f:
        json.dump(kubeconfig, f, indent=1)  # JSON is YAML
    os.chmod(os.path.join(d, "kubeconfig"), 0o600)
    with open(os.path.join(d, "pid"), "w") as f:
        f.write(str(os.getpid()))
    tmp = os.path.join(d, "ready.json.tmp")
    with open(tmp, "w") as f:
        json.dump({"url": url, "port": port, "ca": ca, "token": token,
                   "client_cert": os.path.join(d, "client.crt") if tls else "",
                   "client_key": os.path.join(d, "client.key") if tls else ""}, f)
    os.rename(tmp, os.path.join(d, "ready.json"))
    print("standin: serving on %s" % url, flush=True)

    def stop(*_):
        for name, proc in list(srv.controller.procs.items()):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
        os._exit(0)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    srv.serve_forever()


def ctl(d, action, arg=None):
    info = json.load(open(os.path.join(d, "ready.json")))
    ctx = None
    if info["ca"]:
        ctx = ssl.create_default_context(cafile=info["ca"])
    data = (arg or "{}").encode()
    req = urllib.request.Request(info["url"] + "/_standin/" + action, data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, context=ctx, timeout=90) as r:
        sys.stdout.write(r.read().decode() + "\n")


def main(argv):
    if len(argv) >= 3 and argv[1] == "serve":
        args = argv[3:]
        opts = {"tls": "--no-tls" not in args, "token": None, "bookmark_interval": 1.0, "start_delay": 0.1}
        if "--die-with-parent" in args:
            die_with_parent()
        for i, a in enumerate(args):
            if a == "--token":
                opts["token"] = args[i + 1]
            if a == "--bookmark-interval":
                opts["bookmark_interval"] = float(args[i + 1])
            if a == "--start-delay":
                opts["start_delay"] = float(args[i + 1])
        serve(argv[2], **opts)
    elif len(argv) >= 3 and argv[1] == "start":
        d = argv[2]
        os.makedirs(d, exist_ok=True)
        for stale in ("ready.json", "pid"):
            try:
                os.remove(os.path.join(d, stale))
            except OSError:
                pass
        log = open(os.path.join(d, "standin.log"), "ab")
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve"] + argv[2:],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        deadline = time.time() + 60
        while not os.path.exists(os.path.join(d, "ready.json")):
            if proc.poll() is not None or time.time() > deadline:
                sys.stderr.write("standin: did not start; see %s\n" % os.path.join(d, "standin.log"))
                return 1
            time.sleep(0.05)
        info = json.load(open(os.path.join(d, "ready.json")))
        print("standin: serving on %s; kubeconfig %s" % (info["url"], os.path.join(d, "kubeconfig")))
    elif len(argv) >= 4 and argv[1] == "ctl":
        ctl(argv[2], argv[3], argv[4] if len(argv) > 4 else None)
    elif len(argv) == 3 and argv[1] == "stop":
        try:
            pid = int(open(os.path.join(argv[2], "pid")).read())
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError):
            pass
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
