"""python.receiver_args: wstream.Receiver checks every argument in Python,
with a clear TypeError or ValueError, before it reaches C, and passes on
what only C can judge with C's message; its ctypes mirror of receiver.h
(wstream/_receiver_lib.py) matches the C structs field for field, offset
for offset, and its defaults are the C library's. No torch needed."""
import ctypes
import inspect
import mmap
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import harness

import wstream  # noqa: E402
from wstream import _receiver_lib as rl  # noqa: E402

INCLUDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                       "..", "include", "wstream")


def receiver(**kw):
    kw = dict(dict(host="127.0.0.1", log_level="error"), **kw)
    return wstream.Receiver(**kw)


class ConstructorTest(unittest.TestCase):
    def setUp(self):
        harness.secret_file()  # the default secret_file

    def test_refused_in_python(self):
        bad = [
            (dict(host=7), TypeError, "host must be a str"),
            (dict(host=""), ValueError, "must not be empty"),
            (dict(host="a b"), ValueError, "without spaces"),
            (dict(host="h" * 256), ValueError, "at most 255"),
            (dict(port=-1), ValueError, "port"),
            (dict(port=65536), ValueError, "port"),
            (dict(port="7070"), TypeError, "port"),
            (dict(rank=True), TypeError, "bool"),
            (dict(rank=1 << 32), ValueError, "rank"),
            (dict(group="g" * 64), ValueError, "at most 63"),
            (dict(group="g", group_size=0), ValueError, "group_size"),
            (dict(group="g", group_size=2, group_member=2), ValueError,
             "group_member"),
            (dict(group_size=2), ValueError, "need a group name"),
            (dict(timeout=0), ValueError, "timeout"),
            (dict(timeout=float("inf")), ValueError, "timeout"),
            (dict(timeout="5"), TypeError, "timeout"),
            (dict(heartbeat=2.0, peer_timeout=2.0), ValueError,
             "longer than heartbeat"),
            (dict(mover="put"), ValueError, "auto, am"),
            (dict(verify=1), TypeError, "True or False"),
            (dict(verify_threads=65), ValueError, "verify_threads"),
            (dict(lanes=9), ValueError, "lanes"),
            (dict(lane_devices=7), TypeError, "lane_devices"),
            (dict(staging_slots=0), ValueError, "staging_slots"),
            (dict(staging_slots=65), ValueError, "staging_slots"),
            (dict(max_manifest_entries=(1 << 20) + 1), ValueError,
             "max_manifest_entries"),
            (dict(max_manifest_bytes=0), ValueError, "max_manifest_bytes"),
            (dict(max_unranked_peers=0), ValueError, "max_unranked_peers"),
            (dict(initial_committed_version=-1), ValueError,
             "initial_committed_version"),
            (dict(initial_unusable_reason="r" * 512), ValueError,
             "at most 511"),
            (dict(log_level="loud"), ValueError, "log_level"),
            (dict(log_name=""), ValueError, "log_name"),
            (dict(on_begin=5), TypeError, "on_begin must be callable"),
            (dict(on_unusable="stop"), TypeError, "on_unusable"),
            (dict(secret_file=None), ValueError, "insecure=True"),
            (dict(secret_file=""), ValueError, "insecure=True"),
            (dict(secret_file=7), TypeError, "secret_file"),
            (dict(secret_file="/x", insecure=True), ValueError,
             "exclude each other"),
            (dict(insecure="yes"), TypeError, "insecure"),
        ]
        for kw, exc, words in bad:
            with self.subTest(kw=kw):
                with self.assertRaises(exc) as cm:
                    receiver(**kw)
                self.assertIn(words, str(cm.exception))

    def test_refused_by_c_with_its_message(self):
        with self.assertRaises(wstream.InvalidError) as cm:
            receiver(lane_devices="eth0,,eth1")
        self.assertIn("lane devices", str(cm.exception))
        with tempfile.TemporaryDirectory() as d:
            loose = os.path.join(d, "secret")
            with open(loose, "wb") as f:
                f.write(os.urandom(32))
            os.chmod(loose, 0o644)
            with self.assertRaises(wstream.WstreamError) as cm:
                receiver(secret_file=loose)
            self.assertIn(loose, str(cm.exception))

    def test_accepted(self):
        with receiver() as r:  # secret from $WST_AUTH_SECRET_FILE
            self.assertIn("not started", repr(r))
        with receiver(insecure=True, group="engine-a", group_size=2,
                      group_member=1, lanes=2, initial_committed_version=7,
                      initial_unusable_reason="crashed mid-refit") as r:
            st = r.state()
            self.assertEqual((st["committed_version"], st["usable"],
                              st["reason"], st["lanes"]),
                             (7, False, "crashed mid-refit", 2))


