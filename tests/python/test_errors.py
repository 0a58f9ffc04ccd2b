"""python.errors: what a real agent refuses reaches Python as the right
WstreamError subclass, status, name and message; the agent keeps serving."""
import unittest

import harness

harness.need_torch()
import torch  # noqa: E402

import wstream  # noqa: E402

A = harness.want("model.layers.0.a", "f32", [4, 6])
B = harness.want("model.layers.0.b", "bf16", [3, 5])


class RefusalTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rig = harness.Rig([A, B])
        gen = torch.Generator().manual_seed(3)
        cls.a = harness.random_tensor((4, 6), torch.float32, gen)
        cls.b = harness.random_tensor((3, 5), torch.bfloat16, gen)

    @classmethod
    def tearDownClass(cls):
        cls.rig.close()

    def push(self, tensors, version):
        """Registers and pushes; the WstreamError raised, or None."""
        with wstream.Sender(self.rig.addr, timeout=5, log_level="error") as s:
            for name, t in tensors.items():
                s.register(name, t)
            try:
                s.push(version)
                s.wait(timeout=10)
            except wstream.WstreamError as e:
                return e
        return None

    def assert_refused(self, err, cls, status, name, *words):
        self.assertIsInstance(err, cls)
        self.assertIsInstance(err, wstream.WstreamError)
        self.assertEqual((err.status, err.name), (status, name))
        self.assertIn(self.rig.addr, err.message)
        for w in words:
            self.assertIn(w, err.message)
        self.assertIn(name, str(err))
        # Refused before BEGIN: nothing was written.
        self.assertEqual(set(self.rig.live()), {harness.POISON})

    def test_1_dtype_mismatch(self):
        err = self.push({A["tensor"]: self.a.half(), B["tensor"]: self.b}, 1)
        self.assert_refused(err, wstream.DtypeMismatchError, -12,
                            "WST_ERR_DTYPE_MISMATCH", A["tensor"], "f16",
                            "f32")

    def test_2_shape_mismatch(self):
        err = self.push({A["tensor"]: self.a.reshape(6, 4).contiguous(),
                         B["tensor"]: self.b}, 1)
        self.assert_refused(err, wstream.ShapeMismatchError, -13,
                            "WST_ERR_SHAPE_MISMATCH", A["tensor"], "[6, 4]")

    def test_3_wanted_tensor_missing(self):
        err = self.push({A["tensor"]: self.a}, 1)
        self.assert_refused(err, wstream.CoverageError, -14,
                            "WST_ERR_COVERAGE", B["tensor"])

    def test_4_unwanted_tensor_ignored(self):
        # The agent takes what it wants; an extra tensor is not an error
        # and lands nowhere.
        extra = torch.full((64,), 7, dtype=torch.int64)
        self.assertIsNone(self.push({A["tensor"]: self.a,
                                     B["tensor"]: self.b,
                                     "model.layers.0.extra": extra}, 1))
        for w, t in ((A, self.a), (B, self.b)):
            got, gap = self.rig.region(w["tensor"])
            self.assertEqual(got, harness.tensor_bytes(t))
            self.assertEqual(set(gap), {harness.POISON})
        self.assertEqual(self.rig.agent_status()["committed_version"], 1)

    def test_5_stale_version(self):
        err = self.push({A["tensor"]: self.a, B["tensor"]: self.b}, 1)
        self.assertIsInstance(err, wstream.StaleVersionError)
        self.assertEqual((err.status, err.name),
                         (-28, "WST_ERR_STALE_VERSION"))
        self.assertIn("version 1 is not above 1", err.message)

    def test_6_unreachable(self):
        # Nothing listens on port 1 of this host.
        with wstream.Sender("127.0.0.1:1", timeout=3, log_level="error") as s:
            s.register("x", torch.zeros(3))
            with self.assertRaises(wstream.WstreamError) as cm:
                s.push(1)
        self.assertIn(cm.exception.name, ("WST_ERR_UNREACHABLE",
                                          "WST_ERR_TIMED_OUT"))
        self.assertIn("127.0.0.1:1", cm.exception.message)
        if cm.exception.name == "WST_ERR_UNREACHABLE":
            self.assertIn("check that wstream-agent runs and listens on "
                          "127.0.0.1:1 (its --listen), and that no firewall "
                          "blocks the port", cm.exception.message)

    def test_6b_error_said_once(self):
        """An error a call raises is not also printed as a log line (the
        default stderr sink, no logging configured): a fresh interpreter
        pushes to a port nothing listens on; the exception's message is
        on stderr exactly once, from the traceback."""
        import subprocess
        import sys
        code = ("import torch, wstream\n"
                "s = wstream.Sender('127.0.0.1:1', timeout=3)\n"
                "s.register('x', torch.zeros(3))\n"
                "try:\n"
                "    s.push(1)\n"
                "except wstream.WstreamError as e:\n"
                "    print('MESSAGE=' + e.message, flush=True)\n"
                "    raise\n")
        run = subprocess.run([sys.executable, "-c", code], capture_output=True,
                             text=True, timeout=60)
        self.assertNotEqual(run.returncode, 0, run.stderr)
        lines = [ln for ln in run.stdout.splitlines()
                 if ln.startswith("MESSAGE=")]
        self.assertEqual(len(lines), 1, run.stdout)
        message = lines[0][len("MESSAGE="):]
        self.assertIn("127.0.0.1:1", message)
        self.assertEqual(run.stderr.count(message), 1, run.stderr)
        self.assertNotIn("] error: ", run.stderr)

    def test_7_secret_file(self):
        """secret_file=: another secret is refused by the agent, nothing
        written; a file others may read is refused before anything
        connects, naming it and its mode."""
        import os
        import tempfile
        d = tempfile.mkdtemp(prefix="wst-py-other-")
        other = os.path.join(d, "secret")
        with open(os.open(other, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
            f.write(os.urandom(32))
        before = self.rig.live()
        with wstream.Sender(self.rig.addr, timeout=5, log_level="error",
                            secret_file=other) as s:
            s.register(A["tensor"], self.a)
            s.register(B["tensor"], self.b)
            with self.assertRaises(wstream.WstreamError) as cm:
                s.push(9)
                s.wait(timeout=10)
        self.assertIn("proof does not match", cm.exception.message)
        self.assertEqual(self.rig.live(), before)
        os.chmod(other, 0o644)
        with self.assertRaises(wstream.WstreamError) as cm:
            wstream.Sender(self.rig.addr, secret_file=other)
        self.assertEqual(cm.exception.name, "WST_ERR_CONFIG")
        self.assertIn("mode 0644", cm.exception.message)
        os.unlink(other)
        os.rmdir(d)


if __name__ == "__main__":
    harness.main()
