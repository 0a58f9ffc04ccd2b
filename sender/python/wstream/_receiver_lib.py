"""Finds libwstream_receiver.so and declares its C API (receiver.h) for
ctypes: the structs field for field, the hook types and the prototypes.

The library is looked for as the sender's is (_lib.py): at the path in
$WSTREAM_RECEIVER_LIB (and only there when it is set), next to this
package, then by ctypes.util.find_library. It is loaded on first use.
"""
import ctypes
import threading

from . import _lib

LIB_FILE = "libwstream_receiver.so"
ENV_VAR = "WSTREAM_RECEIVER_LIB"

# enum wst_receiver_param_field
PARAM_RANK = 1 << 0
PARAM_LISTEN = 1 << 1
PARAM_TIMEOUT = 1 << 2
PARAM_MOVER = 1 << 3
PARAM_VERIFY = 1 << 4
PARAM_LOG = 1 << 5
PARAM_HOOKS = 1 << 6
PARAM_HEARTBEAT = 1 << 7
PARAM_STAGING_SLOTS = 1 << 8
PARAM_INITIAL_STATE = 1 << 9
PARAM_GROUP = 1 << 10
PARAM_AUTH = 1 << 11
PARAM_LIMITS = 1 << 12
PARAM_LANES = 1 << 13
PARAM_LANE_DEVICES = 1 << 14
PARAM_INITIAL_LABEL = 1 << 15
PARAM_DEVICE_RING = 1 << 16
LANES_MAX = 8  # WST_RECEIVER_LANES_MAX

u32, u64 = ctypes.c_uint32, ctypes.c_uint64

# The hooks' types. reason is a char * the hook writes (never c_char_p,
# which ctypes would hand over as a copy).
BEGIN_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, u64,
                            ctypes.c_void_p, ctypes.c_size_t)
LAYER_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, u32, u64,
                            ctypes.c_void_p, ctypes.c_size_t)
COMMITTED_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, u64)
UNUSABLE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int,
                               ctypes.c_char_p)


LABEL_MAX = 64  # WST_LABEL_MAX (status.h), bytes with the NUL


class Hooks(ctypes.Structure):
    """struct wst_receiver_hooks, field for field (tests check it)."""
    _fields_ = [
        ("arg", ctypes.c_void_p),
        ("begin", BEGIN_FN),
        ("layer_finalized", LAYER_FN),
        ("committed", COMMITTED_FN),
        ("unusable", UNUSABLE_FN),
    ]


class ReceiverParams(ctypes.Structure):
    """struct wst_receiver_params, field for field (tests check it)."""
    _fields_ = [
        ("field_mask", u64),
        ("rank", u32),
        ("listen_host", ctypes.c_char_p),
        ("listen_port", ctypes.c_uint16),
        ("timeout_s", ctypes.c_double),
        ("mover", ctypes.c_char_p),
        ("verify", ctypes.c_int),
        ("verify_threads", u32),
        ("log_level", ctypes.c_int),
        ("log_fn", _lib.LOG_FN),
        ("log_arg", ctypes.c_void_p),
        ("log_name", ctypes.c_char_p),
        ("hooks", Hooks),
        ("heartbeat_s", ctypes.c_double),
        ("peer_timeout_s", ctypes.c_double),
        ("staging_slots", u32),
        ("group", ctypes.c_char_p),
        ("group_size", u32),
        ("group_member", u32),
        ("initial_committed_version", u64),
        ("initial_unusable_reason", ctypes.c_char_p),
        ("auth_secret_file", ctypes.c_char_p),
        ("max_manifest_entries", u64),
        ("max_manifest_bytes", u64),
        ("max_unranked_peers", u32),
        ("lanes", u32),
        ("lane_devices", ctypes.c_char_p),
        ("initial_committed_label", ctypes.c_char_p),
        ("device_ring_bytes", u64),
    ]


class Region(ctypes.Structure):
    """struct wst_region."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("data", ctypes.c_void_p),
        ("length", u64),
        ("mem_type", ctypes.c_int),
    ]


class WantEntry(ctypes.Structure):
    """struct wst_want_entry."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("ndim", u32),
        ("shape", ctypes.POINTER(u64)),
        ("box_start", ctypes.POINTER(u64)),
        ("box_stop", ctypes.POINTER(u64)),
        ("region", u32),
        ("offset", u64),
        ("row_pitch", u64),
        ("expert_grouped", ctypes.c_int),
        ("ep_rank", u32),
        ("ep_size", u32),
    ]


