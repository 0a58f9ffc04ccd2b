"""Real wstream-agent processes and Python stand-in engines for the tests.

A Rig is one receiver as a deployment has it: the stand-in engine
(python3 -m wstream.standin_engine) creates and poisons the live POSIX
shm, then the agent maps it from a layout file and serves refits on
127.0.0.1 over UCX (TCP loopback), telling the engine through its engine
socket. Tests read the shm back from /dev/shm, independently of both.

Every Rig's agent and every Sender of the test process share one
deployment secret (secret_file(): 32 random bytes, mode 0600), which the
harness also puts in WST_AUTH_SECRET_FILE, the Sender's default.

Environment (set by tests/python/CMakeLists.txt): WSTREAM_AGENT, the agent
binary; PYTHONPATH with sender/python; WSTREAM_LIB, the sender library.
"""
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

POISON = 0xA5
_LOGS = []  # of every closed Rig, printed by main() when a test failed
ALIGN = 64  # region offsets; every region is followed by a poisoned gap
GAP = 64


def need_torch():
    """Exits 77 (ctest: skipped), saying why on stderr, without torch."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print("SKIP: torch is not importable (%s); install python3-torch "
              "to run the Python tests" % e, file=sys.stderr)
        sys.exit(77)


_SECRET = []


def secret_file():
    """The test process's deployment secret, created on first use and put
    in WST_AUTH_SECRET_FILE (inherited by child processes)."""
    if not _SECRET:
        d = tempfile.mkdtemp(prefix="wst-py-secret-")
        atexit.register(shutil.rmtree, d, True)
        path = os.path.join(d, "secret")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32))
        os.environ["WST_AUTH_SECRET_FILE"] = path
        _SECRET.append(path)
    return _SECRET[0]


def agent_binary():
    path = os.environ.get("WSTREAM_AGENT", "")
    if not os.access(path, os.X_OK):
        raise RuntimeError("WSTREAM_AGENT=%r is not an executable agent "
                           "(run the tests through ctest)" % path)
    return path


def wst_dtype(torch_dtype):
    import torch
    return {torch.bfloat16: "bf16", torch.float16: "f16",
            torch.float32: "f32", torch.float64: "f64", torch.int8: "i8",
            torch.uint8: "u8", torch.int32: "i32",
            torch.int64: "i64"}[torch_dtype]


def want(tensor, dtype, shape, start=None, stop=None):
    """One want: box [start, stop) of a tensor (default: all of it)."""
    return {"tensor": tensor, "dtype": dtype, "shape": list(shape),
            "start": list(start or [0] * len(shape)),
            "stop": list(stop or shape)}


_ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i8": 1, "u8": 1,
             "i32": 4, "i64": 8}


def _box_bytes(w):
    n = _ITEMSIZE[w["dtype"]]
    for a, b in zip(w["start"], w["stop"]):
        n *= b - a
    return n


class Rig:
    """An engine and an agent serving 'wants'; a context manager."""

    def __init__(self, wants, engine_args=(), agent_timeout=5.0):
        self.dir = tempfile.mkdtemp(prefix="wst-py-")
        self.shm = "/wst-py-%d-%s" % (os.getpid(),
                                      os.path.basename(self.dir)[7:])
        self.wants, self.offsets, offset = [], {}, 0
        for w in wants:
            w = dict(w, region=w["tensor"], offset=0)
            self.offsets[w["tensor"]] = offset
            self.wants.append(w)
            offset += -(-(_box_bytes(w) + GAP) // ALIGN) * ALIGN
        self.shm_bytes = max(offset, ALIGN)
        self.engine = self.agent = None
        self.addr = None
        self._start(engine_args, agent_timeout)

    def path(self, name):
        return os.path.join(self.dir, name)

    def _layout(self):
        regions = [{"name": w["tensor"], "offset": self.offsets[w["tensor"]],
                    "bytes": max(_box_bytes(w), 1)} for w in self.wants]
        return {"format": 1, "rank": 0, "shm": self.shm,
                "shm_bytes": self.shm_bytes, "regions": regions,
                "wants": self.wants}

    def _start(self, engine_args, agent_timeout):
        try:
            self.engine = self._spawn(
                [sys.executable, "-m", "wstream.standin_engine",
                 "--socket", self.path("engine.sock"), "--shm", self.shm,
                 "--shm-bytes", str(self.shm_bytes),
                 "--state-file", self.path("engine.json")] +
                list(engine_args), "engine.log")
            self._wait(lambda: os.path.exists(self.path("engine.json")),
                       self.engine, "the engine's state file")
            with open(self.path("layout.json"), "w") as f:
                json.dump(self._layout(), f)
            self.agent = self._spawn(
                [agent_binary(), "--layout", self.path("layout.json"),
                 "--listen", "127.0.0.1:0", "--port-file", self.path("port"),
                 "--engine-socket", self.path("engine.sock"),
                 "--status-file", self.path("status.json"),
                 "--timeout", str(agent_timeout), "--heartbeat", "0.5",
                 "--peer-timeout", "2", "--auth-secret-file", secret_file()],
                "agent.log")
            self._wait(lambda: self._read("port").strip().isdigit(),
                       self.agent, "the agent's port file")
            self.addr = "127.0.0.1:%s" % self._read("port").strip()
            # Connected as the agent sees it: a BEGIN finds the engine.
            self._wait(lambda: "engine connected" in self._read("agent.log"),
                       self.agent, "the engine to connect")
        except BaseException:
            self.close(dump=True)
            raise

    def _spawn(self, argv, log_name):
        with open(self.path(log_name), "w") as log:
            return subprocess.Popen(argv, stdout=log,
                                    stderr=subprocess.STDOUT)

    def _read(self, name):
        try:
            with open(self.path(name)) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def _wait(self, done, proc, what, timeout=20.0):
        deadline = time.monotonic() + timeout
        while not done():
            if proc.poll() is not None:
                raise RuntimeError("process exited (%d) while waiting for "
                                   "%s" % (proc.returncode, what))
            if time.monotonic() > deadline:
                raise RuntimeError("timed out waiting for %s" % what)
            time.sleep(0.02)

    # -- what the test checks --

    def engine_state(self):
        return json.loads(self._read("engine.json"))

    def agent_status(self):
        text = self._read("status.json")
        return json.loads(text) if text else {}

    def live(self):
        """The whole live shm, read from /dev/shm by path."""
        with open("/dev/shm" + self.shm, "rb") as f:
            return f.read()

    def region(self, tensor):
        """The bytes of one want, and the poisoned gap after it."""
        w = next(w for w in self.wants if w["tensor"] == tensor)
        live, off, n = self.live(), self.offsets[tensor], _box_bytes(w)
        return live[off:off + n], live[off + n:off + n + GAP]

    def wait_engine(self, done, what, timeout=10.0):
        """Polls the engine's state until done(state)."""
        self._wait(lambda: done(self.engine_state()), self.engine, what,
                   timeout)

    # -- teardown --

    def logs(self):
        return "".join("---- %s ----\n%s" % (n, self._read(n))
                       for n in ("agent.log", "engine.log", "engine.json"))

    def close(self, dump=False):
        """Stops both processes (SIGTERM), keeps their logs for main() and
        removes the shm and the folder."""
        for proc in (self.agent, self.engine):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        _LOGS.append(self.logs())
        if dump:
            sys.stderr.write(self.logs())
        try:
            os.unlink("/dev/shm" + self.shm)  # the engine's, if it died
        except FileNotFoundError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *_):
        self.close(dump=exc_type is not None)


def tensor_bytes(t):
    """A CPU tensor's bytes, read through numpy (not through wstream)."""
    import torch
    if t.numel() == 0:
        return b""
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def random_tensor(shape, dtype, gen):
    """Random bit patterns (NaNs, infinities, denormals included)."""
    import torch
    n = 1
    for d in shape:
        n *= d
    size = torch.tensor([], dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8,
                        generator=gen)
    return raw.view(dtype).reshape(shape)


def main():
    """Runs the module's tests; on a failure prints every rig's logs.
    Exit code 0 or 1."""
    import unittest
    prog = unittest.main(module="__main__", verbosity=2, exit=False)
    ok = prog.result.wasSuccessful()
    if not ok:
        sys.stderr.write("".join(_LOGS))
    sys.exit(0 if ok else 1)
