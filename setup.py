"""Builds the extension kvshrink._kvshrink with CMake for `pip install --no-build-isolation .`.

The CMake build directory is build-pip/ in the checkout (KVS_PIP_BUILD_DIR to change it; ccache is
used when installed), configured for the Python running pip, with tests and benchmarks off.
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.path.abspath(os.environ.get("KVS_PIP_BUILD_DIR", os.path.join(ROOT, "build-pip")))
        cmd = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", f"-DPython_EXECUTABLE={sys.executable}",
               "-DKVS_BUILD_TESTS=OFF", "-DKVS_BUILD_BENCH=OFF", "-DKVS_BUILD_PYTHON=ON"]
        env = dict(os.environ)
        if shutil.which("ninja"):
            cmd += ["-G", "Ninja"]
        if shutil.which("ccache"):
            cmd += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
            env.setdefault("CCACHE_BASEDIR", ROOT)
            env.setdefault("CCACHE_NOHASHDIR", "1")
        subprocess.check_call(cmd, env=env)
        jobs = os.environ.get("KVS_PIP_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", build, "--target", "_kvshrink", "-j", jobs], env=env)
        built = [f for f in os.listdir(os.path.join(build, "python", "kvshrink")) if f.startswith("_kvshrink") and f.endswith(".so")]
        if not built:
            raise RuntimeError(f"the CMake build in {build} made no _kvshrink module (is pybind11-dev installed?)")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(os.path.join(build, "python", "kvshrink", built[0]), dest)


# setuptools' own outputs go to build-pip/ too (not the project's build/, not the source tree).
PIP_DIR = os.path.join(ROOT, "build-pip")
os.makedirs(PIP_DIR, exist_ok=True)

setup(
    options={"build": {"build_base": os.path.join(PIP_DIR, "setuptools")}, "egg_info": {"egg_base": PIP_DIR}},
    packages=["kvshrink"],
    package_dir={"": "python"},
    ext_modules=[CMakeExtension("kvshrink._kvshrink")],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
