"""python.push: tensors of several dtypes and odd shapes pushed from
Python into a real agent, read back bit for bit from the engine's shm."""
import unittest

import harness

harness.need_torch()
import torch  # noqa: E402

import wstream  # noqa: E402


class Tiny(torch.nn.Module):
    """A model whose state_dict() names follow the checkpoint convention
    (model.layers.N.*): two layers and global tensors, every dtype the
    test covers, odd sizes."""

    def __init__(self, gen):
        super().__init__()
        r = harness.random_tensor
        self.model = torch.nn.Module()
        self.model.layers = torch.nn.ModuleList()
        for i, dtype in enumerate((torch.bfloat16, torch.float16)):
            layer = torch.nn.Linear(13, 7, bias=True).to(dtype)
            with torch.no_grad():
                layer.weight.copy_(r((7, 13), dtype, gen))
                layer.bias.copy_(r((7,), dtype, gen))
            layer.register_buffer("scale_i8", r((3, 5, 11), torch.int8, gen))
            self.model.layers.append(layer)
        self.model.register_buffer("norm", r((1001,), torch.float32, gen))
        self.model.register_buffer("codes", r((9, 3), torch.uint8, gen))
        self.model.register_buffer("ids", r((5,), torch.int32, gen))
        self.model.register_buffer("pos", r((2, 3), torch.int64, gen))
        self.model.register_buffer("f64", r((1,), torch.float64, gen))


class PushTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gen = torch.Generator().manual_seed(7)
        cls.model = Tiny(cls.gen)
        cls.sd = cls.model.state_dict()
        wants = [harness.want(n, harness.wst_dtype(t.dtype), t.shape)
                 for n, t in cls.sd.items()]
        cls.rig = harness.Rig(wants)

    @classmethod
    def tearDownClass(cls):
        cls.rig.close()

    def check_live(self):
        for name, t in self.sd.items():
            got, gap = self.rig.region(name)
            want = harness.tensor_bytes(t)
            if got != want:
                first = next(i for i in range(len(want)) if got[i] != want[i])
                self.fail("%s (%s %s): shm differs from the tensor at byte "
                          "%d of %d" % (name, t.dtype, list(t.shape), first,
                                        len(want)))
            self.assertEqual(gap, bytes([harness.POISON]) * len(gap),
                             "%s: written past its end" % name)

    def test_1_three_lines(self):
        model = self.model
        # The README's three lines, verbatim but for the address.
        with wstream.Sender([self.rig.addr]) as s:
            s.register_all(model.state_dict()); s.push(1); s.wait()  # noqa
        self.check_live()
        self.assertEqual(self.rig.agent_status()["committed_version"], 1)
        self.rig.wait_engine(lambda st: st["committed_version"] == 1,
                             "the engine to see COMMITTED 1")

    def test_2_refits_in_place(self):
        # One sender, three versions; the tensors change in place between
        # pushes as a trainer's do (the sender holds the same memory).
        with wstream.Sender(self.rig.addr, log_level="warn") as s:
            s.register_all(self.sd)
            for version in (2, 3, 4):
                with torch.no_grad():
                    for t in self.sd.values():
                        t.copy_(harness.random_tensor(t.shape, t.dtype,
                                                      self.gen))
                s.push(version)
                s.wait(timeout=30)
                self.check_live()
                self.assertEqual(s.version, version)
                total = sum(t.numel() * t.element_size()
                            for t in self.sd.values())
                self.assertEqual(s.bytes_moved, total)
        st = self.rig.agent_status()
        self.assertEqual(st["committed_version"], 4)
        self.assertTrue(st["usable"])

    def test_3_engine_saw_every_refit(self):
        self.rig.wait_engine(lambda st: st["committed_version"] == 4,
                             "the engine to see COMMITTED 4")
        events = iter(self.rig.engine_state()["events"])
        # Per refit: BEGIN, each of the 3 layers once (global tensors such
        # as model.norm form one extra layer after the last), COMMITTED.
        for v in (1, 2, 3, 4):
            self.assertEqual(next(events), ["BEGIN", v, "READY"])
            layers = [next(events) for _ in range(3)]
            self.assertEqual(sorted(e[1] for e in layers), [0, 1, 2])
            for e in layers:
                self.assertEqual([e[0], e[2], e[3]],
                                 ["LAYER", v, "FINALIZED"])
            self.assertEqual(next(events), ["COMMITTED", v])
        self.assertEqual(list(events), [])
        self.assertEqual(self.rig.engine_state()["state"], "serving")

    def test_4_restarted_trainer_reads_versions(self):
        # A trainer that restarts cannot know what the agent holds; it
        # connects first, reads the committed version and pushes above it.
        with wstream.Sender(self.rig.addr, log_level="warn") as s:
            s.register_all(self.sd)
            self.assertEqual(s.committed_versions(), [0])  # not heard yet
            s.connect()
            self.assertEqual(s.committed_versions(), [4])
            with self.assertRaises(wstream.StaleVersionError) as cm:
                s.push(3)  # the agent refuses it; wait() says so
                s.wait(timeout=30)
            self.assertEqual((cm.exception.status, cm.exception.name),
                             (-28, "WST_ERR_STALE_VERSION"))
            self.assertIn("version 3 is not above 4", str(cm.exception))
        with wstream.Sender(self.rig.addr, log_level="warn") as s:
            s.register_all(self.sd)
            s.connect()
            s.push(max(s.committed_versions()) + 1)
            s.wait(timeout=30)
            self.assertEqual(s.committed_versions(), [5])
        self.check_live()

    def test_5_labeled_push(self):
        # A label travels with the version; the sender that pushed it and
        # one that connects later both read it back, next to the version.
        label = "run-3/step-1200@9f3c"
        with wstream.Sender(self.rig.addr, log_level="warn") as s:
            s.register_all(self.sd)
            s.connect()
            self.assertEqual(s.committed_labels(), [""])
            s.push(6, label=label)
            s.wait(timeout=30)
            self.assertEqual(s.committed_versions(), [6])
            self.assertEqual(s.committed_labels(), [label])
        # The agent keeps it (status file); its engine heard it with
        # BEGIN and COMMITTED.
        self.assertEqual(self.rig.agent_status()["committed_label"], label)
        self.rig.wait_engine(lambda st: st["committed_version"] == 6,
                             "the engine to see COMMITTED 6")
        st = self.rig.engine_state()
        self.assertEqual(st["committed_label"], label)
        self.assertIn(["BEGIN", 6, "READY", label], st["events"])
        self.assertEqual(st["events"][-1], ["COMMITTED", 6, label])
        with wstream.Sender(self.rig.addr, log_level="warn") as s:
            s.register_all(self.sd)
            self.assertEqual(s.committed_labels(), [""])  # not heard yet
            s.connect()
            self.assertEqual(s.committed_versions(), [6])
            self.assertEqual(s.committed_labels(), [label])
            # The next version without one holds none.
            s.push(7)
            s.wait(timeout=30)
            self.assertEqual(s.committed_labels(), [""])
        self.assertEqual(self.rig.agent_status()["committed_label"], "")
        self.rig.wait_engine(lambda st: st["committed_version"] == 7,
                             "the engine to see COMMITTED 7")
        st = self.rig.engine_state()
        self.assertEqual(st["committed_label"], "")
        self.assertEqual(st["events"][-1], ["COMMITTED", 7])
        self.check_live()


if __name__ == "__main__":
    harness.main()
