"""wstream.engine: the inference engine's end of the agent's engine socket.

An engine that serves from memory a wstream-agent refits embeds an
EngineHook: it connects to the agent's --engine-socket and turns each
message into a callback, answering for it:

    BEGIN v         -> on_begin(v): stop serving; returns -> READY v,
                       raises (or returns False) -> REFUSE v <reason>
    LAYER l v       -> on_layer(l, v): refresh what derives from layer l;
                       returns -> FINALIZED l v, raises -> FAILED l v <reason>
    COMMITTED v     -> on_committed(v): resume serving version v: the one
                       the refit brought, or, when the refit was refused
                       before anything was written, the one held before it
    UNUSABLE s why  -> on_unusable(s, why): stop serving, the weights are
                       not whole

A version may come with a label ("BEGIN v step-1200", "COMMITTED v
step-1200": the trainer's free-form name for it). The callbacks keep
their arguments; the hook's attributes say it: .label is the label of
the refit under way (set before on_begin runs; "" for none) and
.committed_label that of the version served (set before on_committed).

Losing the agent between READY and COMMITTED (it died mid-refit) is
UNUSABLE too: on_unusable("WST_ERR_UNREACHABLE", why) runs before run()
returns, since the live weights may be half written.

Lines are checked strictly: a malformed one, a LAYER or COMMITTED outside
the refit that the last BEGIN started, or "ERROR busy" (another engine is
connected) ends run() with a WstreamError, as does an exception from
on_committed or on_unusable (there is no reply to carry it). The agent
closing the connection ends run() normally; the agent drops an engine
that answers late or wrongly, and run() again reconnects.

serve_forever() (and serve_in_thread(reconnect=True)) keeps the engine
attached across agent restarts: when the agent goes away, or says busy
(another engine still holds the socket), or is not listening yet, it
connects again after a back-off that doubles from backoff to backoff_max
and starts over once a connection carried a message. It ends on stop(),
or raises on a protocol error or an exception from a callback; a
serving thread keeps that exception, and check() raises it in the
engine's own thread (call it from the serving loop).
"""
import errno
import socket
import threading
import time

from . import _engine_lines as lines
from . import errors

_RETRY_ERRNOS = (errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN)


