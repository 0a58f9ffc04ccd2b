"""python.args: every argument is checked in Python, with a clear
TypeError or ValueError, before it reaches C; and the package's copies of
the C tables (statuses, dtypes, struct fields) match the C side."""
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import harness

harness.need_torch()
import torch  # noqa: E402

import wstream  # noqa: E402
from wstream import _lib, _tensors, errors  # noqa: E402

INCLUDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                       "..", "include", "wstream")
NOWHERE = "127.0.0.1:9"  # never connected: these tests never push


class SenderArgsTest(unittest.TestCase):
    def test_constructor(self):
        bad = [
            (dict(receivers=[]), ValueError, "at least one"),
            (dict(receivers=["nohost"]), ValueError, "host:port"),
            (dict(receivers=["h:0"]), ValueError, "1..65535"),
            (dict(receivers=["h:70000"]), ValueError, "1..65535"),
            (dict(receivers=[7070]), TypeError, "'host:port' str"),
            (dict(receivers=None), TypeError, "list of"),
            (dict(rank=2, world_size=2), ValueError, "rank"),
            (dict(rank=-1), ValueError, "rank"),
            (dict(world_size=0), ValueError, "world_size"),
            (dict(rank=True), TypeError, "bool"),
            (dict(timeout=0), ValueError, "timeout"),
            (dict(timeout=float("nan")), ValueError, "timeout"),
            (dict(timeout="5"), TypeError, "timeout"),
            (dict(mover="fast"), ValueError, "auto, put, am"),
            (dict(log_level="loud"), ValueError, "log_level"),
            (dict(log_level=9), ValueError, "log_level"),
            (dict(device_path="pcie"), ValueError, "device_path"),
            (dict(lanes=9), ValueError, "lanes"),
            (dict(lanes=-1), ValueError, "lanes"),
            (dict(lane_devices=7), TypeError, "lane_devices"),
        ]
        for kw, exc, words in bad:
            kw = dict({"receivers": [NOWHERE]}, **kw)
            with self.subTest(kw=kw):
                with self.assertRaises(exc) as cm:
                    wstream.Sender(**kw)
                self.assertIn(words, str(cm.exception))
        # lane_devices is checked by the C library, which says why
        with self.assertRaises(wstream.WstreamError) as cm:
            wstream.Sender(receivers=[NOWHERE], lane_devices="eth0,,eth1")
        self.assertIn("lane devices", str(cm.exception))

    def test_register(self):
        t = torch.zeros(4, 6)
        bad = [
            (("x", t.t()), {}, ValueError, "not contiguous"),
            (("x", t[:, 1:]), {}, ValueError, "not contiguous"),
            (("x", t.to(torch.bool)), {}, TypeError, "dtype torch.bool"),
            (("x", t.to(torch.complex64)), {}, TypeError, "complex64"),
            (("x", [1.0, 2.0]), {}, TypeError, "torch.Tensor"),
            (("", t), {}, ValueError, "tensor name"),
            (("x" * 256, t), {}, ValueError, "255 bytes"),
            (("a\0b", t), {}, ValueError, "NUL"),
            ((b"x", t), {}, TypeError, "str"),
            (("x", torch.tensor(1.0)), {}, ValueError, "shape=(1,)"),
            (("x", torch.zeros([1] * 9)), {}, ValueError, "1..8"),
            (("x", t), dict(shape=(4, 0)), ValueError, "out of range"),
            (("x", t), dict(shape=(4, 6.0)), TypeError, "integer"),
            (("x", t), dict(shape=(8, 6), start=(0, 0), stop=(4, 7)),
             ValueError, "not inside shape"),
            (("x", t), dict(shape=(8, 6), start=(5, 0), stop=(9, 6)),
             ValueError, "not inside shape"),
            (("x", t), dict(shape=(8, 6), start=(0,), stop=(4, 6)),
             ValueError, "1 dims"),
            (("x", t), dict(shape=(8, 6), start=(2, 0), stop=(5, 6)),
             ValueError, "holds [3, 6]"),
            (("x", t), dict(shape=(6, 4)), ValueError, "[4, 6]"),
            (("x", t), dict(shape=(8, 6), start=0, stop=(4, 6)),
             TypeError, "both"),
            (("x", t), dict(shape=(8, 6), start=0, stop=25),
             ValueError, "24 elements"),
            (("x", t), dict(shape=(8, 6), start=40, stop=64),
             ValueError, "not inside"),
        ]
        with wstream.Sender([NOWHERE]) as s:
            for args, kw, exc, words in bad:
                with self.subTest(args=args[0][:8], kw=kw, words=words):
                    with self.assertRaises(exc) as cm:
                        s.register(*args, **kw)
                    self.assertIn(words, str(cm.exception))
            # Nothing of the above reached C: the same name registers now
            # (C would refuse a slice of another shape, or one overlapping
            # one that got through).
            self.assertEqual(s.tensors, {})
            s.register("x", t)
            s.register("half", t, shape=(8, 6), start=(4, 0), stop=(8, 6))
            s.register("flat", t.reshape(-1), shape=(8, 6), start=5, stop=29)
            s.register("scalar", torch.tensor(2.0), shape=(1,))
            s.register("empty", torch.zeros(0, 6), shape=(8, 6),
                       start=(3, 0), stop=(3, 6))
            with self.assertRaisesRegex(
                    ValueError, r"tensor 'x': slice \[0:4, 0:6\] overlaps "
                    r"slice \[0:4, 0:6\] registered before it"):
                s.register("x", t)
            self.assertEqual(sorted(s.tensors),
                             ["empty", "flat", "half", "scalar", "x"])

    def test_push_wait_close(self):
        s = wstream.Sender([NOWHERE])
        for version, exc in ((0, ValueError), (-1, ValueError),
                             (1 << 64, ValueError), (1.5, TypeError),
                             ("1", TypeError)):
            with self.subTest(version=version):
                with self.assertRaises(exc):
                    s.push(version)
        with self.assertRaisesRegex(TypeError, "torch.cuda.Event"):
            s.push(1, cuda_event="now")
        with self.assertRaisesRegex(ValueError, "record"):
            s.push(1, cuda_event=0)
        # A label breaking the rule is refused before C (which checks it
        # too: see LabelReachesCTest).
        for label, exc, words in (
                (7, TypeError, "label must be a str"),
                (b"step-1", TypeError, "not bytes"),
                ("step 1", ValueError, "character 4 (' ')"),
                ("x" * 64, ValueError, "64 characters, at most 63"),
                ("step\n1", ValueError, "character 4 ('\\n')"),
                ("caf\u00e9", ValueError, "character 3"),
                ("a\0", ValueError, "character 1")):
            with self.subTest(label=label):
                with self.assertRaises(exc) as cm:
                    s.push(1, label=label)
                self.assertIn(words, str(cm.exception))
        self.assertEqual(s.version, 0)
        with self.assertRaisesRegex(ValueError, "timeout"):
            s.wait(timeout=-1)
        s.close()
        s.close()  # idempotent
        self.assertTrue(s.closed)
        with self.assertRaisesRegex(ValueError, "closed"):
            s.register("x", torch.zeros(3))
        with self.assertRaisesRegex(ValueError, "closed"):
            s.push(1)

    def test_register_all(self):
        with wstream.Sender([NOWHERE]) as s:
            with self.assertRaisesRegex(TypeError, "dict"):
                s.register_all([torch.zeros(3)])
            bn = torch.nn.BatchNorm1d(3)  # has a 0-dim num_batches_tracked
            s.register_all(bn.state_dict())
            self.assertEqual(sorted(s.tensors), sorted(bn.state_dict()))


