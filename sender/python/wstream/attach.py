"""wstream.attach: an engine's torch model, refitted in place by an agent.

    engine = wstream.attach(model, spec, listen="0.0.0.0:7070")
    ...
    with engine.serving():          # blocks while a refit is in flight
        logits = model(tokens)

attach() derives everything a layout file says from the model and a
wstream.sharding.Spec: one region per parameter, one want per box of a
checkpoint tensor it holds (several for a fused parameter, cut where the
rows of a box do not lie at one pitch). It exposes the parameters' own
storage to the agent:
- CPU parameters are moved into one POSIX shared-memory object this
  process creates (mode 0600, unlinked at close): each parameter's .data
  becomes a view of it, holding the same values;
- CUDA parameters stay where they are: each CUDA allocation that holds
  one is exported once by its IPC handle, and the parameter is a region
  at its offset there ("allocations" in the layout).
It then starts wstream-agent on that layout (or, with start_agent=False,
writes the layout for an agent started by someone else) and follows its
refits through the engine socket (wstream.engine.EngineHook):
- BEGIN: on_pause(v) runs, then the gate closes: serving() blocks new
  forward passes and BEGIN is answered only once those in flight ended,
  so no forward pass runs on half-written weights;
- LAYER: on_layer(l, v) refreshes what the engine derives from layer l;
- COMMITTED: the gate opens on version v; on_commit(v) runs;
- UNUSABLE: serving() raises UnusableError until a later refit commits;
  on_unusable(status, why) runs.
The agent's process is this object's: close() stops it.

Who owns what: the Attached object owns the agent process, the shm
object and its mapping, the layout and socket files in its work
directory; the model stays the caller's, but its CPU parameters' storage
is the mapping from attach() until the process exits (close() unlinks the
name, and the mapping lives as long as a tensor views it).
"""
import collections
import contextlib
import json
import mmap
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from . import errors, sharding
from ._tensors import torch_dtypes
from .engine import EngineHook

_ALIGN = 256  # bytes between parameters in the shm object
_ENV_SECRET = object()
EVENTS_KEPT = 4096  # Attached.events: about 100 refits of a 40-layer model


def _agent_binary(path):
    path = path or os.environ.get("WSTREAM_AGENT") or \
        shutil.which("wstream-agent")
    if not path or not os.access(path, os.X_OK):
        raise FileNotFoundError("wstream-agent not found: pass agent=, set "
                                "WSTREAM_AGENT or put it on PATH")
    return path


