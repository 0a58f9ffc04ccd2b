"""python.slices: one Sender registers tensors as several slices, each its
own torch tensor -- rows [3, 8) and [0, 3); a flat range and an N-D box;
one [I, H] tensor per expert of a grouped [E, I, H] tensor (as the
unsqueezed view [1, I, H], no copy) -- and pushes them into a real agent
whose wants span the slices; the engine's shm holds the whole tensors'
bytes, read back bit for bit, version after version. Refusals (an
overlap, another dtype or global shape) are ValueErrors naming both
slices, raised before C; the same rules are cross-checked element by
element."""
import itertools
import math
import random
import unittest

import harness

harness.need_torch()
import torch  # noqa: E402

import wstream  # noqa: E402
from wstream import _checks  # noqa: E402

W = "model.layers.0.mlp.w"                              # [8, 4] f32
EXPERTS = "model.layers.0.mlp.experts.gate_proj.weight"  # [4, 3, 5] bf16
NORM = "model.norm.weight"                              # [10] f32
X = "model.layers.1.x"                                  # [4, 6] i32
NOWHERE = "127.0.0.1:9"


def whole_tensors(gen):
    r = harness.random_tensor
    return {W: r((8, 4), torch.float32, gen),
            EXPERTS: r((4, 3, 5), torch.bfloat16, gen),
            NORM: r((10,), torch.float32, gen),
            X: r((4, 6), torch.int32, gen)}


class Slices:
    """The trainer's side: every slice its own tensor (separate memory),
    with the box it holds; copy_from() writes a version into them in
    place, as an optimizer step would."""

    def __init__(self):
        self.w_bottom = torch.empty(5, 4)                   # rows [3, 8)
        self.w_top = torch.empty(3, 4)                      # rows [0, 3)
        self.experts = [torch.empty(3, 5, dtype=torch.bfloat16)
                        for _ in range(4)]
        self.norm_head = torch.empty(4)                     # flat [0, 4)
        self.norm_tail = torch.empty(6)                     # box [4, 10)
        self.x_flat = torch.empty(9, dtype=torch.int32)     # flat [0, 9)
        self.x_rest = torch.empty(3, dtype=torch.int32)     # flat [9, 12)
        self.x_rows = torch.empty(2, 6, dtype=torch.int32)  # rows [2, 4)

    def register(self, s):
        s.register(W, self.w_bottom, shape=(8, 4), start=(3, 0), stop=(8, 4))
        s.register(W, self.w_top, shape=(8, 4), start=(0, 0), stop=(3, 4))
        for e in (2, 0, 3, 1):
            s.register(EXPERTS, self.experts[e].unsqueeze(0),
                       shape=(4, 3, 5), start=(e, 0, 0), stop=(e + 1, 3, 5))
        s.register(NORM, self.norm_head, shape=(10,), start=0, stop=4)
        s.register(NORM, self.norm_tail, shape=(10,), start=(4,), stop=(10,))
        s.register(X, self.x_rows, shape=(4, 6), start=(2, 0), stop=(4, 6))
        s.register(X, self.x_flat, shape=(4, 6), start=0, stop=9)
        s.register(X, self.x_rest, shape=(4, 6), start=9, stop=12)

    def copy_from(self, full):
        self.w_bottom.copy_(full[W][3:])
        self.w_top.copy_(full[W][:3])
        for e in range(4):
            self.experts[e].copy_(full[EXPERTS][e])
        self.norm_head.copy_(full[NORM][:4])
        self.norm_tail.copy_(full[NORM][4:])
        flat = full[X].reshape(-1)
        self.x_flat.copy_(flat[:9])
        self.x_rest.copy_(flat[9:12])
        self.x_rows.copy_(full[X][2:])