class LabelReachesCTest(unittest.TestCase):
    """The C library checks a label itself (other callers than this
    package): WST_ERR_INVALID naming the byte, and nothing is pushed."""

    def test_bad_label_refused_by_c(self):
        lib = _lib.load()
        s = wstream.Sender([NOWHERE])
        try:
            for label, words in ((b"two words", b"byte 3 is 0x20"),
                                 (b"y" * 64, b"64 bytes, at most 63"),
                                 (b"tab\tx", b"byte 3 is 0x09")):
                p = _lib.PushParams(field_mask=_lib.PUSH_LABEL, label=label)
                with self.subTest(label=label):
                    self.assertEqual(lib.wst_sender_push_with(
                        s._handle, 1, ctypes.byref(p)), -2)
                    self.assertIn(words, lib.wst_sender_last_error(s._handle))
            self.assertEqual(s.version, 0)
            buf = ctypes.create_string_buffer(_lib.LABEL_MAX)
            self.assertEqual(lib.wst_sender_committed_label(
                s._handle, 1, buf, len(buf)), -2)  # one receiver: 0 only
            self.assertEqual(lib.wst_sender_committed_label(
                s._handle, 0, buf, len(buf)), 0)
            self.assertEqual(buf.value, b"")
        finally:
            s.close()