class EngineHook:
    """A client of one agent's engine socket; see the module docstring."""

    def __init__(self, socket_path, on_begin=None, on_layer=None,
                 on_committed=None, on_unusable=None, connect_timeout=10.0):
        if not isinstance(socket_path, str) or not socket_path:
            raise TypeError("socket_path must be a non-empty str")
        if len(socket_path.encode()) >= 108:  # sizeof(sun_path)
            raise ValueError("socket path %r is too long for a Unix socket"
                             % socket_path)
        for what, fn in (("on_begin", on_begin), ("on_layer", on_layer),
                         ("on_committed", on_committed),
                         ("on_unusable", on_unusable)):
            if fn is not None and not callable(fn):
                raise TypeError("%s must be callable" % what)
        self.socket_path = socket_path
        self.connect_timeout = float(connect_timeout)
        self._on_begin, self._on_layer = on_begin, on_layer
        self._on_committed, self._on_unusable = on_committed, on_unusable
        self._sock = None
        self._buf = b""
        self._active = None  # the version the last READY accepted
        self._stopping = False
        self._served = False  # this connection carried a message
        self._forever = False  # serve_forever runs
        self.error = None    # what ended serve_in_thread's run(), if any
        self.label = ""      # the label of the last BEGIN's version
        self.committed_label = ""  # the served version's, as COMMITTED said

    # -- connection --

    def connect(self):
        """Connects, retrying until connect_timeout (the agent may still be
        starting); UnreachableError if it never listens."""
        if self._sock is not None:
            return
        # A new connection starts clean: no half line, no refit under way;
        # and a hook stopped before can serve again, unless serve_forever
        # is running it (a stop() then must end it).
        self._buf, self._active = b"", None
        if not self._forever:
            self._stopping = False
        deadline = time.monotonic() + self.connect_timeout
        while True:
            if self._stopping:
                raise errors.error(-6, "stopped while connecting to %s"
                                   % self.socket_path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.socket_path)
                self._sock = sock
                return
            except OSError as e:
                sock.close()
                if e.errno not in _RETRY_ERRNOS or \
                        time.monotonic() >= deadline:
                    raise errors.error(-6, "cannot connect to the agent's "
                                       "engine socket %s: %s"
                                       % (self.socket_path, e)) from None
            time.sleep(0.05)

    def stop(self):
        """Makes run() return (from any thread) and closes the socket."""
        self._stopping = True
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # -- serving --

    def run(self):
        """Serves the agent's messages until it closes the connection (or
        stop()); connects first if needed. Raises on protocol errors."""
        if self._sock is None:
            self.connect()
        try:
            while True:
                raw = self._read_line()
                if raw is None:
                    break
                msg = lines.parse(raw)
                if msg[0] != "ERROR":
                    self._served = True
                self._dispatch(msg)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the agent went away: as EOF
        finally:
            self.close()
        self._lost_agent()

    def _lost_agent(self):
        """The agent is gone: after READY and before COMMITTED, the live
        weights may be half written."""
        version, self._active = self._active, None
        if version is None or self._stopping:
            return
        if self._on_unusable is not None:
            self._on_unusable("WST_ERR_UNREACHABLE",
                              "lost the agent during the refit of version "
                              "%d (after READY)" % version)

    def serve_forever(self, backoff=0.05, backoff_max=2.0):
        """run(), again and again: reconnects after the agent went away,
        said busy or was not listening, with a back-off doubling from
        backoff to backoff_max seconds. Returns after stop(); raises on a
        protocol error or an exception from a callback."""
        if not 0 < backoff <= backoff_max:
            raise ValueError("want 0 < backoff <= backoff_max, got %r, %r"
                             % (backoff, backoff_max))
        delay = backoff
        if not self._forever:  # a hook stopped before may serve again
            self._stopping = False
        self._forever = True
        try:
            while not self._stopping:
                try:
                    self._served = False
                    self.run()
                except (errors.BusyError, errors.UnreachableError):
                    self.close()
                if self._stopping:
                    break
                if self._served:
                    delay = backoff
                self._sleep(delay)
                delay = min(2 * delay, backoff_max)
        finally:
            self._forever = False

    def _sleep(self, seconds):
        """Sleeps, but returns early once stop() was called."""
        end = time.monotonic() + seconds
        while not self._stopping and time.monotonic() < end:
            time.sleep(min(0.02, max(0.0, end - time.monotonic())))

    def check(self):
        """In the engine's thread: raises what ended the serving thread
        (a protocol error, an exception from a callback), if anything."""
        if self.error is not None:
            raise self.error

    def serve_in_thread(self, name="wstream-engine-hook", reconnect=False):
        """Runs the loop in a daemon thread; its exception, if any, lands
        in .error (check() raises it). Without reconnect it connects here
        first (so that failures raise here) and serves one connection;
        with it, serve_forever() in the thread."""
        if not reconnect and self._sock is None:
            self.connect()
        if reconnect:
            # Here, not in the thread: a stop() right after this returns
            # must not be undone by the thread's start.
            self._stopping, self._forever = False, True
        target = self.serve_forever if reconnect else self.run
        thread = threading.Thread(target=self._run_catching, args=(target,),
                                  name=name, daemon=True)
        thread.start()
        return thread

    def _run_catching(self, target):
        try:
            target()
        except BaseException as e:  # reported through .error
            self.error = e

    def _read_line(self):
        while b"\n" not in self._buf:
            if len(self._buf) >= lines.LINE_MAX:
                raise lines.protocol_error("agent line longer than %d bytes"
                                           % lines.LINE_MAX)
            try:
                chunk = self._sock.recv(4096)
            except OSError:
                if self._stopping:
                    return None
                raise
            if not chunk:
                if self._buf and not self._stopping:
                    raise lines.protocol_error("agent closed the connection "
                                               "inside a line")
                return None
            self._buf += chunk
        raw, _, self._buf = self._buf.partition(b"\n")
        if len(raw) + 1 > lines.LINE_MAX:
            raise lines.protocol_error("agent line longer than %d bytes"
                                       % lines.LINE_MAX)
        return raw

    def _send(self, data):
        self._sock.sendall(data)

    def _dispatch(self, msg):
        kind = msg[0]
        if kind == "ERROR":
            if msg[1] == "busy":
                raise errors.error(-24, "another engine is connected to "
                                   "the agent on %s" % self.socket_path)
            raise lines.protocol_error("agent sent ERROR %s" % msg[1])
        if kind == "BEGIN":
            self.label = msg[2]
            self._begin(msg[1])
        elif kind == "LAYER":
            self._layer(msg[1], msg[2])
        elif kind == "COMMITTED":
            # The refit's version, or an older one: resume (refused).
            self._expect_active("COMMITTED %d" % msg[1], msg[1], resume=True)
            self._active = None
            self.committed_label = msg[2]
            if self._on_committed is not None:
                self._on_committed(msg[1])
        else:  # UNUSABLE
            self._active = None
            if self._on_unusable is not None:
                self._on_unusable(msg[1], msg[2])

    def _expect_active(self, what, version, resume=False):
        if self._active is None or version > self._active or \
                (version != self._active and not resume):
            raise lines.protocol_error(
                "agent sent %s while %s" % (what, "no refit is under way"
                                            if self._active is None else
                                            "refitting version %d"
                                            % self._active))

    @staticmethod
    def _ask(fn, *args):
        """(True, None) when fn accepts, else (False, why)."""
        if fn is None:
            return True, None
        try:
            result = fn(*args)
        except Exception as e:
            return False, str(e) or type(e).__name__
        if result is False:
            return False, "declined by %s" % getattr(fn, "__name__", "hook")
        return True, None

    def _begin(self, version):
        # A BEGIN may follow a refit that failed without a COMMITTED: it
        # starts a new one either way.
        self._active = None
        ok, why = self._ask(self._on_begin, version)
        if ok:
            self._active = version
            self._send(lines.reply(["READY", version]))
        else:
            self._send(lines.reply(["REFUSE", version], why))

    def _layer(self, layer, version):
        self._expect_active("LAYER %d %d" % (layer, version), version)
        ok, why = self._ask(self._on_layer, layer, version)
        if ok:
            self._send(lines.reply(["FINALIZED", layer, version]))
        else:
            self._send(lines.reply(["FAILED", layer, version], why))
