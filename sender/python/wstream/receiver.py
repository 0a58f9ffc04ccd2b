"""wstream.Receiver: the receiver hosted in the engine's own process.

    with wstream.Receiver(port=7070, on_begin=pause, on_layer=refresh,
                          on_committed=resume, on_unusable=stop) as r:
        rid = r.add_region("qkv", live_buffer)
        r.add_want("model.layers.0.self_attn.q_proj.weight", "bf16",
                   (4096, 4096), rid)
        port = r.start()
        ...   # senders push versions; the hooks run on the engine thread

A thin layer over the C receiver (include/wstream/receiver.h) in
libwstream_receiver.so, through ctypes, without torch: regions are
writable buffers (bytearray, mmap, ctypes arrays, numpy arrays) or raw
(address, nbytes) host memory or (address, nbytes, device) CUDA memory.
Every argument is checked here, before anything reaches C; a C error
raises a WstreamError subclass with the receiver's logged message.

The sidecar, wstream-agent, stays the default deployment (Kubernetes:
deploy/); this is for an engine that would rather not run a second
process, and gets the same receiver: the same planning, digests and
fail-closed refits.
"""
import ctypes
import os
import threading
import time
import weakref

from . import _checks, _log, errors
from . import _receiver_args as args
from . import _receiver_hooks
from . import _receiver_lib as rl

# secret_file's default: $WST_AUTH_SECRET_FILE, read at construction.
_ENV_SECRET = object()
_WAIT_SLICE = 0.25  # seconds; close() is seen this often by a waiter


def _destroy(lib, handle, _keepalive):
    # Also at interpreter exit (weakref.finalize): the hooks, the log sink
    # and the regions' buffers in _keepalive outlive the C receiver.
    lib.wst_receiver_destroy(handle)


def _u64_array(values):
    return (ctypes.c_uint64 * len(values))(*values)


def _text(raw):
    return raw.decode("utf-8", "replace")


