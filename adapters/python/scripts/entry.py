import importlib.util, json, os, re, subprocess, sys, tempfile
arg = sys.argv[1]
if arg.startswith("{"):
    plan = json.loads(arg)
else:
    with open(arg, encoding="utf-8") as f:
        plan = json.load(f)
work = tempfile.mkdtemp(prefix="tjob-")
script = plan.get("script")
if plan.get("files") is not None:
    for name, text in plan["files"].items():
        with open(os.path.join(work, name), "w", encoding="utf-8") as f:
            f.write(text)
    script = os.path.join(work, plan["run"])
packages = plan.get("packages") or []
if packages:
    base = [sys.executable, "-m", "pip"] + plan["pip_args"]
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_BREAK_SYSTEM_PACKAGES="1")
    env.update(plan.get("pip_env") or {})  # the index URLs: not in pip's arguments, which ps shows
    log_path = os.path.join(work, "pip_install.log")
    where = None
    with open(log_path, "wb") as log:
        if subprocess.call(base + ["--user"] + packages, stdout=log, stderr=subprocess.STDOUT, env=env) == 0:
            where = "user"
        elif subprocess.call(base + packages, stdout=log, stderr=subprocess.STDOUT, env=env) == 0:
            where = "system-wide"
    if where is None:
        print("ERROR: Failed to install Python packages: " + " ".join(packages), file=sys.stderr)
        with open(log_path, encoding="utf-8", errors="replace") as f:
            sys.stderr.write(f.read())
        sys.exit(1)
    print("Successfully installed Python packages (%s): %s" % (where, " ".join(packages)), flush=True)
if plan.get("torch") and importlib.util.find_spec("torch") is not None:
    defaults = plan.get("env_defaults") or {}
    def value(m):
        name = m.group(1)
        v = os.environ.get(name, "")
        if not v or (name == "PET_NPROC_PER_NODE" and not v.isdigit()):
            v = str(defaults.get(name, ""))
        return v
    flags = [re.sub(r"\{(PET_[A-Z_]+)\}", value, a) for a in plan["torchrun_args"]]
    argv = [sys.executable, "-m", "torch.distributed.run"] + flags + [script]
else:
    argv = [sys.executable, script]
argv += plan.get("args") or []
# Every Python process of the job prints whole lines (line_hook_module), then
# runs the sitecustomize it would have run without this one.
site = os.path.join(work, "_tjob_site")
os.makedirs(site, exist_ok=True)
for name, text in (plan.get("site_files") or {}).items():  # modules the job imports (tjob.report)
    path = os.path.join(site, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
with open(os.path.join(site, "sitecustomize.py"), "w", encoding="utf-8") as f:
    f.write(plan["line_hook"] + """
import importlib.machinery, importlib.util, os as _os
_here = _os.path.dirname(_os.path.abspath(__file__))
_path = [p for p in sys.path if _os.path.abspath(p or _os.curdir) != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _path)
if _spec is not None and _spec.loader is not None:
    _next = importlib.util.module_from_spec(_spec)
    sys.modules["sitecustomize"] = _next
    _spec.loader.exec_module(_next)
""")
paths = [site] + (plan.get("python_path") or []) + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
os.environ["PYTHONPATH"] = os.pathsep.join(paths)
sys.stdout.flush()
os.execv(argv[0], argv)
