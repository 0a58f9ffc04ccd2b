"""Builds the wstream wheel with libwstream_sender.so and
libwstream_receiver.so inside, from a cmake build of this repository.

    WSTREAM_BUILD_DIR=$PWD/build /usr/bin/python3 -m pip wheel \
        --no-deps --no-build-isolation --no-index -w dist sender/python

takes both libraries from $WSTREAM_BUILD_DIR/lib (cmake's build/lib) and
puts them in the package directory, where wstream/_lib.py looks after
$WSTREAM_LIB. The libraries are machine code for this host, so such a
wheel is tagged py3-none-<platform> (e.g. linux_x86_64), not any: the
Python is plain Python (ctypes), for every CPython 3 of that platform.
Without $WSTREAM_BUILD_DIR, libraries already copied into
sender/python/wstream/ are carried the same way; with neither, the wheel
carries none, stays py3-none-any and finds them at run time
($WSTREAM_LIB, ld.so's path). Everything else is in pyproject.toml.
"""
import os
import shutil
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from wheel.bdist_wheel import bdist_wheel

LIB_FILES = ("libwstream_sender.so", "libwstream_receiver.so")
HERE = os.path.dirname(os.path.abspath(__file__))


def _carried_libraries():
    """The library paths to put in the package: both from
    $WSTREAM_BUILD_DIR/lib when it is set (either missing is an error, not
    a wheel without it), else both from the source package directory when
    both are there, else none."""
    build_dir = os.environ.get("WSTREAM_BUILD_DIR")
    if build_dir:
        paths = [os.path.join(build_dir, "lib", f) for f in LIB_FILES]
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing:
            sys.exit("wstream: WSTREAM_BUILD_DIR=%s lacks %s; build the "
                     "cmake targets wstream_sender and wstream_receiver "
                     "there first" % (build_dir, ", ".join(missing)))
        return paths
    paths = [os.path.join(HERE, "wstream", f) for f in LIB_FILES]
    if all(os.path.isfile(p) for p in paths):
        return paths
    return []


CARRIED = _carried_libraries()


class BuildPy(build_py):
    """Copies the carried libraries into the built package, and removes
    any a previous build left there, so a wheel carries exactly CARRIED."""

    def run(self):
        super().run()
        package_dir = os.path.join(self.build_lib, "wstream")
        for name in LIB_FILES:
            stale = os.path.join(package_dir, name)
            if os.path.lexists(stale):
                os.remove(stale)
        for path in CARRIED:
            # copyfile follows cmake's lib*.so -> lib*.so.X.Y.Z link: the
            # package holds the file itself under the name ctypes loads.
            shutil.copyfile(path,
                            os.path.join(package_dir, os.path.basename(path)))


class CarryingDistribution(Distribution):
    """Not pure when it carries the libraries: built into the platform's
    build/lib.<platform> and installed as platlib, the wheel's root."""

    def has_ext_modules(self):
        return bool(CARRIED)


class BdistWheel(bdist_wheel):
    """py3-none-<platform> when the wheel carries the libraries: the
    platform from them, no Python ABI (ctypes, no extension module)."""

    def get_tag(self):
        tag = super().get_tag()
        if CARRIED:
            return ("py3", "none", tag[2])
        return tag


setup(distclass=CarryingDistribution,
      cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