class _HostStorage:
    """One shm object that CPU parameters are moved into."""

    def __init__(self, name, params):
        self.name = name
        self.offsets, total = {}, 0
        for pname, p in params:
            self.offsets[pname] = total
            nbytes = p.numel() * p.element_size()
            total += -(-max(nbytes, 1) // _ALIGN) * _ALIGN
        self.bytes = max(total, _ALIGN)
        self.path = "/dev/shm/" + name.lstrip("/")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, self.bytes)
            self.map = mmap.mmap(fd, self.bytes, mmap.MAP_SHARED,
                                 mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError:
            os.unlink(self.path)
            raise
        finally:
            os.close(fd)

    def adopt(self, pname, param):
        """Moves param's values into the shm; param.data views them."""
        import torch
        nbytes = param.numel() * param.element_size()
        raw = torch.frombuffer(self.map, dtype=torch.uint8, count=nbytes,
                               offset=self.offsets[pname]) \
            if nbytes else torch.empty(0, dtype=torch.uint8)
        view = raw.view(param.dtype).view(param.shape)
        with torch.no_grad():
            view.copy_(param.data)
        param.data = view

    def unlink(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _cuda_region(param):
    """(device, IPC handle bytes, offset of param in the allocation,
    bytes of the allocation known to hold it)."""
    storage = param.untyped_storage() if hasattr(param, "untyped_storage") \
        else param.storage()._untyped()
    shared = storage._share_cuda_()
    device, raw, size, offset = shared[0], shared[1], shared[2], shared[3]
    start = offset + param.storage_offset() * param.element_size()
    return int(device), ipc_handle(bytes(raw)), start, offset + size


_IPC_BYTES = 64  # sizeof(cudaIpcMemHandle_t)


def ipc_handle(raw):
    """The cudaIpcMemHandle_t in what torch's _share_cuda_() returns: the
    64 bytes themselves (older torch), or a version byte (2), a type byte
    ('c': a cudaMalloc block) and the 64 bytes (torch 2.x). Anything else
    (an expandable segment, 'e', or a format this code does not know) is
    refused, saying what to change."""
    if len(raw) == _IPC_BYTES:
        return raw
    if len(raw) == _IPC_BYTES + 2 and raw[0] == 2 and raw[1] == ord("c"):
        return raw[2:]
    if len(raw) >= 2 and raw[1] == ord("e"):
        raise ValueError("a CUDA parameter lives in an expandable segment, "
                         "which CUDA IPC handles cannot name: run the engine "
                         "with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:"
                         "False")
    raise ValueError("torch shares a CUDA allocation as %d bytes starting "
                     "%r, a format wstream does not know" % (len(raw),
                                                             raw[:2]))


class Attached:
    """A model refitted by a wstream agent; made by attach()."""

    def __init__(self):
        self.version = 0          # the version the parameters hold
        self.label = ""           # its label, as the trainer pushed it
        self.state = "serving"    # serving, paused, unusable
        self.reason = ""
        # (monotonic time, kind, *args), the last EVENTS_KEPT of them: an
        # engine refits for as long as it serves, so this must not grow.
        self.events = collections.deque(maxlen=EVENTS_KEPT)
        self.layout = None        # the layout dict given to the agent
        self.placements = []
        self.address = None       # "host:port" senders push to
        self.dir = None
        self._cond = threading.Condition()
        self._active = 0
        self._host = None
        self._agent = None
        self._agent_log = None
        self._hook = None
        self._callbacks = {}
        self._own_dir = False

    def __repr__(self):
        return "<wstream.Attached %s version %d at %s>" % (
            self.state, self.version, self.address)

    # -- serving --

    @contextlib.contextmanager
    def serving(self, timeout=None):
        """Holds one forward pass: waits while a refit is in flight (up to
        'timeout' seconds, then TimedOutError), raises UnusableError while
        the weights are not whole, and keeps the next refit from starting
        until the block ends."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self.state != "serving":
                if self.state == "unusable":
                    raise errors.error(-9, "the model's weights are not "
                                       "whole: %s" % self.reason)
                self._check_hook()
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise errors.error(-5, "a refit is still in flight")
                self._cond.wait(0.1 if left is None else min(left, 0.1))
            self._active += 1
        try:
            yield self.version
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def wait_version(self, version, timeout=60.0):
        """Waits until the model serves 'version' (or above)."""
        end = time.monotonic() + timeout
        with self._cond:
            while self.version < version:
                if self.state == "unusable":
                    raise errors.error(-9, "unusable: %s" % self.reason)
                self._check_hook()
                left = end - time.monotonic()
                if left <= 0:
                    raise errors.error(-5, "version %d not committed within "
                                       "%.1f s (serving %d)"
                                       % (version, timeout, self.version))
                self._cond.wait(min(left, 0.1))

    def _check_hook(self):
        if self._hook is not None:
            self._hook.check()
        if self._agent is not None and self._agent.poll() is not None:
            raise errors.error(-6, "wstream-agent exited with %s; its log: "
                               "%s" % (self._agent.returncode,
                                       self._agent_log))

    # -- engine socket callbacks (the hook's thread) --

    def _event(self, *event):
        self.events.append((time.monotonic(),) + event)

    def _on_begin(self, version):
        fn = self._callbacks.get("on_pause")
        if fn is not None and fn(version) is False:
            return False
        with self._cond:
            self.state = "paused"
            while self._active:
                self._cond.wait()
            self._event("pause", version)
        return True

    def _on_layer(self, layer, version):
        fn = self._callbacks.get("on_layer")
        self._event("layer", layer, version)
        if fn is not None:
            return fn(layer, version)
        return True

    def _on_committed(self, version):
        hook = self._hook
        with self._cond:
            self.version = version
            self.label = hook.committed_label if hook is not None else ""
            self.state, self.reason = "serving", ""
            self._event("commit", version)
            self._cond.notify_all()
        fn = self._callbacks.get("on_commit")
        if fn is not None:
            fn(version)

    def _on_unusable(self, status, why):
        with self._cond:
            self.state, self.reason = "unusable", "%s: %s" % (status, why)
            self._event("unusable", status, why)
            self._cond.notify_all()
        fn = self._callbacks.get("on_unusable")
        if fn is not None:
            fn(status, why)

    # -- lifetime --

    def close(self):
        """Stops following refits and stops the agent (when started
        here); unlinks the shm name. The parameters keep their values."""
        if self._hook is not None:
            self._hook.stop()
            self._hook = None
        if self._agent is not None:
            if self._agent.poll() is None:
                self._agent.send_signal(signal.SIGTERM)
                try:
                    self._agent.wait(10)
                except subprocess.TimeoutExpired:
                    self._agent.kill()
                    self._agent.wait()
            self._agent = None
        if self._host is not None:
            self._host.unlink()
        if self._own_dir and self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self._own_dir = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def build_layout(model, spec, rank=0, group=None, shm_name=None):
    """(layout dict, placements, host storage or None) for 'model': see
    the module docstring. CPU parameters are moved into a new shm object
    named shm_name here, the only side effect."""
    dtypes = torch_dtypes()
    params = list(model.named_parameters())
    for name, p in params:
        if p.dtype not in dtypes:
            raise TypeError("parameter %r has dtype %s, which wstream "
                            "cannot carry" % (name, p.dtype))
        if not p.is_contiguous():
            raise ValueError("parameter %r is not contiguous" % name)
        if p.device.type not in ("cpu", "cuda"):
            raise ValueError("parameter %r is on %s; wstream refits CPU "
                             "and CUDA parameters" % (name, p.device))
    placements = spec.placements({n: tuple(p.shape) for n, p in params})
    host_params = [(n, p) for n, p in params if p.device.type == "cpu"]
    cuda_params = [(n, p) for n, p in params if p.device.type == "cuda"]
    regions, allocations, where = [], [], {}
    host = None
    if host_params:
        host = _HostStorage(shm_name or "/wst-engine-%d" % os.getpid(),
                            host_params)
        for n, p in host_params:
            host.adopt(n, p)
            where[n] = ("host", host.offsets[n])
    if cuda_params:
        by_handle, devices = {}, set()
        for n, p in cuda_params:
            device, handle, start, end = _cuda_region(p)
            devices.add(device)
            alloc = by_handle.setdefault(
                handle, {"name": "cuda%d" % len(by_handle),
                         "cuda_ipc": handle.hex(), "bytes": 0,
                         "device": device})
            alloc["bytes"] = max(alloc["bytes"], end)
            where[n] = (alloc["name"], start)
        if len(devices) > 1:
            raise ValueError("the model's CUDA parameters are on GPUs %s; "
                             "one agent serves one GPU" % sorted(devices))
        allocations.extend(by_handle.values())
    if host is not None:
        allocations.insert(0, {"name": "host", "shm": host.name,
                               "bytes": host.bytes})
    wants = []
    for (n, p), pl in zip(params, placements):
        nbytes = p.numel() * p.element_size()
        alloc, offset = where[n]
        regions.append({"name": n, "allocation": alloc, "offset": offset,
                        "bytes": max(nbytes, 1)})
        itemsize = p.element_size()
        for piece in pl.pieces:
            for start, stop, elem, pitch in sharding.want_boxes(pl.view,
                                                                piece):
                wants.append({
                    "tensor": piece.tensor, "dtype": dtypes[p.dtype],
                    "shape": list(piece.shape), "start": list(start),
                    "stop": list(stop), "region": n,
                    "offset": elem * itemsize,
                    "row_pitch": pitch * itemsize})
    layout = {"format": 1, "rank": rank, "allocations": allocations,
              "regions": regions, "wants": wants}
    if group is not None:
        gname, gsize, member = group
        layout["group"] = {"name": gname, "size": gsize, "member": member}
    return layout, placements, host


def attach(model, spec=None, listen="127.0.0.1:0", rank=0, group=None,
           start_agent=True, agent=None, agent_args=(), workdir=None,
           secret_file=_ENV_SECRET, insecure=False, on_pause=None,
           on_layer=None, on_commit=None, on_unusable=None,
           start_timeout=30.0):
    """Attaches torch module 'model' to a wstream agent; see the module
    docstring. Returns an Attached (a context manager).

    spec: a wstream.sharding.Spec (default: identity names, whole
    tensors); listen: the agent's --listen; rank: this receiver's rank in
    the layout; group: (name, size, member) when several agents serve one
    engine (tensor parallel: each commits a version only when all do);
    start_agent: start wstream-agent (the binary 'agent', $WSTREAM_AGENT
    or on PATH) with 'agent_args' added, else only write the layout to
    workdir/layout.json and follow the agent on workdir/engine.sock;
    workdir: where the layout, socket, port and status files go (default
    a new temporary directory, removed at close); secret_file: the
    deployment's secret (default $WST_AUTH_SECRET_FILE), or insecure=True.
    """
    spec = spec if spec is not None else sharding.Spec()
    if not isinstance(spec, sharding.Spec):
        raise TypeError("spec must be a wstream.sharding.Spec, not %s"
                        % type(spec).__name__)
    for what, fn in (("on_pause", on_pause), ("on_layer", on_layer),
                     ("on_commit", on_commit), ("on_unusable", on_unusable)):
        if fn is not None and not callable(fn):
            raise TypeError("%s must be callable" % what)
    if secret_file is _ENV_SECRET:
        secret_file = os.environ.get("WST_AUTH_SECRET_FILE")
    if start_agent and not secret_file and not insecure:
        raise ValueError("no deployment secret: pass secret_file= (or set "
                         "WST_AUTH_SECRET_FILE), or insecure=True")
    binary = _agent_binary(agent) if start_agent else None
    a = Attached()
    a._callbacks = {"on_pause": on_pause, "on_layer": on_layer,
                    "on_commit": on_commit, "on_unusable": on_unusable}
    try:
        if workdir is None:
            a.dir, a._own_dir = tempfile.mkdtemp(prefix="wst-engine-"), True
        else:
            os.makedirs(workdir, exist_ok=True)
            a.dir = workdir
        shm = "/wst-engine-%d-%s" % (os.getpid(),
                                     os.path.basename(a.dir.rstrip("/")))
        a.layout, a.placements, a._host = build_layout(model, spec, rank,
                                                       group, shm)
        path = os.path.join(a.dir, "layout.json")
        with open(path + ".tmp", "w") as f:
            json.dump(a.layout, f)
        os.replace(path + ".tmp", path)
        sock = os.path.join(a.dir, "engine.sock")
        if start_agent:
            _start_agent(a, binary, path, sock, listen, secret_file,
                         insecure, agent_args, start_timeout)
        a._hook = EngineHook(sock, a._on_begin, a._on_layer,
                             a._on_committed, a._on_unusable,
                             connect_timeout=start_timeout)
        a._hook.serve_in_thread(reconnect=True)
        return a
    except BaseException:
        a.close()
        raise


def _start_agent(a, binary, layout, sock, listen, secret_file, insecure,
                 agent_args, timeout):
    port_file = os.path.join(a.dir, "port")
    argv = [binary, "--layout", layout, "--listen", listen,
            "--port-file", port_file, "--engine-socket", sock,
            "--status-file", os.path.join(a.dir, "status.json")]
    argv += ["--auth-secret-file", secret_file] if secret_file \
        else ["--insecure"]
    argv += [str(x) for x in agent_args]
    a._agent_log = os.path.join(a.dir, "agent.log")
    with open(a._agent_log, "wb") as log:
        a._agent = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
    end = time.monotonic() + timeout
    while True:
        try:
            with open(port_file) as f:
                port = f.read().strip()
            if port:
                break
        except FileNotFoundError:
            pass
        if a._agent.poll() is not None:
            with open(a._agent_log, errors="replace") as f:
                tail = f.read()[-2000:]
            raise errors.error(-18, "wstream-agent exited with %d before "
                               "listening: %s" % (a._agent.returncode, tail))
        if time.monotonic() > end:
            raise errors.error(-5, "wstream-agent did not listen within "
                               "%.0f s (log %s)" % (timeout, a._agent_log))
        time.sleep(0.02)
    host = listen.rsplit(":", 1)[0]
    a.address = "%s:%s" % (host, port)
