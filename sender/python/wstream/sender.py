"""wstream.Sender: a trainer rank's tensors pushed into wstream receivers.

    with wstream.Sender(["10.0.0.5:7070"]) as s:
        s.register_all(model.state_dict()); s.push(1); s.wait()

A thin layer over the C sender (include/wstream/sender.h) through ctypes:
arguments are checked here, before anything reaches C; every C error
raises a WstreamError subclass with the status and the sender's message.
Registered tensors are referenced until close(), since C reads their
memory at every push; update them in place between pushes. A tensor name
may be registered several times, one slice (box) of it per call.
"""
import ctypes
import os
import threading
import weakref

from . import _checks, _lib, _log, _tensors, errors


# secret_file's default: $WST_AUTH_SECRET_FILE, read at construction.
_ENV_SECRET = object()


def _destroy(lib, handle, _keepalive):
    # Also at interpreter exit (weakref.finalize), before the log callback
    # in _keepalive may be freed.
    lib.wst_sender_destroy(handle)


def _u64_array(values):
    return (ctypes.c_uint64 * len(values))(*values)


class Sender:
    """One trainer rank's sender; see the module docstring.

    receivers: "host:port" of every receiver agent (a str for one);
    rank, world_size: this rank among the senders; timeout: seconds for
    connect, plan and begin; mover: "auto", "put" or "am"; log_level:
    "error" .. "trace" (default "warn": the library's info lines, one per
    connection and refit, are for debugging); device_path: how CUDA tensors travel ("auto",
    "direct", "bounce" or "nccl"); secret_file: the deployment's secret
    (the agents' --auth-secret-file: 32+ bytes, readable by its owner
    only), default $WST_AUTH_SECRET_FILE; None or "": no secret, so only
    agents that run --insecure accept this sender; lanes: data lanes
    (UCX workers with a thread each) to stripe over, 1..8, 0 for one per
    two CPUs; lane_devices: network devices for the lanes as UCX names
    them, comma-separated ("mlx5_0:1,mlx5_1:1"; lane i uses entry i mod
    n), None for UCX's choice.
    """

    def __init__(self, receivers, rank=0, world_size=1, timeout=30.0,
                 mover="auto", log_level="warn", device_path="auto",
                 secret_file=_ENV_SECRET, lanes=0, lane_devices=None):
        addrs = _checks.receivers(receivers)
        rank, world_size = _checks.rank_world(rank, world_size)
        timeout = _checks.seconds("timeout", timeout)
        mover = _checks.choice("mover", mover, _checks.MOVERS)
        level = _checks.log_level(log_level)
        device_path = _checks.choice("device_path", device_path,
                                     _checks.DEVICE_PATHS)
        if secret_file is _ENV_SECRET:
            secret_file = os.environ.get("WST_AUTH_SECRET_FILE")
        secret = _checks.path("secret_file", secret_file)
        lanes = _checks.in_range("lanes", lanes, 0, _lib.LANES_MAX)
        if lane_devices is not None and not isinstance(lane_devices, str):
            raise TypeError("lane_devices must be a str or None, not %s"
                            % type(lane_devices).__name__)
        self._lib = _lib.load()
        self._sink = _log.LogSink("sender[%d]" % rank)
        self._lock = threading.Lock()
        self._tensors = {}  # name -> [tensor of each slice]
        self._slices = {}  # name -> [(start, stop, flat, dtype, shape)]
        self._version = 0
        self.rank, self.world_size = rank, world_size
        self.receivers = [a.decode() for a in addrs]
        c_addrs = (ctypes.c_char_p * len(addrs))(*addrs)
        p = _lib.SenderParams()
        p.field_mask = (_lib.PARAM_RANK | _lib.PARAM_WORLD_SIZE |
                        _lib.PARAM_RECEIVERS | _lib.PARAM_TIMEOUT |
                        _lib.PARAM_MOVER | _lib.PARAM_LOG |
                        _lib.PARAM_DEVICE_PATH | _lib.PARAM_AUTH |
                        _lib.PARAM_LANES | _lib.PARAM_LANE_DEVICES)
        p.rank, p.world_size = rank, world_size
        p.receivers, p.n_receivers = c_addrs, len(addrs)
        p.timeout_s = timeout
        p.mover = mover.encode()
        p.log_level = level
        p.log_fn = self._sink.c_fn
        p.device_path = device_path.encode()
        p.auth_secret_file = secret
        p.lanes = lanes
        p.lane_devices = lane_devices.encode() if lane_devices else None
        handle = ctypes.c_void_p()
        self._sink.begin()
        error = None
        try:
            status = self._lib.wst_sender_create(ctypes.byref(p),
                                                 ctypes.byref(handle))
            if status != 0:
                error = self._error(status, None, "cannot create the sender")
        finally:
            self._sink.end(error.message if error is not None else None)
        if error is not None:
            raise error
        self._handle = handle.value
        self._finalizer = weakref.finalize(self, _destroy, self._lib,
                                           self._handle, self._sink)

    def __repr__(self):
        return "<wstream.Sender rank %d of %d to %s: %d tensors, %s>" % (
            self.rank, self.world_size, ", ".join(self.receivers),
            len(self._tensors),
            "closed" if self.closed else "version %d" % self._version)

    # -- context manager and lifetime --

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Closes connections and frees the C sender; idempotent."""
        with self._lock:
            self._finalizer()
            self._tensors.clear()
            self._slices.clear()

    @property
    def closed(self):
        return not self._finalizer.alive

    # -- the API --

    def register(self, name, tensor, shape=None, start=None, stop=None):
        """Registers 'tensor' as this rank's shard of checkpoint tensor
        'name' (before the first push).

        shape: the global shape (default tensor.shape); start, stop: the
        shard's box in it (default the whole shape), as sequences, or as
        two ints for a flat range of the flattened tensor. The tensor must
        be contiguous and hold exactly the box's elements, row-major.

        Registering a name again adds another slice of that tensor, with
        its own box and tensor (N-D and flat boxes may mix): a receiver
        wanting a box across several slices gets each part from its own.
        A slice whose dtype or global shape differs from an earlier
        slice's, or that shares an element with one, is refused
        (ValueError naming both).
        """
        raw_name = _checks.tensor_name(name)
        info = _tensors.describe(name, tensor, _lib.MEM_HOST, _lib.MEM_CUDA)
        if shape is None:
            if not info.shape:
                raise ValueError("tensor %r is 0-dim: pass shape=(1,) to "
                                 "send it as one element" % name)
            shape = info.shape
        shp = _checks.shape(shape, info.itemsize)
        lo, hi, flat = _checks.box(shp, start, stop)
        extents = tuple(b - a for a, b in zip(lo, hi))
        want = 1
        for e in extents:
            want *= e
        if info.numel != want or (info.shape and not flat and
                                  info.shape != extents):
            raise ValueError(
                "tensor %r has shape %s (%d elements) but its box %s..%s "
                "of shape %s holds %s (%d elements)"
                % (name, list(info.shape), info.numel, list(lo), list(hi),
                   list(shp), "a flat range" if flat else list(extents),
                   want))
        piece = (lo, hi, flat, info.dtype_name, shp)
        with self._lock:
            self._check_open()
            if self._version:
                raise ValueError("tensor %r: register before the first "
                                 "push" % name)
            _checks.slice_fits(name, self._slices.get(name, ()), piece)
            shard = _lib.Shard(
                name=raw_name, data=info.data or None, mem_type=info.mem_type,
                dtype=info.dtype, ndim=len(shp), shape=_u64_array(shp),
                box_start=_u64_array(lo), box_stop=_u64_array(hi),
                flat=int(flat))
            self._call("register %r" % name, self._lib.wst_sender_register,
                       ctypes.byref(shard))
            self._tensors.setdefault(name, []).append(tensor)
            self._slices.setdefault(name, []).append(piece)

    def register_all(self, tensors):
        """Registers every (name, tensor) of a dict, e.g. a state_dict():
        each the whole of its tensor, as rank 0 of 1 senders does. A 0-dim
        tensor goes as shape (1,), the only shape wstream has for it."""
        if not hasattr(tensors, "items"):
            raise TypeError("register_all takes a dict of name -> tensor, "
                            "not %s" % type(tensors).__name__)
        for name, tensor in tensors.items():
            scalar = getattr(tensor, "dim", None) and tensor.dim() == 0
            self.register(name, tensor, shape=(1,) if scalar else None)

    def push(self, version, cuda_event=None, label=None):
        """Starts pushing 'version' (above every version pushed before) to
        every receiver; returns once the refit is under way.

        cuda_event: a torch.cuda.Event recorded after the GPU work that
        wrote the tensors; the push reads them only after it. Leave the
        tensors unchanged until wait() returns: they are read meanwhile.
        label: a free-form name for the version ("step-1200", a run or
        git id): at most 63 characters of printable ASCII without spaces;
        each receiver keeps it with the version once committed (its status,
        metrics, engine) and committed_labels() reads it back. Every rank
        of a push must give the same label.
        """
        version = _checks.in_range("version", version, 1, _checks.U64_MAX)
        raw_label = _checks.label(label)
        p = _lib.PushParams()
        if cuda_event is not None:
            p.field_mask |= _lib.PUSH_CUDA_EVENT
            p.cuda_event = _tensors.event_handle(cuda_event)
        if raw_label is not None:
            p.field_mask |= _lib.PUSH_LABEL
            p.label = raw_label
        with self._lock:
            self._check_open()
            if version <= self._version:
                raise ValueError("version %d is not above the last pushed "
                                 "(%d)" % (version, self._version))
            self._call("push %d" % version, self._lib.wst_sender_push_with,
                       version, ctypes.byref(p))
            self._version = version

    def connect(self):
        """Connects to every receiver and exchanges manifests and plans, as
        the first push does, without pushing (register first)."""
        with self._lock:
            self._check_open()
            self._call("connect", self._lib.wst_sender_connect)

    def committed_versions(self):
        """The version each receiver holds committed (0: none), as it last
        said: after connect() or a push; a restarted trainer numbers its
        next version above the largest."""
        with self._lock:
            self._check_open()
            return [self._lib.wst_sender_committed_version(self._handle, i)
                    for i in range(len(self.receivers))]

    def committed_labels(self):
        """The label of the version each receiver holds committed ("":
        none), as it last said; next to committed_versions()."""
        with self._lock:
            self._check_open()
            out = []
            for i in range(len(self.receivers)):
                buf = ctypes.create_string_buffer(_lib.LABEL_MAX)
                self._call("committed label",
                           self._lib.wst_sender_committed_label, i, buf,
                           len(buf))
                out.append(buf.value.decode("ascii", "replace"))
            return out

    def wait(self, timeout=60.0):
        """Waits until every receiver committed the pushed version."""
        timeout = _checks.seconds("timeout", timeout)
        with self._lock:
            self._check_open()
            self._call("wait", self._lib.wst_sender_wait, timeout)

    # -- what the last push did --

    @property
    def version(self):
        """The last version pushed successfully (0: none)."""
        return self._version

    @property
    def tensors(self):
        """{name: tensor} of what is registered (a copy); a name registered
        as several slices maps to a tuple of their tensors, in the order
        they were registered."""
        return {name: ts[0] if len(ts) == 1 else tuple(ts)
                for name, ts in self._tensors.items()}

    @property
    def bytes_moved(self):
        """Bytes this sender moved in the last push."""
        with self._lock:
            self._check_open()
            return self._lib.wst_sender_bytes_moved(self._handle)

    def lanes(self):
        """The data lanes UCX chose per receiver (None if unknown)."""
        with self._lock:
            self._check_open()
            return [self._text(self._lib.wst_sender_lanes(self._handle, i))
                    for i in range(len(self.receivers))]

    # -- helpers --

    @staticmethod
    def _text(raw):
        return raw.decode("utf-8", "replace") if raw is not None else None

    def _check_open(self):
        if not self._finalizer.alive:
            raise ValueError("the sender is closed")

    def _call(self, what, fn, *args):
        self._sink.begin()
        error = None
        try:
            status = fn(self._handle, *args)
            if status != 0:
                error = self._error(status, self._handle, what + " failed")
        finally:
            self._sink.end(error.message if error is not None else None)
        if error is not None:
            raise error

    def _error(self, status, handle, fallback):
        message = ""
        if handle is not None:
            message = self._text(self._lib.wst_sender_last_error(handle))
        message = message or self._sink.last_error() or fallback
        name = self._text(self._lib.wst_status_name(status))
        return errors.error(status, message, name)
