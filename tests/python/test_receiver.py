"""python.receiver: a Receiver hosted in this process (no torch here) over
host buffers of four kinds -- a bytearray, an mmap, raw (address, nbytes)
memory and a ctypes array -- and a trainer in another process
(push_main.py, wstream.Sender) pushing into it. After every commit each
buffer holds the pushed bytes bit for bit, computed here from the files
the trainer read (fused tensors, a column slice with a row pitch, MoE
experts replayed by the "checkpoint" loader, a global tensor) and every
byte no want covers is still poison. The hooks run on one thread, not
this one, in order; a hook that raises refuses (on_begin: nothing is
written) or fails (on_layer: unusable) the refit with its text, and the
receiver serves the next version."""
import ctypes
import importlib.util
import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import harness

# torch is the trainer's (push_main.py), never imported here: the engine
# process must not need it.
if importlib.util.find_spec("torch") is None:
    print("SKIP: torch is not importable; install python3-torch to run "
          "the trainer of this test", file=sys.stderr)
    sys.exit(77)

import wstream  # noqa: E402

POISON = 0xA5
E, I, H = 4, 3, 5  # routed experts, their intermediate and hidden sizes
# name: (dtype, shape) as the trainer holds them
TENSORS = {
    "model.layers.0.self_attn.q_proj.weight": ("bf16", [6, 10]),
    "model.layers.0.self_attn.k_proj.weight": ("bf16", [4, 10]),
    "model.layers.0.mlp.up_proj.weight": ("f32", [7, 9]),
    "model.layers.1.mlp.experts.gate_proj.weight": ("bf16", [E, I, H]),
    "model.layers.1.mlp.experts.up_proj.weight": ("bf16", [E, I, H]),
    "model.layers.1.mlp.experts.down_proj.weight": ("bf16", [E, H, I]),
    "model.norm.weight": ("f16", [11]),
}
SIZE = {"bf16": 2, "f16": 2, "f32": 4, "u8": 1}
UP_COLS = (3, 7)  # the column slice of up_proj this rank wants
UP_PITCH = 32     # bytes between its rows in the live buffer


def nbytes(name):
    dtype, shape = TENSORS[name]
    n = SIZE[dtype]
    for d in shape:
        n *= d
    return n


class Engine:
    """What an engine keeps: its live buffers and what its hooks saw."""

    def __init__(self):
        self.qkv = bytearray([POISON]) * 264
        self.up = mmap.mmap(-1, 4096)
        self.up.write(bytes([POISON]) * 4096)
        self.experts = ctypes.create_string_buffer(bytes([POISON]) * 400,
                                                   400)
        self.norm = (ctypes.c_uint16 * 16)(*([0xA5A5] * 16))
        self.events = []
        self.threads = set()
        self.refuse = None      # on_begin raises this, when set
        self.begin_fn = None    # on_begin calls this, when set
        self.resume_error = None  # on_committed raises this, when set
        self.fail_layer = None  # on_layer raises for this layer
        self.lock = threading.Lock()

    def note(self, *event):
        with self.lock:
            self.events.append(event)
            self.threads.add(threading.get_ident())

    def on_begin(self, version):
        self.note("begin", version)
        if self.refuse is not None:
            raise RuntimeError(self.refuse)
        if self.begin_fn is not None:
            self.begin_fn()

    def on_layer(self, layer, version):
        self.note("layer", layer, version)
        if layer == self.fail_layer:
            raise ValueError("cannot refresh layer %d" % layer)

    def on_committed(self, version):
        self.note("committed", version)
        if self.resume_error is not None:
            raise self.resume_error

    def on_unusable(self, status, reason):
        self.note("unusable", status, reason)

    def take_events(self):
        with self.lock:
            events, self.events = self.events, []
        return events


class ReceiverTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        harness.secret_file()
        cls.dir = tempfile.mkdtemp(prefix="wst-py-rx-")
        with open(os.path.join(cls.dir, "tensors.json"), "w") as f:
            json.dump(TENSORS, f)
        cls.engine = e = Engine()
        cls.rx = r = wstream.Receiver(
            host="127.0.0.1", timeout=10, heartbeat=0.5, peer_timeout=2,
            log_level="warn", on_begin=e.on_begin, on_layer=e.on_layer,
            on_committed=e.on_committed, on_unusable=e.on_unusable)
        qkv = r.add_region("qkv", e.qkv)
        up = r.add_region("up", e.up)
        experts = r.add_region("experts", (ctypes.addressof(e.experts),
                                           len(e.experts)))
        r.add_region("norm", e.norm)
        q, k = ("model.layers.0.self_attn.%s_proj.weight" % p
                for p in "qk")
        r.add_want(q, "bf16", (6, 10), qkv)
        r.add_want(k, "bf16", (4, 10), qkv, offset=nbytes(q))
        r.add_want("model.layers.0.mlp.up_proj.weight", "f32", (7, 9), up,
                   start=(0, UP_COLS[0]), stop=(7, UP_COLS[1]),
                   row_pitch=UP_PITCH)
        r.add_expert_layer(1, "checkpoint", "bf16", n_experts=E, hidden=H,
                           inter=I, w13=(experts, 0),
                           w2=(experts, 2 * E * I * H * 2))
        r.add_want("model.norm.weight", "f16", (11,), "norm")
        cls.port = r.start()
        cls.trainer = subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(__file__),
                                          "push_main.py"),
             "127.0.0.1:%d" % cls.port, cls.dir],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    @classmethod
    def tearDownClass(cls):
        cls.trainer.stdin.close()
        cls.trainer.wait(30)
        cls.rx.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    # -- the trainer --

    def push(self, version):
        """New random bytes for every tensor, pushed as 'version' by the
        trainer; its answer line, split, and the bytes."""
        src = {name: os.urandom(nbytes(name)) for name in TENSORS}
        folder = os.path.join(self.dir, "v%d" % version)
        os.mkdir(folder)
        for name, data in src.items():
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
        self.trainer.stdin.write("%d\n" % version)
        self.trainer.stdin.flush()
        answer = self.trainer.stdout.readline()
        self.assertTrue(answer, "the trainer exited (%s)"
                        % self.trainer.poll())
        return answer.rstrip("\n").split(" ", 3), src

    # -- what the buffers must hold --

    @staticmethod
    def expected(src):
        """Every live buffer's bytes for source tensors 'src', built from
        the layouts (not through wstream)."""
        p = POISON
        q = src["model.layers.0.self_attn.q_proj.weight"]
        k = src["model.layers.0.self_attn.k_proj.weight"]
        qkv = q + k + bytes([p]) * (264 - len(q) - len(k))
        up_src, row = src["model.layers.0.mlp.up_proj.weight"], 9 * 4
        lo, hi = UP_COLS[0] * 4, UP_COLS[1] * 4
        up = bytearray([p]) * 4096
        for r in range(7):
            up[r * UP_PITCH:r * UP_PITCH + hi - lo] = \
                up_src[r * row + lo:r * row + hi]
        # checkpoint loader: w13[e] = gate[e] rows then up[e] rows,
        # w2[e] = down[e].
        x = "model.layers.1.mlp.experts.%s_proj.weight"
        gate, upx, down = (src[x % n] for n in ("gate", "up", "down"))
        per = I * H * 2
        w13 = b"".join(gate[e * per:(e + 1) * per] +
                       upx[e * per:(e + 1) * per] for e in range(E))
        experts = w13 + down + bytes([p]) * (400 - len(w13) - len(down))
        norm = src["model.norm.weight"]
        return {"qkv": qkv, "up": bytes(up), "experts": experts,
                "norm": norm + bytes([p]) * (32 - len(norm))}

    def live(self):
        e = self.engine
        return {"qkv": bytes(e.qkv), "up": bytes(e.up[:]),
                "experts": e.experts.raw, "norm": bytes(e.norm)}

    def check_live(self, src, version):
        want, got = self.expected(src), self.live()
        for region in want:
            w, g = want[region], got[region]
            if w != g:
                first = next(i for i in range(len(w)) if w[i] != g[i])
                self.fail("version %d: region %s differs at byte %d of %d"
                          % (version, region, first, len(w)))

    def check_refit_events(self, version, layers=(0, 1, 2)):
        events = self.engine.take_events()
        self.assertEqual(events[0], ("begin", version), events)
        middle = events[1:-1]
        self.assertEqual(sorted(middle), [("layer", l, version)
                                          for l in layers], events)
        self.assertEqual(events[-1], ("committed", version), events)

    def commit(self, version):
        (word, v, *rest), src = self.push(version)
        self.assertEqual((word, v), ("ok", str(version)), rest)
        self.rx.wait_committed(version, timeout=30)
        self.check_live(src, version)
        # layers 0 and 1 (MoE), and the global tensors' layer after them
        self.check_refit_events(version)
        st = self.rx.state()
        self.assertEqual((st["committed_version"], st["usable"]),
                         (version, True))
        self.assertEqual(st["last_refit_bytes"],
                         sum(nbytes(n) for n in TENSORS if "up_proj" not in
                             n or "experts" in n) + 7 * 16)
        return src

    # -- the cases, in order --

    def test_1_two_versions_bit_exact(self):
        self.commit(1)
        self.commit(2)
        self.assertEqual(len(self.engine.threads), 1)
        self.assertNotIn(threading.get_ident(), self.engine.threads)
        self.assertEqual([t["finalized"] > 0 for t in self.rx.timeline()],
                         [True] * 3)

    def test_2_begin_raises_refuses_and_writes_nothing(self):
        before = self.live()
        self.engine.refuse = "engine draining: no refit now"
        try:
            (word, v, name, message), _ = self.push(3)
        finally:
            self.engine.refuse = None
        self.assertEqual((word, v, name), ("error", "3", "WST_ERR_STATE"))
        self.assertIn("RuntimeError: engine draining: no refit now", message)
        self.assertEqual(self.live(), before, "a refused refit wrote")
        # Refused by this engine itself: no layer, no resume, no unusable.
        self.assertEqual(self.engine.take_events(), [("begin", 3)])
        # The receiver records the refusal on its own thread, which may
        # run after the sender heard of it: wait for it.
        deadline = time.monotonic() + 10
        st = self.rx.state()
        while "engine draining" not in st["reason"] and \
                time.monotonic() < deadline:
            time.sleep(0.01)
            st = self.rx.state()
        self.assertEqual((st["committed_version"], st["usable"]), (2, True))
        self.assertIn("engine draining: no refit now", st["reason"])
        self.commit(4)  # and the next version goes through

    def test_3_layer_raises_fails_closed_then_recovers(self):
        waited = []

        def wait():
            try:
                self.rx.wait_committed(5, timeout=30)
            except wstream.WstreamError as e:
                waited.append(e)

        waiter = threading.Thread(target=wait)
        waiter.start()
        self.engine.fail_layer = 0
        try:
            (word, v, name, message), _ = self.push(5)
        finally:
            self.engine.fail_layer = None
            waiter.join(30)
        # A waiter sees the failure at once, with its reason.
        self.assertEqual([type(e) for e in waited], [wstream.UnusableError])
        self.assertIn("cannot refresh layer 0", str(waited[0]))
        self.assertEqual((word, v), ("error", "5"), message)
        self.assertIn("ValueError: cannot refresh layer 0", message)
        st = self.rx.state()
        self.assertEqual((st["committed_version"], st["usable"]), (4, False))
        self.assertIn("cannot refresh layer 0", st["reason"])
        # on_unusable runs on the engine thread, which may call it after
        # the sender heard of the failure: wait for it.
        deadline = time.monotonic() + 10
        while not any(e[0] == "unusable" for e in list(self.engine.events)) \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        events = self.engine.take_events()
        self.assertEqual(events[0], ("begin", 5))
        self.assertIn(("layer", 0, 5), events)
        unusable = [e for e in events if e[0] == "unusable"]
        self.assertEqual(len(unusable), 1, events)
        self.assertEqual(unusable[0][1], "WST_ERR_UNUSABLE")
        self.assertIn("cannot refresh layer 0", unusable[0][2])
        self.assertNotIn(("committed", 5), events)
        self.commit(6)
        self.rx.check()  # no hook raised outside begin and layer

    def test_4_hooks_cannot_close_nor_raise_into_c(self):
        # close() from the engine thread would join itself: refused, and
        # the refusal refuses the refit.
        self.engine.begin_fn = self.rx.close
        try:
            (word, v, name, message), _ = self.push(7)
        finally:
            self.engine.begin_fn = None
        self.assertEqual((word, v, name), ("error", "7", "WST_ERR_STATE"))
        self.assertIn("RuntimeError: close() from a hook", message)
        self.assertFalse(self.rx.closed)
        self.engine.take_events()
        self.rx.check()
        # on_committed has no status: its exception is kept for check().
        self.engine.resume_error = KeyError("no serving loop")
        try:
            self.commit(8)
        finally:
            self.engine.resume_error = None
        with self.assertRaises(KeyError) as cm:
            self.rx.check()
        self.assertIn("no serving loop", str(cm.exception))

    def test_5_no_torch_in_the_engine(self):
        self.assertFalse("torch" in sys.modules, "the engine imported torch")

    def test_6_close_while_a_hook_asks_for_the_state(self):
        # The last case: it closes the receiver. close() joins the engine
        # thread; a hook that asks for the state meanwhile must be told
        # the receiver is closed, not wait for the closer.
        in_hook, asked, answers = threading.Event(), [], []

        def begin():
            in_hook.set()
            time.sleep(0.5)
            try:
                self.rx.state()
                asked.append("state")
            except ValueError as e:
                asked.append(str(e))
                raise

        self.engine.begin_fn = begin
        pusher = threading.Thread(
            target=lambda: answers.append(self.push(9)[0]))
        pusher.start()
        self.assertTrue(in_hook.wait(30), "no refit began")
        closer = threading.Thread(target=self.rx.close, daemon=True)
        closer.start()
        closer.join(20)
        self.assertFalse(closer.is_alive(), "close() waits for the hook, "
                         "which waits for close()")
        pusher.join(60)
        self.assertEqual(asked, ["the receiver is closed"])
        self.assertTrue(self.rx.closed)
        self.assertEqual(answers[0][:2], ["error", "9"])


if __name__ == "__main__":
    harness.main()