class RegionWantTest(unittest.TestCase):
    def setUp(self):
        self.r = receiver(insecure=True)
        self.addCleanup(self.r.close)

    def test_regions(self):
        r = self.r
        host = ctypes.create_string_buffer(64)
        bad = [
            (("a", b"read-only"), ValueError, "read-only"),
            (("a", [0] * 8), TypeError, "writable buffer"),
            (("a", bytearray()), ValueError, "empty"),
            (("a", memoryview(bytearray(8))[::2]), ValueError,
             "not contiguous"),
            (("a", (1,)), ValueError, "tuple of 1"),
            (("a", (1, 2, 3, 4)), ValueError, "tuple of 4"),
            (("a", (0, 8)), ValueError, "address"),
            (("a", (ctypes.addressof(host), 0)), ValueError, "nbytes"),
            (("a", ((1 << 64) - 4, 8)), ValueError, "past 2**64"),
            (("a", (ctypes.addressof(host), 8, -1)), ValueError, "device"),
            (("a", (1.5, 8)), TypeError, "address"),
            (("", bytearray(8)), ValueError, "region name"),
            ((b"a", bytearray(8)), TypeError, "region name"),
            (("n" * 256, bytearray(8)), ValueError, "at most 255"),
        ]
        for a, exc, words in bad:
            with self.subTest(words=words):
                with self.assertRaises(exc) as cm:
                    r.add_region(*a)
                self.assertIn(words, str(cm.exception))
        self.assertEqual(r.regions, {})
        # Host memory declared as CUDA memory: C checks the pointer.
        with self.assertRaises(wstream.InvalidError) as cm:
            r.add_region("gpu", (ctypes.addressof(host), 64, 0))
        self.assertIn("declared cuda memory", str(cm.exception))
        self.assertEqual(r.regions, {})

        buffers = [bytearray(96), mmap.mmap(-1, 4096),
                   (ctypes.c_uint32 * 16)(),
                   memoryview(bytearray(24)).cast("B", (4, 6))]
        for i, buf in enumerate(buffers):
            self.assertEqual(r.add_region("r%d" % i, buf), i)
        self.assertEqual(r.add_region("raw", (ctypes.addressof(host), 64)),
                         4)
        with self.assertRaisesRegex(ValueError, "added already"):
            r.add_region("r0", bytearray(8))
        # Held while the receiver may write: no resize, no close.
        with self.assertRaises(BufferError):
            buffers[0].extend(b"x")
        with self.assertRaises(BufferError):
            buffers[1].close()
        r.close()
        buffers[0].extend(b"x")
        buffers[1].close()

    def test_wants(self):
        r = self.r
        r.add_region("a", bytearray(4 * 6 * 2))
        r.add_region("b", bytearray(100))
        w = ("model.layers.0.w", "bf16", (4, 6))
        bad = [
            ((b"x", "bf16", (4, 6), 0), {}, TypeError, "str"),
            (("", "bf16", (4, 6), 0), {}, ValueError, "tensor name"),
            (w[:1] + ("float32", (4, 6), 0), {}, ValueError, "bf16, f16"),
            (w[:1] + (3, (4, 6), 0), {}, TypeError, "dtype must be a str"),
            (w[:2] + ((), 0), {}, ValueError, "1..8"),
            (w[:2] + ((4, 0), 0), {}, ValueError, "out of range"),
            (w[:2] + ((4, 6.0), 0), {}, TypeError, "integer"),
            (w + (9,), {}, ValueError, "no region with id 9"),
            (w + ("c",), {}, ValueError, "no region named 'c'"),
            (w + (True,), {}, TypeError, "bool"),
            (w + (0,), dict(offset=2), ValueError, "past the end"),
            (w + (0,), dict(start=(0, 0), stop=(5, 6)), ValueError,
             "not inside"),
            (w + (0,), dict(start=(0,)), ValueError, "1 dims"),
            (w + (1,), dict(stop=(4, 2), row_pitch=5), ValueError,
             "multiple of the element size"),
            (w + (1,), dict(stop=(4, 2), row_pitch=2), ValueError,
             "at least a row"),
            (w + (1,), dict(stop=(4, 2), row_pitch=34), ValueError,
             "past the end"),
            (w + (0,), dict(ep_size=2), ValueError, "expert_grouped"),
            (w + (0,), dict(expert_grouped=1), TypeError, "True or False"),
            (w + (0,), dict(expert_grouped=True, ep_rank=2, ep_size=2),
             ValueError, "ep_rank"),
            (("model.norm", "f32", (6,), 0), dict(expert_grouped=True),
             ValueError, "2 or more dims"),
        ]
        for a, kw, exc, words in bad:
            with self.subTest(words=words):
                with self.assertRaises(exc) as cm:
                    r.add_want(*a, **kw)
                self.assertIn(words, str(cm.exception))
        r.add_want(*w, 0)
        # Two rows of 2 elements, 32 bytes apart, from byte 30: 30+32+4.
        r.add_want("model.layers.0.v", "bf16", (4, 6), "b", offset=30,
                   start=(1, 2), stop=(3, 4), row_pitch=32)
        r.add_want("model.layers.1.x", "u8", (9,), "b", start=(3,),
                   stop=(3,))  # an empty box takes no bytes

    def test_expert_layers(self):
        r = self.r
        # checkpoint loader, 4 experts of I=3, H=5, bf16: w13 [4, 6, 5] and
        # w2 [4, 5, 3], 240 and 120 bytes.
        live = bytearray(240 + 120)
        r.add_region("experts", live)
        ok = dict(layer=1, loader="checkpoint", dtype="bf16", n_experts=4,
                  hidden=5, inter=3, w13=("experts", 0), w2=(0, 240))
        bad = [
            (dict(layer=-1), ValueError, "layer"),
            (dict(loader=""), ValueError, "loader"),
            (dict(loader=None), TypeError, "loader"),
            (dict(dtype="bfloat16"), ValueError,
             "dtype must be one of bf16, f16, f32, f64, fp8_e4m3, fp8_e5m2, "
             "i8, u8, i32, i64, got 'bfloat16' (did you mean 'bf16'?)"),
            (dict(n_experts=0), ValueError, "n_experts"),
            (dict(hidden=0), ValueError, "hidden"),
            (dict(ep_rank=1), ValueError, "ep_rank"),
            (dict(ep_size=0), ValueError, "ep_size"),
            (dict(inter_tp_size=2, inter_tp_rank=2), ValueError,
             "inter_tp_rank"),
            (dict(expert_ids=[]), ValueError, "expert_ids"),
            (dict(expert_ids="0123"), TypeError, "expert_ids"),
            (dict(expert_ids=[0, -1]), ValueError, "expert_ids[1]"),
            (dict(w13=0), TypeError, "(region, offset) pair"),
            (dict(w2=("nowhere", 0)), ValueError, "no region named"),
            (dict(w2=(0, 360)), ValueError, "past the end"),
        ]
        for kw, exc, words in bad:
            with self.subTest(kw=kw):
                with self.assertRaises(exc) as cm:
                    r.add_expert_layer(**dict(ok, **kw))
                self.assertIn(words, str(cm.exception))
        # What only C knows: its loaders and their buffer sizes.
        with self.assertRaises(wstream.WstreamError) as cm:
            r.add_expert_layer(**dict(ok, loader="no-such-loader"))
        self.assertIn("no-such-loader", str(cm.exception))
        with self.assertRaises(wstream.WstreamError) as cm:
            r.add_expert_layer(**dict(ok, w2=(0, 241)))
        self.assertIn("w2", str(cm.exception))
        r.add_expert_layer(**ok)
        with self.assertRaisesRegex(ValueError, "layer 1 has its experts"):
            r.add_expert_layer(**ok)

    def test_lifecycle(self):
        r = self.r
        r.add_region("a", bytearray(16))
        r.add_want("model.layers.0.w", "f32", (4,), 0)
        port = r.start()
        self.assertTrue(0 < port < 65536)
        self.assertEqual(r.port, port)
        for call in (lambda: r.add_region("b", bytearray(8)),
                     lambda: r.add_want("model.layers.0.u", "f32", (4,), 0),
                     r.start):
            with self.assertRaisesRegex(ValueError, "before start"):
                call()
        for version, timeout, exc in ((0, 1, ValueError),
                                      (1 << 64, 1, ValueError),
                                      (1.0, 1, TypeError),
                                      (1, 0, ValueError),
                                      (1, -1, ValueError)):
            with self.subTest(version=version, timeout=timeout):
                with self.assertRaises(exc):
                    r.wait_committed(version, timeout)
        with self.assertRaises(wstream.TimedOutError) as cm:
            r.wait_committed(1, 0.3)
        self.assertIn("version 1 not committed within 0.3 s",
                      str(cm.exception))
        self.assertEqual(r.timeline(), [])
        # close() ends a wait in another thread, then frees the receiver.
        waited = []

        def wait():
            try:
                r.wait_committed(1, 30)
            except ValueError as e:
                waited.append(str(e))

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.3)
        start = time.monotonic()
        r.close()
        waiter.join(10)
        self.assertEqual(waited, ["the receiver was closed while waiting"])
        self.assertLess(time.monotonic() - start, 2)
        r.close()  # idempotent
        self.assertTrue(r.closed)
        for call in (r.state, r.timeline, lambda: r.wait_committed(1, 1)):
            with self.assertRaisesRegex(ValueError, "closed"):
                call()


