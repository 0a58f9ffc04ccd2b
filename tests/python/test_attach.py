"""python.attach: wstream.attach's failure path and its sidecar mode,
against real agents; the trainer is a wstream.Sender in this process.

 - fail closed: an engine whose on_layer raises at version 2 becomes
   unusable (serving() raises UnusableError, the agent says why), and
   version 3 serves again, bit for bit;
 - start_agent=False: attach only writes layout.json; an agent started
   here from it refits the model;
 - an agent killed while idle and started again on the same layout and
   socket: the engine's hook reconnects by itself, the agent still holds
   the version it committed, and the next one commits.
"""
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import harness

harness.need_torch()
import torch  # noqa: E402

import wstream  # noqa: E402
from wstream import sharding  # noqa: E402
from tinymodel import TinyModel  # noqa: E402


def same(a, b):
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    return sorted(pa) == sorted(pb) and all(
        torch.equal(pa[n].detach().view(torch.int32),
                    pb[n].detach().view(torch.int32)) for n in pa)


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def step(model, seed):
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g))


class AttachTest(unittest.TestCase):
    def setUp(self):
        harness.secret_file()
        torch.set_num_threads(1)

    def test_fail_closed_then_recover(self):
        fail = {"version": 2}

        def on_layer(layer, version):
            if version == fail["version"] and layer == 0:
                raise RuntimeError("cannot refresh layer 0")

        engine, trainer = TinyModel(seed=1), TinyModel(seed=0)
        with wstream.attach(engine, engine.spec(), on_layer=on_layer,
                            agent_args=["--timeout", "20"]) as att, \
                wstream.Sender([att.address], lanes=1) as s:
            sharding.register_model(s, trainer, trainer.spec())
            s.push(1)
            s.wait(60)
            att.wait_version(1)
            self.assertTrue(same(engine, trainer))
            step(trainer, 1)
            s.push(2)
            with self.assertRaises(wstream.WstreamError) as cm:
                s.wait(60)
            self.assertIn("cannot refresh layer 0", str(cm.exception))
            deadline = time.monotonic() + 10
            while att.state != "unusable" and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertEqual(att.state, "unusable")
            with self.assertRaises(wstream.UnusableError) as cm:
                with att.serving():
                    pass
            self.assertIn("cannot refresh layer 0", str(cm.exception))
            self.assertEqual(att.version, 1)
            fail["version"] = None
            step(trainer, 2)
            s.push(3)
            s.wait(60)
            att.wait_version(3)
            with att.serving() as v:
                self.assertEqual(v, 3)
                self.assertTrue(same(engine, trainer))
        kinds = [e[1] for e in att.events]
        self.assertEqual(kinds.count("unusable"), 1)
        self.assertEqual([e[2] for e in att.events if e[1] == "commit"],
                         [1, 3])

    def test_agent_restart(self):
        # The agent dies while idle; one started again on the same layout
        # and socket (as a sidecar's restart would) is found by the
        # engine's hook, which reconnects, and the next version commits.
        engine, trainer = TinyModel(seed=1), TinyModel(seed=0)
        with wstream.attach(engine, engine.spec(),
                            agent_args=["--timeout", "20"]) as att:
            with wstream.Sender([att.address], lanes=1) as s:
                sharding.register_model(s, trainer, trainer.spec())
                s.push(1)
                s.wait(60)
            att.wait_version(1)
            att._agent.kill()
            att._agent.wait(10)
            port_file = os.path.join(att.dir, "port")
            os.unlink(port_file)
            log = open(os.path.join(att.dir, "agent2.log"), "w")
            att._agent = subprocess.Popen(
                [harness.agent_binary(), "--layout",
                 os.path.join(att.dir, "layout.json"),
                 "--listen", "127.0.0.1:0", "--port-file", port_file,
                 "--engine-socket", os.path.join(att.dir, "engine.sock"),
                 "--status-file", os.path.join(att.dir, "status.json"),
                 "--auth-secret-file", harness.secret_file()],
                stdout=log, stderr=subprocess.STDOUT)
            log.close()
            deadline = time.monotonic() + 20
            while not read(port_file):
                self.assertIsNone(att._agent.poll(), "the agent exited")
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.02)
            addr = "127.0.0.1:" + read(port_file)
            step(trainer, 1)
            with wstream.Sender([addr], lanes=1) as s:
                sharding.register_model(s, trainer, trainer.spec())
                s.connect()
                # The restarted agent kept its committed version.
                self.assertEqual(s.committed_versions(), [1])
                s.push(2)
                s.wait(60)
            att.wait_version(2)
            with att.serving() as v:
                self.assertEqual(v, 2)
                self.assertTrue(same(engine, trainer))
            att._hook.check()

    def test_sidecar_layout(self):
        d = tempfile.mkdtemp(prefix="wst-attach-")
        self.addCleanup(shutil.rmtree, d, True)
        engine, trainer = TinyModel(seed=1), TinyModel(seed=0)
        with wstream.attach(engine, engine.spec(), start_agent=False,
                            workdir=d) as att:
            self.assertIsNone(att.address)
            layout = os.path.join(d, "layout.json")
            self.assertTrue(os.path.exists(layout))
            # The hook has been retrying since attach, with a growing
            # back-off: the agent starts while it waits, and the push below
            # comes before the hook connects. The agent's BEGIN waits for
            # it (this case lost that race on a fast machine before).
            time.sleep(0.7)
            log = open(os.path.join(d, "agent.log"), "w")
            agent = subprocess.Popen(
                [harness.agent_binary(), "--layout", layout,
                 "--listen", "127.0.0.1:0",
                 "--port-file", os.path.join(d, "port"),
                 "--engine-socket", os.path.join(d, "engine.sock"),
                 "--auth-secret-file", harness.secret_file()],
                stdout=log, stderr=subprocess.STDOUT)
            log.close()
            try:
                port_file = os.path.join(d, "port")
                deadline = time.monotonic() + 20
                while not read(port_file):
                    self.assertIsNone(agent.poll(), "the agent exited")
                    self.assertLess(time.monotonic(), deadline)
                    time.sleep(0.02)
                addr = "127.0.0.1:" + read(port_file)
                with wstream.Sender([addr], lanes=1) as s:
                    sharding.register_model(s, trainer, trainer.spec())
                    s.push(1, label="sidecar")
                    s.wait(60)
                att.wait_version(1)
                self.assertEqual(att.label, "sidecar")
                self.assertTrue(same(engine, trainer))
            finally:
                agent.terminate()
                agent.wait(10)


if __name__ == "__main__":
    harness.main()