class PushTest(unittest.TestCase):
    def test_slices_bit_exact(self):
        gen = torch.Generator().manual_seed(11)
        # The agent's wants span slices: rows [1, 7) of W across its two,
        # experts [1, 4) across three, the whole of NORM and X.
        wants = [harness.want(W, "f32", [8, 4], [1, 0], [7, 4]),
                 harness.want(EXPERTS, "bf16", [4, 3, 5], [1, 0, 0],
                              [4, 3, 5]),
                 harness.want(NORM, "f32", [10]),
                 harness.want(X, "i32", [4, 6])]
        boxes = {W: (slice(1, 7),), EXPERTS: (slice(1, 4),),
                 NORM: (slice(None),), X: (slice(None),)}
        sl = Slices()
        with harness.Rig(wants) as rig, \
                wstream.Sender(rig.addr, log_level="warn") as s:
            sl.register(s)
            self.assertEqual(len(s.tensors[W]), 2)
            self.assertIs(s.tensors[W][0], sl.w_bottom)
            for version in (1, 2):
                full = whole_tensors(gen)
                sl.copy_from(full)
                s.push(version)
                s.wait(timeout=30)
                for name, box in boxes.items():
                    got, gap = rig.region(name)
                    want = harness.tensor_bytes(full[name][box])
                    self.assertEqual(got, want, "%s at version %d"
                                     % (name, version))
                    self.assertEqual(set(gap), {harness.POISON}, name)
                # Each wanted byte moved once, from its own slice.
                self.assertEqual(s.bytes_moved, sum(
                    full[n][b].numel() * full[n].element_size()
                    for n, b in boxes.items()))
            st = rig.agent_status()
            self.assertEqual((st["committed_version"], st["usable"]),
                             (2, True))


class RefusalTest(unittest.TestCase):
    def refused(self, s, words, *args, **kw):
        with self.assertRaises(ValueError) as cm:
            s.register(*args, **kw)
        for w in words:
            self.assertIn(w, str(cm.exception))

    def test_refusals_name_both_slices(self):
        t = torch.zeros(3, 4)
        with wstream.Sender([NOWHERE]) as s:
            s.register(W, t, shape=(8, 4), start=(0, 0), stop=(3, 4))
            self.refused(s, ["tensor %r" % W, "slice [2:5, 0:4] overlaps "
                             "slice [0:3, 0:4] registered before it",
                             "element [2, 0]"],
                         W, t, shape=(8, 4), start=(2, 0), stop=(5, 4))
            self.refused(s, ["slice flat [11:15] overlaps slice [0:3, 0:4]",
                             "element [2, 3]"],
                         W, torch.zeros(4), shape=(8, 4), start=11, stop=15)
            self.refused(s, ["slice [3:6, 0:4] has dtype f16, but slice "
                             "[0:3, 0:4] registered before it has f32"],
                         W, t.half(), shape=(8, 4), start=(3, 0),
                         stop=(6, 4))
            self.refused(s, ["slice [3:6, 0:4] gives the tensor shape [9, 4],"
                             " but slice [0:3, 0:4] registered before it "
                             "gives [8, 4]"],
                         W, t, shape=(9, 4), start=(3, 0), stop=(6, 4))
            # None of them reached C or was kept: the rest of the tensor
            # registers (C would refuse an overlap with a kept one).
            s.register(W, torch.zeros(20), shape=(8, 4), start=12, stop=32)
            self.assertEqual(len(s.tensors[W]), 2)

    def test_overlap_rule_elementwise(self):
        """_checks' overlap test against every element of a [3, 4, 5]
        tensor, for random N-D and flat slices."""
        shp = (3, 4, 5)
        n = math.prod(shp)
        rng = random.Random(5)

        def rnd():
            if rng.random() < 0.5:
                a = rng.randrange(n + 1)
                return (a,), (rng.randrange(a, n + 1),), True
            lo = [rng.randrange(d + 1) for d in shp]
            hi = [rng.randrange(a, d + 1) for a, d in zip(lo, shp)]
            return tuple(lo), tuple(hi), False

        def holds(sl, x):
            if sl[2]:
                f = sum(i * math.prod(shp[k + 1:]) for k, i in enumerate(x))
                return sl[0][0] <= f < sl[1][0]
            return all(a <= i < b for a, i, b in zip(sl[0], x, sl[1]))

        seen = {True: 0, False: 0}
        for _ in range(3000):
            a, b = rnd(), rnd()
            truth = any(holds(a, x) and holds(b, x)
                        for x in itertools.product(*map(range, shp)))
            got = _checks._common_element(shp, a, b)
            self.assertEqual(got is not None, truth, (a, b))
            if got is not None:
                self.assertTrue(holds(a, got) and holds(b, got))
            seen[truth] += 1
        self.assertGreater(min(seen.values()), 300)


if __name__ == "__main__":
    harness.main()
