"""python.sharding: wstream.sharding's placements and cuts, checked
against numpy slicing written here (the reference).

For each rule a parameter is filled the way a receiver writes wants
(row by row, at the offset and pitch want_boxes gives) from checkpoint
tensors numbered element by element, and must equal the parameter the
reference slices and concatenates by hand; shard_boxes must read back
exactly each box. Refusals are checked with their messages.
"""
import unittest

import numpy as np

from wstream import sharding as ws


def numbered(shape, base):
    return (np.arange(int(np.prod(shape)), dtype=np.int64) +
            base).reshape(shape)


def fill_like_receiver(pl, ckpt):
    """The parameter a receiver assembles from the wants of 'pl'."""
    flat = np.full(int(np.prod(pl.view)), -1, dtype=np.int64)
    for piece in pl.pieces:
        for start, stop, off, pitch in ws.want_boxes(pl.view, piece):
            box = ckpt[piece.tensor][tuple(slice(a, b) for a, b in
                                           zip(start, stop))]
            rows = box.reshape(-1, box.shape[-1])
            step = pitch or box.shape[-1]
            for i, r in enumerate(rows):
                flat[off + i * step: off + i * step + len(r)] = r
    return flat.reshape(pl.view)


def read_like_sender(pl, param, ckpt, test):
    """Every shard box a sender would register reads exactly its box."""
    flat = param.reshape(-1)
    covered = 0
    for piece in pl.pieces:
        for start, stop, off in ws.shard_boxes(pl.view, piece):
            ext = [b - a for a, b in zip(start, stop)]
            n = int(np.prod(ext))
            want = ckpt[piece.tensor][tuple(slice(a, b) for a, b in
                                            zip(start, stop))]
            test.assertTrue(np.array_equal(flat[off:off + n].reshape(ext),
                                           want), (piece.tensor, start))
            covered += n
    test.assertEqual(covered, flat.size)