class LibraryLookupTest(unittest.TestCase):
    """$WSTREAM_LIB, else next to the package, else the loader's path."""

    def test_next_to_the_package(self):
        lib = os.environ["WSTREAM_LIB"]
        pkg = os.path.dirname(os.path.dirname(os.path.abspath(
            wstream.__file__)))
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(os.path.join(pkg, "wstream"),
                            os.path.join(tmp, "wstream"))
            copy = os.path.join(tmp, "wstream", _lib.LIB_FILE)
            shutil.copy(lib, copy)
            env = dict(os.environ, PYTHONPATH=tmp)
            del env["WSTREAM_LIB"]
            r = subprocess.run([sys.executable, "-c", "import wstream._lib "
                                "as l; print(l.load()._name)"], env=env,
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.strip(), copy)

    def test_wrong_env_path_is_an_error(self):
        env = dict(os.environ, WSTREAM_LIB="/nonexistent/libwstream.so")
        r = subprocess.run([sys.executable, "-c", "import wstream; "
                            "wstream.Sender('127.0.0.1:9')"], env=env,
                           capture_output=True, text=True, timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("WSTREAM_LIB is set: /nonexistent/libwstream.so",
                      r.stderr)


class TablesMatchCTest(unittest.TestCase):
    """The Python copies of status.h and sender.h cannot drift."""

    def test_statuses(self):
        lib = _lib.load()
        table = {v: (n, t) for v, n, t in errors.STATUSES}
        for value in range(-200, 8):
            name = lib.wst_status_name(value)
            with self.subTest(value=value):
                if name is None:
                    self.assertNotIn(value, table)
                    continue
                self.assertEqual(table[value], (
                    name.decode(), lib.wst_status_string(value).decode()))
                if value < 0:
                    cls = errors.error(value, "m")
                    self.assertIsInstance(cls, wstream.WstreamError)
                    self.assertIs(getattr(wstream, type(cls).__name__),
                                  type(cls))

    def test_dtypes(self):
        with open(os.path.join(INCLUDE, "status.h")) as f:
            text = f.read()
        found = {m[2]: (int(m[1]), int(m[3])) for m in re.findall(
            r'X\((WST_DTYPE_\w+), (\d+), "(\w+)", (\d+)\)', text)}
        self.assertEqual(found, _tensors.DTYPES)

    def test_structs(self):
        with open(os.path.join(INCLUDE, "sender.h")) as f:
            text = f.read()
        for struct, cls in (("wst_sender_params", _lib.SenderParams),
                            ("wst_shard", _lib.Shard),
                            ("wst_push_params", _lib.PushParams)):
            body = re.search(r"struct %s \{(.*?)\n\};" % struct, text,
                             re.S).group(1)
            body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
            fields = re.findall(r"(\w+)(?:\[\w*\])?;", body)
            with self.subTest(struct=struct):
                self.assertEqual(fields, [f[0] for f in cls._fields_])
                self.assertEqual(ctypes.sizeof(cls) % 8, 0)


if __name__ == "__main__":
    harness.main()
