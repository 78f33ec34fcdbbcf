"""Builds a PEP 503 package index of tiny wheels, offline, for the tests.

    python3 make_index.py DIR [TINYJOB_VERSION...]

writes DIR/packages/*.whl and DIR/simple/<name>/index.html for:
  tinydep 0.1.0            (module tinydep, VERSION = "0.1.0")
  tinyjob 1.2.0            (module tinyjob, needs tinydep>=0.1; tinyjob.hello() says hi)
and a tinyjob wheel of each further version given. Run again on the same DIR
with another version to publish it to an index already being served.
The wheels are written by hand (a wheel is a zip with METADATA, WHEEL and
RECORD), so neither setuptools nor the network is needed.
"""
import base64
import hashlib
import os
import sys
import zipfile


def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel(out_dir, name, version, files, requires=()):
    dist = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: tjob test package\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    entries = dict(files)
    entries[f"{dist}/METADATA"] = meta
    entries[f"{dist}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: tjob-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(f"{path},{digest(text.encode())},{len(text.encode())}\n" for path, text in entries.items())
    record += f"{dist}/RECORD,,\n"
    entries[f"{dist}/RECORD"] = record
    path = os.path.join(out_dir, f"{name}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for p, text in entries.items():
            z.writestr(p, text)
    return path


def tinyjob(packages, version):
    return wheel(packages, "tinyjob", version,
                 {"tinyjob/__init__.py": f'import tinydep\nVERSION = "{version}"\n\n'
                                         'def hello():\n    return "hi from tinyjob " + VERSION + '
                                         '" on tinydep " + tinydep.VERSION\n'},
                 requires=["tinydep>=0.1"])


def main(root, more_versions):
    packages = os.path.join(root, "packages")
    os.makedirs(packages, exist_ok=True)
    built = {
        "tinydep": [wheel(packages, "tinydep", "0.1.0", {"tinydep/__init__.py": 'VERSION = "0.1.0"\n'})],
        "tinyjob": [tinyjob(packages, v) for v in ["1.2.0", *more_versions]],
    }
    simple = os.path.join(root, "simple")
    os.makedirs(simple, exist_ok=True)
    with open(os.path.join(simple, "index.html"), "w") as f:
        f.write("<!DOCTYPE html><html><body>\n")
        for name in built:
            f.write(f'<a href="{name}/">{name}</a>\n')
        f.write("</body></html>\n")
    for name, paths in built.items():
        os.makedirs(os.path.join(simple, name), exist_ok=True)
        links = ""
        for path in paths:
            with open(path, "rb") as w:
                sha = hashlib.sha256(w.read()).hexdigest()
            fname = os.path.basename(path)
            links += f'<a href="../../packages/{fname}#sha256={sha}">{fname}</a>\n'
        # Written beside, then renamed: a pip reading the page meanwhile sees the old or the new one.
        page = os.path.join(simple, name, "index.html")
        with open(page + ".new", "w") as f:
            f.write(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
        os.replace(page + ".new", page)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
