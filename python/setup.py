"""pip install ./python (from the source tree, offline):

    python3 -m venv --system-site-packages V
    V/bin/pip install --no-build-isolation --no-index ./python

The extension is the engine: it is built by the project's CMake build (the directory in
$TJOB_BUILD_DIR, else build/ beside this folder, configured here when it is not yet), and the package
is what that build puts together in <build>/python/tjob.
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("TJOB_SOURCE_DIR") or os.path.dirname(HERE)


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        for line in f:
            if line.startswith("project(tjob VERSION"):
                return line.split("VERSION")[1].split()[0]
    return "0"


class cmake_build_ext(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("TJOB_BUILD_DIR") or os.path.join(ROOT, "build")
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                            "-DPython_EXECUTABLE=" + sys.executable], check=True)
        subprocess.run(["cmake", "--build", build, "--target", "_tjob", "tjob_python_package"], check=True)
        built = os.path.join(build, "python", "tjob")
        so = [f for f in os.listdir(built) if f.startswith("_tjob") and f.endswith(".so")]
        if not so:
            raise RuntimeError("the CMake build made no _tjob extension in " + built)
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(built, so[0]), target)


setup(
    name="tjob",
    version=version(),
    description="Kubeflow Trainer's TrainerClient on tjob's engine",
    packages=["tjob"],
    ext_modules=[Extension("tjob._tjob", sources=[])],
    cmdclass={"build_ext": cmake_build_ext},
    python_requires=">=3.9",
    zip_safe=False,
)
