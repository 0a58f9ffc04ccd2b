"""python.engine: the engine hook (wstream.engine) against real agents,
through the Python stand-in engine; and its strictness about the lines it
is sent."""
import os
import socket
import tempfile
import threading
import time
import unittest

import harness

harness.need_torch()
import torch  # noqa: E402

import wstream  # noqa: E402
from wstream.engine import EngineHook  # noqa: E402

TENSORS = {
    "model.layers.0.w": torch.arange(35, dtype=torch.float32).reshape(5, 7),
    "model.layers.1.w": torch.arange(6, dtype=torch.int64),
    "model.norm.weight": torch.ones(9, dtype=torch.bfloat16),
}
WANTS = [harness.want(n, harness.wst_dtype(t.dtype), t.shape)
         for n, t in TENSORS.items()]


def push(rig, version=1):
    """Pushes TENSORS; the WstreamError raised by push or wait, or None."""
    with wstream.Sender(rig.addr, timeout=5, log_level="error") as s:
        s.register_all(TENSORS)
        try:
            s.push(version)
            s.wait(timeout=10)
        except wstream.WstreamError as e:
            return e
    return None


class EngineWithAgentTest(unittest.TestCase):
    def test_refusing_engine(self):
        with harness.Rig(WANTS, ["--refuse"]) as rig:
            err = push(rig)
            self.assertIsInstance(err, wstream.StateError)
            self.assertEqual((err.status, err.name), (-27, "WST_ERR_STATE"))
            self.assertIn("refused by --refuse", err.message)
            self.assertEqual(set(rig.live()), {harness.POISON},
                             "a refused refit wrote the live shm")
            st = rig.engine_state()
            self.assertEqual(st["events"], [["BEGIN", 1, "REFUSE"]])
            self.assertEqual(st["state"], "serving")
            self.assertEqual(rig.agent_status().get("committed_version", 0),
                             0)

    def test_failing_layer(self):
        with harness.Rig(WANTS, ["--fail-layer", "1"]) as rig:
            err = push(rig)
            self.assertIsInstance(err, wstream.UnusableError)
            self.assertEqual(err.name, "WST_ERR_UNUSABLE")
            rig.wait_engine(lambda st: st["state"] == "unusable",
                            "the engine to hear UNUSABLE")
            events = rig.engine_state()["events"]
            self.assertEqual(events[0], ["BEGIN", 1, "READY"])
            self.assertIn(["LAYER", 1, 1, "FAILED"], events)
            self.assertEqual(events[-1][:2], ["UNUSABLE", "WST_ERR_UNUSABLE"])
            self.assertIn("cannot refresh layer 1", events[-1][2])
            self.assertFalse(rig.agent_status()["usable"])

    def test_slow_ready_then_versions_in_order(self):
        # The stand-in hashes the shm at BEGIN and before its READY, 300 ms
        # later: any write in between makes it exit 3.
        with harness.Rig(WANTS, ["--ready-delay-ms", "300"]) as rig:
            for version in (1, 2):
                self.assertIsNone(push(rig, version))
            rig.wait_engine(lambda st: st["committed_version"] == 2,
                            "COMMITTED 2")
            kinds = [(e[0], e[-1] if e[0] != "LAYER" else e[2])
                     for e in rig.engine_state()["events"]]
            layer = ("LAYER", 1), ("LAYER", 2)
            self.assertEqual(kinds, [("BEGIN", "READY")] + [layer[0]] * 3 +
                             [("COMMITTED", 1), ("BEGIN", "READY")] +
                             [layer[1]] * 3 + [("COMMITTED", 2)])
            self.assertIsNone(rig.engine.poll())
            # A second engine is turned away by the agent.
            hook = EngineHook(rig.path("engine.sock"), connect_timeout=5)
            with self.assertRaises(wstream.BusyError):
                hook.run()