class ExpertLayer(ctypes.Structure):
    """struct wst_expert_layer."""
    _fields_ = [
        ("layer", u32),
        ("loader", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("n_experts", u32),
        ("ep_rank", u32),
        ("ep_size", u32),
        ("hidden", u32),
        ("inter", u32),
        ("expert_ids", ctypes.POINTER(u32)),
        ("n_expert_ids", u32),
        ("inter_tp_rank", u32),
        ("inter_tp_size", u32),
        ("w13_region", u32),
        ("w13_offset", u64),
        ("w2_region", u32),
        ("w2_offset", u64),
    ]


class LayerTimes(ctypes.Structure):
    """struct wst_layer_times."""
    _fields_ = [(name, ctypes.c_double) for name in (
        "received", "repacked", "finalized", "repack_seconds",
        "finalize_seconds")]


class ReceiverState(ctypes.Structure):
    """struct wst_receiver_state."""
    _fields_ = [
        ("committed_version", u64),
        ("usable", ctypes.c_int),
        ("refit_in_progress", ctypes.c_int),
        ("reason", ctypes.c_char * 512),
        ("refits_ok", u64),
        ("refits_failed", u64),
        ("last_refit_bytes", u64),
        ("last_refit_put_bytes", u64),
        ("last_refit_am_bytes", u64),
        ("last_refit_nccl_bytes", u64),
        ("last_refit_seconds", ctypes.c_double),
        ("plan_seconds", ctypes.c_double),
        ("refit_version", u64),
        ("refit_phase", ctypes.c_char * 16),
        ("forged_data", u64),
        ("data_resets", u64),
        ("lanes", u32),
        ("last_refit_lane_bytes", u64 * LANES_MAX),
        ("lane_device", (ctypes.c_char * 64) * LANES_MAX),
        ("refit_label", ctypes.c_char * LABEL_MAX),
        ("committed_label", ctypes.c_char * LABEL_MAX),
        ("manifest_seconds", ctypes.c_double),
        ("plan_cpu_seconds", ctypes.c_double),
        ("manifest_cpu_seconds", ctypes.c_double),
        ("manifest_bytes", u64),
        ("control_msgs_out", u64),
        ("control_bytes_out", u64),
        ("control_msgs_in", u64),
        ("control_bytes_in", u64),
    ]


_PROTOTYPES = {
    # name: (restype, argtypes)
    "wst_receiver_create": (ctypes.c_int, [ctypes.POINTER(ReceiverParams),
                                           ctypes.POINTER(ctypes.c_void_p)]),
    "wst_receiver_add_region": (ctypes.c_int, [ctypes.c_void_p,
                                               ctypes.POINTER(Region),
                                               ctypes.POINTER(u32)]),
    "wst_receiver_add_want": (ctypes.c_int, [ctypes.c_void_p,
                                             ctypes.POINTER(WantEntry)]),
    "wst_receiver_add_expert_layer": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.POINTER(ExpertLayer)]),
    "wst_receiver_start": (ctypes.c_int, [ctypes.c_void_p,
                                          ctypes.POINTER(ctypes.c_uint16)]),
    "wst_receiver_get_state": (None, [ctypes.c_void_p,
                                      ctypes.POINTER(ReceiverState)]),
    "wst_receiver_wait_committed": (ctypes.c_int, [ctypes.c_void_p, u64,
                                                   ctypes.c_double]),
    "wst_receiver_get_timeline": (u32, [ctypes.c_void_p,
                                        ctypes.POINTER(LayerTimes), u32]),
    "wst_receiver_destroy": (None, [ctypes.c_void_p]),
    "wst_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "wst_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "wst_status_is_known": (ctypes.c_int, [ctypes.c_int]),
}

_loaded = None
_lock = threading.Lock()


def load():
    """The loaded library, with every prototype declared (loads once)."""
    global _loaded
    with _lock:
        if _loaded is None:
            paths, from_env = _lib._candidates(LIB_FILE, ENV_VAR)
            lib = _lib._open(paths, from_env, LIB_FILE, ENV_VAR)
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _loaded = lib
        return _loaded
