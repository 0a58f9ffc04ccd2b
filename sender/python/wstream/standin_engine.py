"""A stand-in inference engine in Python, on top of wstream.engine.

    python3 -m wstream.standin_engine --socket PATH --shm NAME \\
        --shm-bytes N --state-file F [--refuse] [--fail-layer L] \\
        [--ready-delay-ms D]

It owns the live buffer as an engine does: it creates the POSIX shm
/dev/shm/NAME (which must not exist), poisons it with 0xA5 so that a byte
no refit wrote cannot pass for data, and unlinks it when it exits. The
agent's layout names the same shm. It then follows the agent's refits
through an EngineHook, records every event in order and rewrites its
state as JSON to --state-file after each (atomic rename), so tests can
check what the engine saw. Like the C stand-in (wstream-engine-standin)
it hashes the live bytes at BEGIN and again before READY: a write before
READY breaks the fail-closed promise and exits 3.

Exit codes: 0 when the agent closes the connection (or on SIGTERM); 1 bad
usage or set-up; 2 a protocol error; 3 live memory written before READY.
"""
import argparse
import hashlib
import json
import mmap
import os
import signal
import sys
import time

from . import errors
from .engine import EngineHook

POISON = 0xA5


def shm_path(name):
    """/dev/shm path of a POSIX shm name ("/x" or "x", as shm_open)."""
    bare = name[1:] if name.startswith("/") else name
    if not bare or "/" in bare:
        raise ValueError("shm name %r: want one path component" % name)
    return os.path.join("/dev/shm", bare)


class LiveShm:
    """The engine's live buffer: created, poisoned, unlinked at close."""

    def __init__(self, name, size):
        self.path = shm_path(name)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size, mmap.MAP_SHARED,
                                 mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError:
            os.unlink(self.path)
            raise
        finally:
            os.close(fd)
        self.map[:] = bytes([POISON]) * size

    def digest(self):
        return hashlib.blake2b(self.map).digest()

    def close(self):
        self.map.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class StandinEngine:
    """Callbacks for EngineHook that record and check; see the module."""

    def __init__(self, args, live):
        self.args, self.live = args, live
        self.hook = None  # the EngineHook: its labels (set in main)
        self.state = {"state": "serving", "connected": False,
                      "committed_version": 0, "committed_label": "",
                      "begins": 0, "layers": 0,
                      "refused": 0, "failed": 0, "reason": "",
                      "events": [], "shm": args.shm,
                      "shm_bytes": args.shm_bytes, "pid": os.getpid()}

    def write_state(self):
        path = self.args.state_file
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.state, f)
        os.replace(tmp, path)

    def _event(self, *event, label=""):
        # A version's label, when it has one, ends its event.
        self.state["events"].append(list(event) + ([label] if label else []))

    def on_begin(self, version):
        self.state["begins"] += 1
        if self.args.refuse:
            self.state["refused"] += 1
            self._event("BEGIN", version, "REFUSE", label=self.hook.label)
            self.write_state()
            raise RuntimeError("refused by --refuse")
        self._event("BEGIN", version, "READY", label=self.hook.label)
        self.state["state"] = "paused"
        self.write_state()
        before = self.live.digest()
        time.sleep(self.args.ready_delay_ms / 1000.0)
        if self.live.digest() != before:
            print("VIOLATION: live memory written before READY (BEGIN %d)"
                  % version, flush=True)
            self.live.close()
            os._exit(3)

    def on_layer(self, layer, version):
        self.state["layers"] += 1
        if layer == self.args.fail_layer:
            self.state["failed"] += 1
            self._event("LAYER", layer, version, "FAILED")
            self.write_state()
            raise RuntimeError("cannot refresh layer %d (--fail-layer)"
                               % layer)
        self._event("LAYER", layer, version, "FINALIZED")
        self.write_state()

    def on_committed(self, version):
        label = self.hook.committed_label
        self._event("COMMITTED", version, label=label)
        self.state.update(state="serving", committed_version=version,
                          committed_label=label, reason="")
        self.write_state()

    def on_unusable(self, status, reason):
        self._event("UNUSABLE", status, reason)
        self.state.update(state="unusable", reason=reason)
        self.write_state()


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m wstream.standin_engine",
                                description=__doc__.split("\n")[0])
    p.add_argument("--socket", required=True,
                   help="the agent's --engine-socket path")
    p.add_argument("--shm", required=True, help="POSIX shm name to create")
    p.add_argument("--shm-bytes", type=int, required=True,
                   help="size of the live shm")
    p.add_argument("--state-file", required=True,
                   help="write the engine state (JSON) here")
    p.add_argument("--refuse", action="store_true",
                   help="answer every BEGIN with REFUSE")
    p.add_argument("--fail-layer", type=int, default=-1,
                   help="answer LAYER of this layer with FAILED")
    p.add_argument("--ready-delay-ms", type=int, default=0,
                   help="milliseconds between BEGIN and READY")
    p.add_argument("--connect-timeout", type=float, default=20.0,
                   help="seconds to wait for the agent's socket")
    args = p.parse_args(argv)
    if args.shm_bytes <= 0:
        p.error("--shm-bytes must be positive")
    return args


def _terminate(_sig, _frame):
    sys.exit(0)  # through the finally blocks: the shm is unlinked


def main(argv=None):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        live = LiveShm(args.shm, args.shm_bytes)
    except (OSError, ValueError) as e:
        print("standin_engine: shm %s: %s" % (args.shm, e), file=sys.stderr)
        return 1
    engine = StandinEngine(args, live)
    try:
        # The shm exists now: the agent may map it.
        engine.write_state()
        hook = EngineHook(args.socket, engine.on_begin, engine.on_layer,
                          engine.on_committed, engine.on_unusable,
                          connect_timeout=args.connect_timeout)
        engine.hook = hook
        hook.connect()
        engine.state["connected"] = True
        engine.write_state()
        hook.run()
        engine.state["connected"] = False
        engine.write_state()
        return 0
    except errors.WstreamError as e:
        engine.state.update(connected=False, error=str(e))
        engine.write_state()
        print("standin_engine: %s" % e, file=sys.stderr)
        return 2 if e.status in (-3, -24) else 1  # protocol, busy
    finally:
        live.close()


if __name__ == "__main__":
    sys.exit(main())
