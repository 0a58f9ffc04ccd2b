"""python.wheel: the wheel built from the cmake build (sender/python/setup.py
with $WSTREAM_BUILD_DIR) is tagged for this platform, carries the build's
libwstream_sender.so and libwstream_receiver.so byte for byte, and once
installed in a directory of its own imports with no $WSTREAM_LIB and
loads those copies, not the build's. A $WSTREAM_BUILD_DIR without the
libraries fails the build, naming what is missing.

Built from a copy of sender/python, so pip's in-tree build leaves the
source tree as it was; offline (--no-index, --no-build-isolation: Debian's
python3-setuptools and python3-wheel)."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import unittest
import zipfile

PACKAGE_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                           "..", "sender", "python")
LIB_FILES = ("libwstream_sender.so", "libwstream_receiver.so")

# Run in the installed copy: where each library came from, by ctypes and
# by the process's own mappings.
CHILD = r"""
import json, wstream
from wstream import _lib, _receiver_lib
sender, receiver = _lib.load()._name, _receiver_lib.load()._name
maps = sorted({line.split()[-1] for line in open("/proc/self/maps")
               if "libwstream_" in line})
print(json.dumps({"package": wstream.__file__,
                  "version": wstream.__version__,
                  "sender": sender, "receiver": receiver,
                  "maps": maps}))
"""


def _clean_env():
    """This environment less every way to the package or the libraries
    other than the wheel (the ctest environment sets them all)."""
    env = dict(os.environ)
    for name in ("WSTREAM_LIB", "WSTREAM_RECEIVER_LIB", "PYTHONPATH",
                 "WSTREAM_BUILD_DIR", "LD_LIBRARY_PATH"):
        env.pop(name, None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


class WheelTest(unittest.TestCase):
    def setUp(self):
        self.build_dir = os.environ["WSTREAM_BUILD_DIR"]
        self.tmp = tempfile.mkdtemp(prefix="wst-wheel-")
        self.addCleanup(shutil.rmtree, self.tmp)
        self.src = os.path.join(self.tmp, "src")
        shutil.copytree(PACKAGE_SRC, self.src,
                        ignore=shutil.ignore_patterns(
                            "build", "dist", "*.egg-info", "__pycache__",
                            "*.so"))

    def _pip_wheel(self, build_dir):
        out = os.path.join(self.tmp, "dist")
        env = _clean_env()
        env["WSTREAM_BUILD_DIR"] = build_dir
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps",
             "--no-build-isolation", "--no-index", "--no-cache-dir",
             "-w", out, self.src],
            env=env, cwd=self.tmp, capture_output=True, text=True)
        return proc, out

    def test_wheel_carries_and_loads_the_libraries(self):
        proc, out = self._pip_wheel(self.build_dir)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        wheels = os.listdir(out)
        self.assertEqual(len(wheels), 1, wheels)
        wheel = os.path.join(out, wheels[0])

        platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
        version = os.environ["WSTREAM_PROJECT_VERSION"]
        self.assertEqual(wheels[0],
                         "wstream-%s-py3-none-%s.whl" % (version, platform))
        self.assertFalse(wheels[0].endswith("-none-any.whl"))

        with zipfile.ZipFile(wheel) as z:
            meta = z.read("wstream-%s.dist-info/WHEEL" % version).decode()
            self.assertIn("Root-Is-Purelib: false", meta)
            self.assertIn("Tag: py3-none-%s" % platform, meta)
            for name in LIB_FILES:
                with open(os.path.join(self.build_dir, "lib", name),
                          "rb") as f:
                    built = f.read()
                self.assertEqual(z.read("wstream/" + name), built, name)

        site = os.path.join(self.tmp, "site")
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps",
             "--no-index", "--no-cache-dir", "--target", site, wheel],
            env=_clean_env(), cwd=self.tmp, capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)

        env = _clean_env()
        env["PYTHONPATH"] = site
        proc = subprocess.run([sys.executable, "-c", CHILD], env=env,
                              cwd=self.tmp, capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        got = json.loads(proc.stdout)
        package_dir = os.path.join(site, "wstream")
        self.assertEqual(got["package"],
                         os.path.join(package_dir, "__init__.py"))
        self.assertEqual(got["version"], version)
        self.assertEqual(got["sender"],
                         os.path.join(package_dir, LIB_FILES[0]))
        self.assertEqual(got["receiver"],
                         os.path.join(package_dir, LIB_FILES[1]))
        self.assertEqual(got["maps"],
                         sorted(os.path.join(package_dir, f)
                                for f in LIB_FILES))

    def test_build_dir_without_libraries_fails(self):
        empty = os.path.join(self.tmp, "empty-build")
        os.makedirs(os.path.join(empty, "lib"))
        proc, out = self._pip_wheel(empty)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("WSTREAM_BUILD_DIR=%s lacks" % empty,
                      proc.stdout + proc.stderr)
        self.assertIn(os.path.join(empty, "lib", LIB_FILES[0]),
                      proc.stdout + proc.stderr)
        self.assertFalse(os.path.exists(out) and os.listdir(out))


if __name__ == "__main__":
    unittest.main()
