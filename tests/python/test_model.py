"""python.model: a torch model served through wstream.attach takes a
trainer's optimizer steps bit for bit.

A trainer process (TinyModel, TP 1: fused qkv, a dense MLP, a mixture of
experts with grouped experts) takes AdamW steps and pushes after each
through wstream.Sender, its shards registered by the model's sharding
rules. Engine processes hold the same architecture, attached through
wstream.attach (no layout written by hand), each with its own agent:
 - TP 1: after every step the parameters equal the trainer's bit for bit,
   and so do the logits on a fixed batch and the greedy tokens; a thread
   generates all the time, and no forward pass runs between a refit's
   pause and its commit;
 - TP 2 (two engine ranks, two agents in one engine group, experts
   expert-parallel): each rank's parameters equal its part of the
   trainer's, sliced by the model's own code; the ranks generate
   together (gloo) between refits.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import harness

harness.need_torch()
import tinymodel  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 3


def read_json(path):
    with open(path) as f:
        return json.load(f)


class ModelRefitTest(unittest.TestCase):
    def run_engines(self, tp, config=None):
        harness.secret_file()
        d = tempfile.mkdtemp(prefix="wst-model-")
        self.addCleanup(shutil.rmtree, d, True)
        logs, procs = [], []
        env = dict(os.environ)
        if config is not None:
            env["TINYMODEL_CONFIG"] = json.dumps(config)

        def spawn(name, argv):
            log = open(os.path.join(d, name + ".log"), "w")
            logs.append((name, log.name))
            procs.append(subprocess.Popen([sys.executable] + argv,
                                          stdout=log, env=env,
                                          stderr=subprocess.STDOUT))
            log.close()
            return procs[-1]

        try:
            engines = [spawn("engine%d" % r,
                             [os.path.join(HERE, "model_engine.py"), d,
                              str(r), str(tp), str(STEPS)])
                       for r in range(tp)]
            trainer = spawn("trainer", [os.path.join(HERE,
                                                     "model_trainer.py"),
                                        d, str(STEPS), str(tp)])
            for p in [trainer] + engines:
                p.wait(240)
            codes = [p.returncode for p in [trainer] + engines]
            if codes != [0] * len(codes):
                for name, path in logs:
                    with open(path, errors="replace") as f:
                        sys.stderr.write("---- %s ----\n%s" % (name,
                                                               f.read()))
                for r in range(tp):
                    alog = os.path.join(d, "engine%d" % r, "agent.log")
                    if os.path.exists(alog):
                        with open(alog, errors="replace") as f:
                            sys.stderr.write("---- agent %d ----\n%s"
                                             % (r, f.read()[-6000:]))
            self.assertEqual(codes, [0] * len(codes), "trainer, engines")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        trainer = read_json(os.path.join(d, "trainer.json"))
        steps = [[read_json(os.path.join(d, "engine%d.step%d.json" % (r, v)))
                  for v in range(1, STEPS + 1)] for r in range(tp)]
        events = [read_json(os.path.join(d, "engine%d.events.json" % r))
                  for r in range(tp)]
        print("tp %d: %d params, %d bytes, refit s %s"
              % (tp, trainer["params"], trainer["bytes"],
                 ["%.3f" % s for s in trainer["refit_s"]]))
        for r in range(tp):
            for out in steps[r]:
                print("  engine rank %d, step %d (%s): %d parameters, %s; "
                      "logits %s, greedy tokens %s"
                      % (r, out["version"], out.get("label"), out["params"],
                         "all bit-exact" if not out["mismatch"] else
                         "MISMATCH in %s" % out["mismatch"],
                         {True: "equal", False: "DIFFER"}.get(
                             out.get("logits_equal"), "n/a (TP 2)"),
                         {True: "equal", False: "DIFFER"}.get(
                             out.get("tokens_equal"), "n/a (TP 2)")))
        return trainer, steps, events

    def check_refits(self, ev, tp):
        """Every version paused, then committed, in order; no forward
        pass recorded between a pause and its commit."""
        pauses = [(e[0], e[2]) for e in ev["events"] if e[1] == "pause"]
        commits = [(e[0], e[2]) for e in ev["events"] if e[1] == "commit"]
        self.assertEqual([v for _, v in pauses], list(range(1, STEPS + 1)))
        self.assertEqual([v for _, v in commits], list(range(1, STEPS + 1)))
        self.assertFalse([e for e in ev["events"] if e[1] == "unusable"])
        layers = [e for e in ev["events"] if e[1] == "layer"]
        # Each layer's LAYER, and one for the global tensors.
        self.assertEqual(len(layers), STEPS * (tinymodel.CONFIG["layers"] + 1))
        for (tp_, v), (tc, vc) in zip(pauses, commits):
            self.assertLess(tp_, tc)
            inside = [f for f in ev["forwards"]
                      if f[1] > tp_ and f[0] < tc]
            self.assertEqual(inside, [], "forward passes during refit %d"
                             % v)
        for f in ev["forwards"]:
            self.assertLessEqual(f[2], STEPS)
        self.assertEqual((ev["state"], ev["version"]), ("serving", STEPS))

    def test_tp1(self):
        trainer, steps, events = self.run_engines(1)
        for out in steps[0]:
            self.assertEqual(out["mismatch"], [], out["version"])
            self.assertTrue(out["logits_equal"], out["version"])
            self.assertTrue(out["tokens_equal"], out["version"])
            self.assertEqual(out["held"], out["version"])
            self.assertEqual(out["label"], "step-%d" % out["version"])
        ev = events[0]
        self.assertIsNone(ev["generator_error"])
        self.check_refits(ev, 1)
        # The generator ran on every version, the first (engine's own
        # random weights) included.
        self.assertGreater(len(ev["forwards"]), STEPS)

    def test_tp1_tied_head(self):
        # lm_head shares the embedding: one parameter, one tensor.
        trainer, steps, events = self.run_engines(1, {"tie": True})
        self.assertEqual(trainer["params"], 15)
        for out in steps[0]:
            self.assertEqual(out["mismatch"], [], out["version"])
            self.assertTrue(out["logits_equal"], out["version"])
        self.check_refits(events[0], 1)

    def test_tp2(self):
        trainer, steps, events = self.run_engines(2)
        for r in range(2):
            for out in steps[r]:
                self.assertEqual(out["mismatch"], [], (r, out["version"]))
                self.assertEqual(out["held"], out["version"])
            self.check_refits(events[r], 2)
        # Both ranks generated the same tokens (one model, split in two).
        for a, b in zip(steps[0], steps[1]):
            self.assertEqual(a["tokens"], b["tokens"])


if __name__ == "__main__":
    harness.main()