class Receiver:
    """One receiver in this process; see the module docstring.

    host, port: where senders connect (port 0: any free port; start()
    returns it); rank: this receiver's rank among receivers; group,
    group_size, group_member: the engine group (the receivers of one
    tensor/expert-parallel engine; None: a group of one); secret_file:
    the deployment's secret (32 to 4096 bytes, readable by its owner
    only), default $WST_AUTH_SECRET_FILE; insecure=True instead accepts
    only senders without a secret (as wstream-agent --insecure); timeout:
    seconds for manifests and a stalled refit; heartbeat, peer_timeout:
    control-channel liveness; mover: "auto" or "am"; verify: check
    every layer's digest, on verify_threads threads (0: three for every
    four lanes, at least 2); lanes: data lanes 1..8 (0: one per two
    CPUs); lane_devices: their network devices as UCX names them
    ("mlx5_0:1,mlx5_1:1"), None for UCX's choice; device_ring_bytes: the
    GPU memory data for an engine's CUDA IPC buffers lands in first, with
    a CUDA-aware UCX (whole MiB, 8 MiB to 64 GiB);
    staging_slots: MoE layers staged at once; max_manifest_entries (0: auto),
    max_manifest_bytes, max_unranked_peers: what senders may make it
    hold; initial_committed_version, initial_unusable_reason,
    initial_committed_label: where a restarted engine starts; log_level:
    "error" .. "trace" (default "warn"); log_name:
    the name in log lines. Defaults are the C library's.

    Hooks, each optional, run on the receiver's engine thread, in this
    order per refit: on_begin(version) (stop serving; raise, or return
    False, to refuse: nothing is written), on_layer(layer, version) per
    layer (refresh what derives from it; raise to fail the refit),
    then on_committed(version) (serve it; also the version held before,
    when a refit was refused after on_begin accepted) or
    on_unusable(status_name, reason) (stop serving: the buffers are not
    a whole version). They are the callbacks of wstream.EngineHook, so
    an engine serves either way with the same functions. A hook must not
    call close().
    """

    def __init__(self, host="0.0.0.0", port=0, rank=0, group=None,
                 group_size=1, group_member=0, secret_file=_ENV_SECRET,
                 insecure=False, timeout=30.0, heartbeat=1.0,
                 peer_timeout=5.0, mover="auto", verify=True,
                 verify_threads=0, lanes=0, lane_devices=None,
                 device_ring_bytes=1 << 30, staging_slots=2, max_manifest_entries=0,
                 max_manifest_bytes=512 << 20, max_unranked_peers=8,
                 initial_committed_version=0, initial_unusable_reason=None,
                 initial_committed_label=None, log_level="warn",
                 log_name=None, on_begin=None,
                 on_layer=None, on_committed=None, on_unusable=None):
        p = rl.ReceiverParams()
        p.listen_host = args.host(host)
        p.listen_port = _checks.in_range("port", port, 0, args.U16_MAX)
        p.rank = _checks.in_range("rank", rank, 0, args.U32_MAX)
        p.group, p.group_size, p.group_member = args.group(
            group, group_size, group_member)
        p.auth_secret_file = self._secret(secret_file, insecure)
        p.timeout_s = _checks.seconds("timeout", timeout)
        p.heartbeat_s, p.peer_timeout_s = args.heartbeat(heartbeat,
                                                         peer_timeout)
        p.mover = _checks.choice("mover", mover,
                                 args.RECEIVER_MOVERS).encode()
        p.verify = args.flag("verify", verify)
        p.verify_threads = _checks.in_range("verify_threads", verify_threads,
                                            0, args.VERIFY_THREADS_MAX)
        p.lanes = _checks.in_range("lanes", lanes, 0, rl.LANES_MAX)
        # The list's syntax is the C library's to check; it says why.
        p.lane_devices = args.text("lane_devices", lane_devices, 1023)
        # Its bounds and granularity are the C library's to check.
        p.device_ring_bytes = _checks.in_range(
            "device_ring_bytes", device_ring_bytes, 0, args.U64_MAX)
        p.staging_slots = _checks.in_range("staging_slots", staging_slots, 1,
                                           args.STAGING_SLOTS_MAX)
        p.max_manifest_entries = _checks.in_range(
            "max_manifest_entries", max_manifest_entries, 0,
            args.MANIFEST_ENTRIES_MAX)
        p.max_manifest_bytes = _checks.in_range(
            "max_manifest_bytes", max_manifest_bytes, 1, args.U64_MAX)
        p.max_unranked_peers = _checks.in_range(
            "max_unranked_peers", max_unranked_peers, 1, args.U32_MAX)
        p.initial_committed_version = _checks.in_range(
            "initial_committed_version", initial_committed_version, 0,
            args.U64_MAX)
        p.initial_unusable_reason = args.text(
            "initial_unusable_reason", initial_unusable_reason,
            args.REASON_MAX)
        # The label's rule (63 printable bytes, no space) is the C
        # library's to check; it says why.
        p.initial_committed_label = args.text(
            "initial_committed_label", initial_committed_label,
            rl.LABEL_MAX - 1)
        p.log_level = _checks.log_level(log_level)
        if log_name is None:
            log_name = "receiver[%d]" % p.rank
        p.log_name = args.text("log_name", log_name, args.LOG_NAME_MAX,
                               none_ok=False, empty_ok=False)
        for what, fn in (("on_begin", on_begin), ("on_layer", on_layer),
                         ("on_committed", on_committed),
                         ("on_unusable", on_unusable)):
            args.callback(what, fn)

        self._lib = rl.load()
        self._sink = _log.LogSink(log_name)
        self._hooks = _receiver_hooks.Hooks(log_name, on_begin, on_layer,
                                            on_committed, on_unusable)
        p.log_fn = self._sink.c_fn
        p.hooks = self._hooks.c
        p.field_mask = (
            rl.PARAM_RANK | rl.PARAM_LISTEN | rl.PARAM_TIMEOUT |
            rl.PARAM_MOVER | rl.PARAM_VERIFY | rl.PARAM_LOG |
            rl.PARAM_HOOKS | rl.PARAM_HEARTBEAT | rl.PARAM_STAGING_SLOTS |
            rl.PARAM_INITIAL_STATE | rl.PARAM_GROUP | rl.PARAM_AUTH |
            rl.PARAM_LIMITS | rl.PARAM_LANES | rl.PARAM_LANE_DEVICES |
            rl.PARAM_INITIAL_LABEL | rl.PARAM_DEVICE_RING)
        self.name, self.rank, self.host = log_name, p.rank, host
        self._lock = threading.Lock()
        self._close_lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._waiters = 0
        self._closing = False
        self._port = None
        self._regions = {}   # name -> (id, Memory)
        self._layers = set()  # MoE layers added
        self._device = None  # the GPU of CUDA regions
        # Strings C borrows during create are bytes objects of p; the log
        # name it keeps is copied. What C calls or writes into until
        # destroy lives in _keep, which the finalizer holds.
        self._keep = [self._sink, self._hooks]
        handle = ctypes.c_void_p()
        self._sink.begin()
        error = None
        try:
            status = self._lib.wst_receiver_create(ctypes.byref(p),
                                                   ctypes.byref(handle))
            if status != 0:
                error = self._error(status, "cannot create the receiver")
        finally:
            self._sink.end(error.message if error is not None else None)
        if error is not None:
            raise error
        self._handle = handle.value
        self._finalizer = weakref.finalize(self, _destroy, self._lib,
                                           self._handle, self._keep)

    @staticmethod
    def _secret(secret_file, insecure):
        insecure = args.flag("insecure", insecure)
        if insecure:
            if secret_file is not _ENV_SECRET and secret_file:
                raise ValueError("secret_file and insecure=True exclude each "
                                 "other")
            return None
        if secret_file is _ENV_SECRET:
            secret_file = os.environ.get("WST_AUTH_SECRET_FILE")
        secret = _checks.path("secret_file", secret_file)
        if secret is None:
            raise ValueError(
                "no secret_file (nor $WST_AUTH_SECRET_FILE): pass the "
                "deployment's secret, or insecure=True to accept only "
                "senders without one (as wstream-agent --insecure)")
        return secret

    def __repr__(self):
        where = "closed" if self.closed else (
            "port %d" % self._port if self._port else "not started")
        return "<wstream.Receiver %s: %d regions, %s>" % (
            self.name, len(self._regions), where)

    # -- context manager and lifetime --

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Closes every connection and frees the C receiver; the regions'
        memory stays the caller's (and is released by the receiver).
        Idempotent; waits for wait_committed() calls to return."""
        if threading.get_ident() == self._hooks.engine_thread:
            raise RuntimeError("close() from a hook: the receiver's engine "
                               "thread cannot destroy itself")
        with self._close_lock:
            with self._lock:
                self._closing = True
                while self._waiters:
                    self._idle.wait()
            # Not under _lock: a hook that asks for the state while the
            # engine thread is joined is told the receiver is closed.
            self._finalizer()
            self._regions, self._keep = {}, []

    @property
    def closed(self):
        return not self._finalizer.alive

    # -- before start() --

    def add_region(self, name, memory):
        """Adds a block of live memory the receiver writes into and returns
        its id (for add_want and add_expert_layer).

        memory: a writable, contiguous buffer (bytearray, mmap, a ctypes
        array, a numpy array; referenced until close()), an (address,
        nbytes) pair of host memory, or an (address, nbytes, device)
        triple of CUDA memory on GPU 'device'; raw memory is borrowed:
        keep it valid until close().
        """
        raw_name = args.text("region name", name, _checks.NAME_MAX,
                             none_ok=False, empty_ok=False)
        mem = args.memory(name, memory)
        with self._lock:
            self._check_configurable()
            if name in self._regions:
                raise ValueError("region %r is added already" % name)
            if mem.device is not None and self._device not in (None,
                                                                mem.device):
                raise ValueError("region %r is on GPU %d, other regions on "
                                 "GPU %d: one receiver serves one GPU"
                                 % (name, mem.device, self._device))
            region = rl.Region(name=raw_name, data=mem.address,
                               length=mem.nbytes, mem_type=mem.mem_type)
            rid = ctypes.c_uint32()
            self._call("add region %r" % name,
                       self._lib.wst_receiver_add_region,
                       ctypes.byref(region), ctypes.byref(rid))
            if mem.device is not None:
                self._device = mem.device
            self._regions[name] = (rid.value, mem)
            self._keep.append(mem.keep)
            return rid.value

    def add_want(self, name, dtype, shape, region, offset=0, start=None,
                 stop=None, row_pitch=0, expert_grouped=False, ep_rank=0,
                 ep_size=1):
        """Wants box [start, stop) (default: all) of checkpoint tensor
        'name' (dtype a name: "bf16", "f32", ...; shape its global shape)
        at 'offset' bytes into region 'region' (an id or a name), as a
        row-major array whose rows (the last dimension) are row_pitch
        bytes apart (0: dense). expert_grouped: the tensor is a grouped
        routed-experts tensor [E, ...] of which this is EP rank ep_rank of
        ep_size's linear share."""
        raw_name = _checks.tensor_name(name)
        value, itemsize = args.dtype(dtype)
        shp = _checks.shape(shape, itemsize)
        lo, hi = args.want_box(shp, start, stop)
        offset = _checks.in_range("offset", offset, 0, args.U64_MAX)
        row_pitch = _checks.in_range("row_pitch", row_pitch, 0, args.U64_MAX)
        span = args.want_span(lo, hi, itemsize, row_pitch)
        grouped = args.flag("expert_grouped", expert_grouped)
        ep_size = _checks.in_range("ep_size", ep_size, 1, args.U32_MAX)
        ep_rank = _checks.in_range("ep_rank", ep_rank, 0, ep_size - 1)
        if not grouped and (ep_rank, ep_size) != (0, 1):
            raise ValueError("ep_rank and ep_size are for expert_grouped "
                             "wants")
        if grouped and len(shp) < 2:
            raise ValueError("an expert_grouped tensor has 2 or more dims, "
                             "got shape %s" % list(shp))
        with self._lock:
            self._check_configurable()
            rid, mem = self._region(region)
            if offset + span > mem.nbytes:
                raise ValueError(
                    "want %r: its box takes %d bytes from offset %d, past the "
                    "end of region %r (%d bytes)"
                    % (name, span, offset, self._region_name(rid),
                       mem.nbytes))
            want = rl.WantEntry(
                name=raw_name, dtype=value, ndim=len(shp),
                shape=_u64_array(shp), box_start=_u64_array(lo),
                box_stop=_u64_array(hi), region=rid, offset=offset,
                row_pitch=row_pitch, expert_grouped=grouped,
                ep_rank=ep_rank if grouped else 0,
                ep_size=ep_size if grouped else 0)
            self._call("add want %r" % name, self._lib.wst_receiver_add_want,
                       ctypes.byref(want))

    def add_expert_layer(self, layer, loader, dtype, n_experts, hidden,
                         inter, w13, w2, ep_rank=0, ep_size=1,
                         expert_ids=None, inter_tp_rank=0, inter_tp_size=0):
        """Declares the routed experts of MoE layer 'layer' as the engine
        holds them: live buffers w13 and w2, each a (region, offset) pair
        (region an id or a name), in the layout of loader 'loader'
        ("checkpoint", "trtllm-bf16"), for EP rank ep_rank of ep_size of
        n_experts experts of hidden x inter (struct wst_expert_layer says
        what is refused when the receiver plans)."""
        layer = _checks.in_range("layer", layer, 0, args.U32_MAX)
        raw_loader = args.text("loader", loader, _checks.NAME_MAX,
                               none_ok=False, empty_ok=False)
        value, _ = args.dtype(dtype)
        n_experts = _checks.in_range("n_experts", n_experts, 1, args.U32_MAX)
        hidden = _checks.in_range("hidden", hidden, 1, args.U32_MAX)
        inter = _checks.in_range("inter", inter, 1, args.U32_MAX)
        ep_size = _checks.in_range("ep_size", ep_size, 1, args.U32_MAX)
        ep_rank = _checks.in_range("ep_rank", ep_rank, 0, ep_size - 1)
        inter_tp_size = _checks.in_range("inter_tp_size", inter_tp_size, 0,
                                         args.U32_MAX)
        inter_tp_rank = _checks.in_range("inter_tp_rank", inter_tp_rank, 0,
                                         max(inter_tp_size, 1) - 1)
        ids = args.expert_ids(expert_ids)
        places = []
        for what, place in (("w13", w13), ("w2", w2)):
            if not isinstance(place, tuple) or len(place) != 2:
                raise TypeError("%s must be a (region, offset) pair, not %r"
                                % (what, place))
            places.append((place[0], _checks.in_range(
                "%s offset" % what, place[1], 0, args.U64_MAX)))
        with self._lock:
            self._check_configurable()
            if layer in self._layers:
                raise ValueError("layer %d has its experts added already"
                                 % layer)
            (r13, m13), (r2, m2) = (self._region(r) for r, _ in places)
            for what, (_, off), mem in (("w13", places[0], m13),
                                        ("w2", places[1], m2)):
                if off >= mem.nbytes:
                    raise ValueError("%s offset %d is past the end of its "
                                     "region (%d bytes)"
                                     % (what, off, mem.nbytes))
            e = rl.ExpertLayer(
                layer=layer, loader=raw_loader, dtype=value,
                n_experts=n_experts, ep_rank=ep_rank, ep_size=ep_size,
                hidden=hidden, inter=inter, expert_ids=ids,
                n_expert_ids=len(ids) if ids is not None else 0,
                inter_tp_rank=inter_tp_rank, inter_tp_size=inter_tp_size,
                w13_region=r13, w13_offset=places[0][1], w2_region=r2,
                w2_offset=places[1][1])
            self._call("add the experts of layer %d" % layer,
                       self._lib.wst_receiver_add_expert_layer,
                       ctypes.byref(e))
            self._layers.add(layer)

    def start(self):
        """Starts listening; returns the bound port."""
        with self._lock:
            self._check_configurable()
            port = ctypes.c_uint16()
            self._call("start", self._lib.wst_receiver_start,
                       ctypes.byref(port))
            self._port = port.value
            return self._port

    # -- while it serves --

    @property
    def port(self):
        """The port senders connect to (None before start())."""
        return self._port

    @property
    def regions(self):
        """{name: id} of the regions added."""
        return {name: rid for name, (rid, _) in self._regions.items()}

    def wait_committed(self, version, timeout=60.0):
        """Waits until 'version' (or a later one) is committed. Raises
        UnusableError when a refit fails (or is refused) meanwhile,
        TimedOutError after 'timeout' seconds."""
        version = _checks.in_range("version", version, 1, args.U64_MAX)
        timeout = _checks.seconds("timeout", timeout)
        with self._lock:
            self._check_open()
            self._waiters += 1
        try:
            return self._wait(version, timeout)
        finally:
            with self._lock:
                self._waiters -= 1
                self._idle.notify_all()

    def _wait(self, version, timeout):
        deadline = time.monotonic() + timeout
        failed_before = self._raw_state().refits_failed
        while True:
            left = deadline - time.monotonic()
            status = self._lib.wst_receiver_wait_committed(
                self._handle, version, max(min(left, _WAIT_SLICE), 0.001))
            if status == 0:
                return
            st = self._raw_state()
            if status != -5 or st.refits_failed != failed_before:
                raise errors.error(-9, "version %d: a refit failed while "
                                   "waiting: %s" % (version,
                                                    _text(st.reason)))
            if self._closing:
                raise ValueError("the receiver was closed while waiting")
            if time.monotonic() >= deadline:
                raise errors.error(-5, "version %d not committed within %g s "
                                   "(committed: %d)"
                                   % (version, timeout,
                                      st.committed_version))

    def state(self):
        """A snapshot of the receiver's state (struct wst_receiver_state)
        as a dict."""
        with self._lock:
            self._check_open()
            st = self._raw_state()
        lanes = min(st.lanes, rl.LANES_MAX)
        return {
            "committed_version": st.committed_version,
            "usable": bool(st.usable),
            "refit_in_progress": bool(st.refit_in_progress),
            "reason": _text(st.reason),
            "refits_ok": st.refits_ok,
            "refits_failed": st.refits_failed,
            "last_refit_bytes": st.last_refit_bytes,
            "last_refit_put_bytes": st.last_refit_put_bytes,
            "last_refit_am_bytes": st.last_refit_am_bytes,
            "last_refit_nccl_bytes": st.last_refit_nccl_bytes,
            "last_refit_seconds": st.last_refit_seconds,
            "plan_seconds": st.plan_seconds,
            "refit_version": st.refit_version,
            "refit_phase": _text(st.refit_phase),
            "forged_data": st.forged_data,
            "data_resets": st.data_resets,
            "lanes": st.lanes,
            "last_refit_lane_bytes": list(st.last_refit_lane_bytes[:lanes]),
            "lane_device": [_text(d.value) for d in st.lane_device[:lanes]],
            "refit_label": _text(st.refit_label),
            "committed_label": _text(st.committed_label),
            "manifest_seconds": st.manifest_seconds,
            "plan_cpu_seconds": st.plan_cpu_seconds,
            "manifest_cpu_seconds": st.manifest_cpu_seconds,
            "manifest_bytes": st.manifest_bytes,
            "control_msgs_out": st.control_msgs_out,
            "control_bytes_out": st.control_bytes_out,
            "control_msgs_in": st.control_msgs_in,
            "control_bytes_in": st.control_bytes_in,
        }

    def timeline(self):
        """The last refit's per-layer timeline (struct wst_layer_times):
        a list of dicts in layer order, the global tensors' layer last."""
        with self._lock:
            self._check_open()
            n = self._lib.wst_receiver_get_timeline(self._handle, None, 0)
            times = (rl.LayerTimes * max(n, 1))()
            n = min(n, self._lib.wst_receiver_get_timeline(self._handle,
                                                           times, n))
        return [{f: getattr(t, f) for f, _ in rl.LayerTimes._fields_}
                for t in times[:n]]

    def check(self):
        """Raises, in the caller's thread, the first exception that
        on_committed or on_unusable raised (they have no status to refuse
        with; it was logged when it happened)."""
        e = self._hooks.first_error()
        if e is not None:
            raise e

    # -- helpers --

    def _raw_state(self):
        st = rl.ReceiverState()
        self._lib.wst_receiver_get_state(self._handle, ctypes.byref(st))
        return st

    def _check_open(self):
        if self._closing or not self._finalizer.alive:
            raise ValueError("the receiver is closed")

    def _check_configurable(self):
        self._check_open()
        if self._port is not None:
            raise ValueError("the receiver is started: regions, wants and "
                             "expert layers are added before start()")

    def _region(self, region):
        """(id, Memory) of a region given by id or name."""
        if isinstance(region, str):
            if region not in self._regions:
                raise ValueError("no region named %r (added: %s)"
                                 % (region, ", ".join(self._regions) or
                                    "none"))
            return self._regions[region]
        rid = _checks.integer("region", region)
        for r, mem in self._regions.values():
            if r == rid:
                return r, mem
        raise ValueError("no region with id %d (%d added)"
                         % (rid, len(self._regions)))

    def _region_name(self, rid):
        return next(n for n, (r, _) in self._regions.items() if r == rid)

    def _call(self, what, fn, *c_args):
        self._sink.begin()
        error = None
        try:
            status = fn(self._handle, *c_args)
            if status != 0:
                error = self._error(status, what + " failed")
        finally:
            self._sink.end(error.message if error is not None else None)
        if error is not None:
            raise error

    def _error(self, status, fallback):
        message = self._sink.last_error() or fallback
        name = self._lib.wst_status_name(status)
        return errors.error(status, message,
                            name.decode() if name is not None else None)