class ShardingTest(unittest.TestCase):
    def check(self, spec, name, local_shape, ckpt, reference):
        pl = spec.place(name, local_shape)
        got = fill_like_receiver(pl, ckpt)
        self.assertTrue(np.array_equal(got.reshape(reference.shape),
                                       reference), name)
        read_like_sender(pl, got, ckpt, self)
        return pl

    def test_identity(self):
        ckpt = {"model.norm.weight": numbered((32,), 0)}
        pl = self.check(ws.Spec(), "model.norm.weight", (32,), ckpt,
                        ckpt["model.norm.weight"])
        self.assertEqual(pl.pieces, [ws.Piece("model.norm.weight", (32,),
                                              (0,), (32,), (0,))])

    def test_fused_qkv_column(self):
        q, kv, h = 32, 16, 8
        ckpt = {"a.q_proj.weight": numbered((q, h), 0),
                "a.k_proj.weight": numbered((kv, h), 1000),
                "a.v_proj.weight": numbered((kv, h), 2000)}
        rule = ws.fused(r"(.*)\.qkv\.weight", [r"\1.q_proj.weight",
                                              r"\1.k_proj.weight",
                                              r"\1.v_proj.weight"],
                        sizes=[q, kv, kv], dim=0, tp_dim=0)
        for r in range(2):
            ref = np.concatenate([np.split(ckpt[t], 2, 0)[r] for t in
                                  ("a.q_proj.weight", "a.k_proj.weight",
                                   "a.v_proj.weight")])
            pl = self.check(ws.Spec([rule], tp_rank=r, tp_size=2),
                            "a.qkv.weight", (32, h), ckpt, ref)
        # Rank 1's boxes, by hand.
        self.assertEqual([(p.tensor, p.start, p.stop, p.dst)
                          for p in pl.pieces],
                         [("a.q_proj.weight", (16, 0), (32, 8), (0, 0)),
                          ("a.k_proj.weight", (8, 0), (16, 8), (16, 0)),
                          ("a.v_proj.weight", (8, 0), (16, 8), (24, 0))])

    def test_row_parallel_pitched(self):
        ckpt = {"o.weight": numbered((8, 12), 0)}
        for r in range(3):
            pl = self.check(ws.Spec([ws.row(r"o\.weight")], tp_rank=r,
                                    tp_size=3), "o.weight", (8, 4), ckpt,
                            np.split(ckpt["o.weight"], 3, 1)[r])
            # One want with a pitch of the local row; the sender reads
            # the whole parameter as one shard.
            self.assertEqual(ws.want_boxes(pl.view, pl.pieces[0]),
                             [((0, 4 * r), (8, 4 * r + 4), 0, 0)])

    def test_grouped_experts_fused_gate_up(self):
        e, i, h = 4, 3, 5
        ckpt = {"l.experts.gate_proj.weight": numbered((e, i, h), 0),
                "l.experts.up_proj.weight": numbered((e, i, h), 500)}
        rule = ws.experts(r"(.*)\.experts\.gate_up",
                          [r"\1.experts.gate_proj.weight",
                           r"\1.experts.up_proj.weight"], sizes=[i, i],
                          dim=1)
        for r in range(2):
            g = np.split(ckpt["l.experts.gate_proj.weight"], 2, 0)[r]
            u = np.split(ckpt["l.experts.up_proj.weight"], 2, 0)[r]
            pl = self.check(ws.Spec([rule], ep_rank=r, ep_size=2),
                            "l.experts.gate_up", (2, 2 * i, h), ckpt,
                            np.concatenate([g, u], 1))
        # [gate; up] per expert: each part is cut per local expert, both
        # for the receiver and the sender.
        self.assertEqual(len(ws.want_boxes(pl.view, pl.pieces[0])), 2)
        self.assertEqual(len(ws.shard_boxes(pl.view, pl.pieces[1])), 2)

    def test_row_parallel_3d_experts_down(self):
        ckpt = {"d.weight": numbered((4, 5, 6), 0)}
        rule = ws.Rule(r"d\.weight", ep_dim=0, tp_dim=2)
        spec = ws.Spec([rule], tp_rank=1, tp_size=2, ep_rank=1, ep_size=2)
        ref = np.split(np.split(ckpt["d.weight"], 2, 0)[1], 2, 2)[1]
        pl = self.check(spec, "d.weight", (2, 5, 3), ckpt, ref)
        # Rows (expert, row) at one pitch: a single want.
        self.assertEqual(len(ws.want_boxes(pl.view, pl.pieces[0])), 1)

    def test_per_expert(self):
        ckpt = {"m.experts.down_proj.weight": numbered((8, 3, 2), 0)}
        rule = ws.per_expert(r"m\.experts\.(?P<e>\d+)\.down_proj\.weight",
                             r"m.experts.down_proj.weight", "e", 8)
        pl = self.check(ws.Spec([rule]), "m.experts.5.down_proj.weight",
                        (3, 2), ckpt, ckpt["m.experts.down_proj.weight"][5])
        self.assertEqual(pl.view, (1, 3, 2))
        self.assertEqual(pl.pieces[0].start, (5, 0, 0))
        with self.assertRaisesRegex(ValueError, "expert 8 of 8"):
            ws.Spec([rule]).place("m.experts.8.down_proj.weight", (3, 2))

    def test_refusals(self):
        fused = ws.fused(r"qkv", ["q", "k"], sizes=[4, 4], dim=0, tp_dim=0)
        with self.assertRaisesRegex(ValueError, "has 6 along dim 0 but its "
                                    "parts \\['q', 'k'\\] hold 4"):
            ws.Spec([fused], tp_rank=0, tp_size=2).place("qkv", (6, 2))
        with self.assertRaisesRegex(ValueError, "not divisible by 3 ranks"):
            ws.Spec([fused], tp_rank=0, tp_size=3).place("qkv", (2, 2))
        with self.assertRaisesRegex(ValueError, "sizes must give"):
            ws.fused(r"x", ["a", "b"], sizes=[1], dim=0)
        with self.assertRaisesRegex(ValueError, "tp_dim and ep_dim"):
            ws.Spec([ws.Rule("x", tp_dim=0, ep_dim=0)]).place("x", (2,))
        with self.assertRaisesRegex(ValueError, "tp rank 2 of 2"):
            ws.Spec(tp_rank=2, tp_size=2)
        with self.assertRaisesRegex(ValueError, "both hold part of 'w'"):
            ws.Spec([ws.replicated("a", "w"), ws.replicated("b", "w")]) \
                .placements({"a": (2, 2), "b": (2, 2)})
        with self.assertRaisesRegex(ValueError, "has shape \\[2, 2\\] in"):
            ws.Spec([ws.replicated("a", "w"), ws.Rule("b", "w", tp_dim=0)],
                    tp_rank=1, tp_size=2).placements({"a": (2, 2),
                                                      "b": (2, 2)})
        with self.assertRaisesRegex(ValueError, "0-dim"):
            ws.Spec().place("s", ())
        with self.assertRaises(TypeError):
            ws.Spec(["not a rule"])


class IpcHandleTest(unittest.TestCase):
    """wstream.attach's reading of torch's shared CUDA handle."""

    def test_forms(self):
        from wstream.attach import ipc_handle
        h = bytes(range(64))
        self.assertEqual(ipc_handle(h), h)                      # old torch
        self.assertEqual(ipc_handle(bytes([2, ord("c")]) + h), h)  # 2.x
        with self.assertRaisesRegex(ValueError, "expandable_segments"):
            ipc_handle(bytes([2, ord("e")]) + h)
        with self.assertRaisesRegex(ValueError, "66 bytes starting"):
            ipc_handle(bytes([3, ord("c")]) + h)


class AttachedEventsTest(unittest.TestCase):
    def test_bounded(self):
        # An engine refits for as long as it serves: its event record
        # keeps the last EVENTS_KEPT only.
        from wstream.attach import EVENTS_KEPT, Attached
        a = Attached()
        for i in range(EVENTS_KEPT + 100):
            a._event("layer", i, 1)
        self.assertEqual(len(a.events), EVENTS_KEPT)
        self.assertEqual(a.events[-1][1:], ("layer", EVENTS_KEPT + 99, 1))
        self.assertEqual(a.events[0][2], 100)


if __name__ == "__main__":
    unittest.main(verbosity=2)
