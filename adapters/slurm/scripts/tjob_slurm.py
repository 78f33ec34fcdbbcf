# Put here by tjob (adapters/slurm/scripts/tjob_slurm.py): a Slurm job's setup.
import json, os, random, socket, subprocess, sys


def port():
    # Drawn below the kernel's usual ephemeral range, so no connect() nearby
    # takes it between now and torchrun's bind.
    for _ in range(500):
        p = random.randint(20000, 32000)
        s = socket.socket()
        try:
            s.bind(("", p))
        except OSError:
            continue
        finally:
            s.close()
        print(p)
        return
    sys.exit("tjob: no free port for the rendezvous")


def setup(path):
    with open(path, encoding="utf-8") as f:
        s = json.load(f)
    venv = s["venv"]
    argv = [sys.executable, "-m", "venv", "--without-pip"]
    if s.get("system_site_packages"):
        argv.append("--system-site-packages")
    print("tjob: creating a virtual environment with %s in %s" % (sys.executable, venv), flush=True)
    if subprocess.call(argv + [venv]) != 0:
        sys.exit("tjob: cannot create the virtual environment " + venv)
    packages = s.get("packages") or []
    if not packages:
        return
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.update(s.get("pip_env") or {})  # the index URLs: not in pip's arguments, which ps shows
    print("tjob: installing %d package(s): %s" % (len(packages), " ".join(packages)), flush=True)
    rc = subprocess.call([os.path.join(venv, "bin", "python"), "-c", s["bootstrap"]] + s["pip_args"], env=env)
    if rc != 0:
        sys.exit("tjob: pip install failed (exit code %d)" % rc)


if sys.argv[1] == "port":
    port()
else:
    setup(sys.argv[2])