class WithoutTorchTest(unittest.TestCase):
    def test_no_torch_imported(self):
        code = ("import sys, wstream\n"
                "with wstream.Receiver(host='127.0.0.1', insecure=True,\n"
                "                      log_level='error') as r:\n"
                "    r.add_region('a', bytearray(8))\n"
                "    r.add_want('model.norm', 'u8', (8,), 'a')\n"
                "    r.start()\n"
                "print('torch' in sys.modules)\n")
        out = subprocess.run([sys.executable, "-c", code],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "False")

    def test_wrong_env_path_is_an_error(self):
        env = dict(os.environ, WSTREAM_RECEIVER_LIB="/nonexistent/librx.so")
        out = subprocess.run([sys.executable, "-c", "import wstream; "
                              "wstream.Receiver(insecure=True)"], env=env,
                             capture_output=True, text=True, timeout=30)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("WSTREAM_RECEIVER_LIB is set: /nonexistent/librx.so",
                      out.stderr)


def header_fields(text, struct):
    """The field names of 'struct' in a header, in order."""
    body = re.search(r"struct %s \{(.*?)\n\};" % struct, text, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    names = []
    for stmt in body.split(";"):
        if stmt.strip():
            m = re.search(r"\(\*(\w+)\)", stmt) or \
                re.search(r"(\w+)\s*(?:\[[^\]]*\])*\s*$", stmt)
            names.append(m.group(1))
    return names


class MirrorMatchesCTest(unittest.TestCase):
    """_receiver_lib.py against the C compiler and receiver.h."""

    MIRRORS = (("wst_receiver_hooks", rl.Hooks),
               ("wst_receiver_params", rl.ReceiverParams),
               ("wst_region", rl.Region), ("wst_want_entry", rl.WantEntry),
               ("wst_expert_layer", rl.ExpertLayer),
               ("wst_layer_times", rl.LayerTimes),
               ("wst_receiver_state", rl.ReceiverState))

    @classmethod
    def setUpClass(cls):
        with open(os.path.join(INCLUDE, "receiver.h")) as f:
            cls.header = f.read()
        probe = os.environ["WSTREAM_RECEIVER_LAYOUT"]
        out = subprocess.run([probe], check=True, capture_output=True,
                             text=True).stdout
        cls.c = {}
        for line in out.splitlines():
            struct, field, offset, size = line.split()
            cls.c[(struct, field)] = (int(offset), int(size))

    def test_fields_in_header_order(self):
        for struct, cls in self.MIRRORS:
            with self.subTest(struct=struct):
                self.assertEqual([f[0] for f in cls._fields_],
                                 header_fields(self.header, struct))

    def test_offsets_and_sizes(self):
        for struct, cls in self.MIRRORS:
            self.assertEqual(ctypes.sizeof(cls), self.c[(struct, "-")][1],
                             "sizeof(struct %s)" % struct)
            for name, _ in cls._fields_:
                with self.subTest(field=struct + "." + name):
                    self.assertIn((struct, name), self.c,
                                  "receiver_layout.c does not print it")
                    field = getattr(cls, name)
                    self.assertEqual((field.offset, field.size),
                                     self.c[(struct, name)])

    def test_param_bits_and_lanes(self):
        body = re.search(r"enum wst_receiver_param_field \{(.*?)\};",
                         self.header, re.S).group(1)
        bits = dict(re.findall(r"WST_RECEIVER_(PARAM_\w+) = 1u << (\d+)",
                               body))
        self.assertEqual(len(bits), 17)
        for name, shift in bits.items():
            self.assertEqual(getattr(rl, name), 1 << int(shift), name)
        self.assertEqual(int(re.search(r"#define WST_RECEIVER_LANES_MAX (\d+)",
                                       self.header).group(1)), rl.LANES_MAX)

    def test_defaults_are_the_c_librarys(self):
        # The receiver's settings table, as the agent prints it.
        out = subprocess.run([harness.agent_binary(), "--print-config"],
                             check=True, capture_output=True, text=True,
                             env=dict(os.environ, WST_INSECURE="yes"),
                             ).stdout
        c = dict(line.split(" = ", 1) for line in out.splitlines()
                 if " = " in line)
        py = {k: v.default for k, v in inspect.signature(
            wstream.Receiver).parameters.items()}
        pairs = [("timeout", "timeout"), ("heartbeat", "heartbeat"),
                 ("peer_timeout", "peer-timeout"), ("mover", "mover"),
                 ("staging_slots", "staging-slots"),
                 ("verify_threads", "verify-threads"), ("lanes", "lanes"),
                 ("device_ring_bytes", "device-ring-bytes"),
                 ("max_manifest_entries", "max-manifest-entries"),
                 ("max_manifest_bytes", "max-manifest-bytes"),
                 ("max_unranked_peers", "max-unranked-peers")]
        for mine, theirs in pairs:
            with self.subTest(param=mine):
                value = py[mine]
                if isinstance(value, float):
                    self.assertEqual(value, float(c[theirs]))
                else:
                    self.assertEqual(str(value), c[theirs])
        self.assertEqual(c["verify"], "yes" if py["verify"] else "no")
        # The one default that differs: in an engine's or trainer's own
        # process the library says only what needs attention (the agent,
        # a service of its own, logs at info).
        self.assertEqual((c["log-level"], py["log_level"]), ("info", "warn"))


if __name__ == "__main__":
    harness.main()
