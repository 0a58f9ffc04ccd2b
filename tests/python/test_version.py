"""python.version: the package's version is the project's, the one
CMakeLists.txt writes (passed as $WSTREAM_PROJECT_VERSION): wstream's
__version__ and pyproject.toml's version both equal it."""
import os
import re
import unittest

import wstream

PYPROJECT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                         "..", "sender", "python", "pyproject.toml")


class VersionTest(unittest.TestCase):
    def test_package_version_is_cmake_version(self):
        want = os.environ["WSTREAM_PROJECT_VERSION"]
        self.assertRegex(want, r"^\d+\.\d+\.\d+$")
        self.assertEqual(wstream.__version__, want)

    def test_pyproject_version_is_cmake_version(self):
        with open(PYPROJECT) as f:
            found = re.findall(r'^version\s*=\s*"([^"]*)"', f.read(), re.M)
        self.assertEqual(found, [os.environ["WSTREAM_PROJECT_VERSION"]])


if __name__ == "__main__":
    unittest.main()