class FakeAgent:
    """The agent's end of an engine socket, played by the test, to send
    what a real agent never sends."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="wst-py-hook-")
        self.path = os.path.join(self.dir, "s")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.conn = self.rfile = None

    def accept(self):
        self.conn, _ = self.listener.accept()
        self.rfile = self.conn.makefile("rb")

    def send(self, data):
        self.conn.sendall(data)

    def reply(self):
        return self.rfile.readline()

    def hang_up(self):
        """Closes the accepted connection; the listener stays."""
        self.rfile.close()
        self.conn.close()
        self.rfile = self.conn = None

    def close(self):
        for s in (self.rfile, self.conn, self.listener):
            if s is not None:
                s.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


class HookLinesTest(unittest.TestCase):
    def stop_and_join(self, hook, thread):
        """stop() ends a serving thread, which leaves no error."""
        hook.stop()
        thread.join(5)
        self.assertFalse(thread.is_alive())
        self.assertIsNone(hook.error)

    def serve(self, script, **callbacks):
        """Runs an EngineHook against 'script' (a function of the fake
        agent); returns (exception or None, replies the script got)."""
        agent = FakeAgent()
        hook = EngineHook(agent.path, connect_timeout=5, **callbacks)
        self.hook = hook  # for callbacks that read its labels
        got = []

        def play():
            agent.accept()
            try:
                script(agent, got)
                agent.conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the hook hung up first: it found an error

        thread = threading.Thread(target=play)
        thread.start()
        try:
            hook.run()
            err = None
        except wstream.WstreamError as e:
            err = e
        thread.join(10)
        agent.close()
        return err, got

    def test_replies(self):
        seen = []

        def script(a, got):
            for line in (b"BEGIN 7\n", b"LAYER 0 7\n", b"LAYER 1 7\n"):
                a.send(line)
                got.append(a.reply())
            a.send(b"COMMITTED 7\nBEGIN 8\n")
            got.append(a.reply())
            a.send(b"UNUSABLE WST_ERR_INTEGRITY digest mismatch in layer 3\n")

        def on_layer(layer, version):
            seen.append(("layer", layer, version))
            if layer == 1:
                raise RuntimeError("bad\nweights \x01 in  layer 1")

        def on_begin(version):
            seen.append(("begin", version))
            return version != 8

        err, got = self.serve(
            script, on_begin=on_begin, on_layer=on_layer,
            on_committed=lambda v: seen.append(("committed", v)),
            on_unusable=lambda s, r: seen.append(("unusable", s, r)))
        self.assertIsNone(err)
        self.assertEqual(got, [b"READY 7\n", b"FINALIZED 0 7\n",
                               b"FAILED 1 7 bad weights in layer 1\n",
                               b"REFUSE 8 declined by on_begin\n"])
        self.assertEqual(seen, [
            ("begin", 7), ("layer", 0, 7), ("layer", 1, 7),
            ("committed", 7), ("begin", 8),
            ("unusable", "WST_ERR_INTEGRITY",
             "digest mismatch in layer 3")])

    def test_labels(self):
        # A version's label: the callbacks keep their arguments and read
        # it from the hook, set before they run; a version without one
        # has "".
        seen = []

        def script(a, got):
            a.send(b"BEGIN 7 run-4/step-7:\"x\"\n")
            got.append(a.reply())
            a.send(b"COMMITTED 7 run-4/step-7:\"x\"\nBEGIN 8\n")
            got.append(a.reply())
            a.send(b"COMMITTED 7 run-4/step-7:\"x\"\nBEGIN 9 s9\n")
            got.append(a.reply())
            a.send(b"COMMITTED 9 s9\n")

        err, got = self.serve(
            script,
            on_begin=lambda v: seen.append(("begin", v, self.hook.label)),
            on_committed=lambda v: seen.append(
                ("committed", v, self.hook.committed_label)))
        self.assertIsNone(err)
        self.assertEqual(got, [b"READY 7\n", b"READY 8\n", b"READY 9\n"])
        self.assertEqual(seen, [
            ("begin", 7, 'run-4/step-7:"x"'),
            ("committed", 7, 'run-4/step-7:"x"'),
            ("begin", 8, ""),
            ("committed", 7, 'run-4/step-7:"x"'),  # a resume
            ("begin", 9, "s9"), ("committed", 9, "s9")])

    def test_bad_labels(self):
        # After a well-labeled refit, a line whose label breaks the rule
        # ends run() with a protocol error.
        bad = [b"BEGIN 2 a b\n", b"BEGIN 2 a \n", b"BEGIN 2  a\n",
               b"BEGIN 2 " + b"x" * 64 + b"\n", b"BEGIN 2 a\x01\n",
               b"BEGIN 2 caf\xc3\xa9\n", b"LAYER 0 2 a\n",
               b"COMMITTED 1 no\x7f\n", b"COMMITTED 1 " + b"y" * 64 + b"\n"]
        for line in bad:
            def script(a, got):
                a.send(b"BEGIN 1 ok-1\n")
                got.append(a.reply())
                a.send(b"COMMITTED 1 ok-1\n" + line)

            with self.subTest(line=line[:40]):
                err, got = self.serve(script)
                self.assertEqual(got, [b"READY 1\n"])
                self.assertIsInstance(err, wstream.ProtocolError)
        err, _ = self.serve(lambda a, got: a.send(b"BEGIN 2 " + b"x" * 64 +
                                                  b"\n"))
        self.assertIn("is not a label", err.message)

    def test_resume_and_lost_agent(self):
        # COMMITTED of the version before the refit's is a resume (refused
        # before anything was written); losing the agent after READY is
        # UNUSABLE (the weights may be half written); before READY, or
        # after COMMITTED, it is nothing.
        seen = []

        def script(a, got):
            a.send(b"BEGIN 8\n")
            got.append(a.reply())
            a.send(b"COMMITTED 7\nBEGIN 9\n")
            got.append(a.reply())
            a.send(b"LAYER 0 9\n")
            got.append(a.reply())

        err, got = self.serve(
            script, on_committed=lambda v: seen.append(("committed", v)),
            on_unusable=lambda s, r: seen.append(("unusable", s, r)))
        self.assertIsNone(err)
        self.assertEqual(got, [b"READY 8\n", b"READY 9\n",
                               b"FINALIZED 0 9\n"])
        self.assertEqual(seen, [
            ("committed", 7),
            ("unusable", "WST_ERR_UNREACHABLE",
             "lost the agent during the refit of version 9 (after READY)")])

        seen.clear()

        def committed_then_gone(a, got):
            a.send(b"BEGIN 3\n")
            got.append(a.reply())
            a.send(b"COMMITTED 3\n")

        err, got = self.serve(
            committed_then_gone,
            on_committed=lambda v: seen.append(("committed", v)),
            on_unusable=lambda s, r: seen.append(("unusable", s, r)))
        self.assertIsNone(err)
        self.assertEqual(seen, [("committed", 3)])

        # A COMMITTED newer than the refit's is still a protocol error.
        def newer(a, got):
            a.send(b"BEGIN 3\n")
            got.append(a.reply())
            a.send(b"COMMITTED 4\n")

        err, got = self.serve(newer)
        self.assertIsInstance(err, wstream.ProtocolError)

    def test_long_reason_fits_a_line(self):
        def script(a, got):
            a.send(b"BEGIN 1\n")
            got.append(a.reply())

        def on_begin(version):
            raise ValueError("x" * 5000)

        err, got = self.serve(script, on_begin=on_begin)
        self.assertIsNone(err)
        self.assertEqual(len(got[0]), 600)
        self.assertTrue(got[0].startswith(b"REFUSE 1 xxx"))

    def test_protocol_errors(self):
        bad = [b"BEGIN 01\n", b"BEGIN  1\n", b"BEGIN 1 \n", b" BEGIN 1\n",
               b"BEGIN\n", b"BEGIN -1\n", b"BEGIN 18446744073709551616\n",
               b"BEGIN 1\tx\n", b"BEGIN \xc3\xa9\n", b"HELLO 1\n",
               b"LAYER 0 1\n", b"COMMITTED 1\n", b"LAYER 4294967296 1\n",
               b"UNUSABLE WST_ERR_X\n", b"UNUSABLE bad reason here\n",
               b"BEGIN " + b"1" * 700 + b"\n", b"BEGIN 1",
               b"ERROR what\n"]
        for line in bad:
            with self.subTest(line=line[:40]):
                err, _ = self.serve(lambda a, got: a.send(line))
                self.assertIsInstance(err, wstream.ProtocolError)
                self.assertEqual(err.name, "WST_ERR_PROTOCOL")

    def test_layer_of_another_version(self):
        def script(a, got):
            a.send(b"BEGIN 2\n")
            got.append(a.reply())
            a.send(b"LAYER 0 3\n")

        err, got = self.serve(script)
        self.assertEqual(got, [b"READY 2\n"])
        self.assertIsInstance(err, wstream.ProtocolError)
        self.assertIn("refitting version 2", err.message)

    def test_busy(self):
        err, _ = self.serve(lambda a, got: a.send(b"ERROR busy\n"))
        self.assertIsInstance(err, wstream.BusyError)

    def test_serve_in_thread_and_stop(self):
        agent = FakeAgent()
        begun = threading.Event()
        hook = EngineHook(agent.path, on_begin=lambda v: begun.set(),
                          connect_timeout=5)
        acceptor = threading.Thread(target=agent.accept)
        acceptor.start()
        thread = hook.serve_in_thread()
        acceptor.join(5)
        agent.send(b"BEGIN 5\n")
        self.assertEqual(agent.reply(), b"READY 5\n")
        self.assertTrue(begun.is_set())
        self.stop_and_join(hook, thread)
        agent.close()

    def test_reconnects_after_agent_and_busy(self):
        """serve_forever: an agent that closes the connection, then one
        that says busy, then one that serves: the hook comes back each
        time and answers the next BEGIN; stop() ends it."""
        agent = FakeAgent()
        committed = []
        hook = EngineHook(agent.path, on_committed=committed.append,
                          connect_timeout=5)
        thread = hook.serve_in_thread(reconnect=True)
        agent.accept()
        agent.send(b"BEGIN 1\n")
        self.assertEqual(agent.reply(), b"READY 1\n")
        agent.send(b"COMMITTED 1\n")
        agent.hang_up()                 # the agent restarts
        agent.accept()
        agent.send(b"ERROR busy\n")     # another engine holds it
        agent.hang_up()
        agent.accept()                  # back after its back-off
        agent.send(b"BEGIN 2\n")
        self.assertEqual(agent.reply(), b"READY 2\n")
        agent.send(b"COMMITTED 2\n")
        for _ in range(100):
            if committed == [1, 2]:
                break
            time.sleep(0.01)
        self.assertEqual(committed, [1, 2])
        self.assertTrue(thread.is_alive())
        hook.check()                    # nothing went wrong
        self.stop_and_join(hook, thread)
        agent.close()

    def test_check_raises_in_the_engine_thread(self):
        """A protocol error ends serve_forever; check() raises it."""
        agent = FakeAgent()
        hook = EngineHook(agent.path, connect_timeout=5)
        thread = hook.serve_in_thread(reconnect=True)
        agent.accept()
        agent.send(b"LAYER 0 9\n")      # no refit under way
        thread.join(5)
        self.assertFalse(thread.is_alive())
        with self.assertRaises(wstream.ProtocolError):
            hook.check()
        agent.close()

    def test_stop_right_after_start(self):
        """stop() just after serve_in_thread(reconnect=True) ends it, with
        no agent listening (the thread may not have started yet)."""
        hook = EngineHook("/tmp/wst-py-no-such-socket-%d" % os.getpid(),
                          connect_timeout=5)
        thread = hook.serve_in_thread(reconnect=True)
        self.stop_and_join(hook, thread)

    def test_serve_forever_checks_its_backoff(self):
        hook = EngineHook("/tmp/wst-py-no-such-socket", connect_timeout=0.1)
        with self.assertRaises(ValueError):
            hook.serve_forever(backoff=0)
        with self.assertRaises(ValueError):
            hook.serve_forever(backoff=2, backoff_max=1)

    def test_nobody_listening(self):
        hook = EngineHook("/tmp/wst-py-no-such-socket-%d" % os.getpid(),
                          connect_timeout=0.2)
        with self.assertRaises(wstream.UnreachableError):
            hook.run()


if __name__ == "__main__":
    harness.main()
