"""Finds libwstream_sender.so and declares its C API (sender.h) for ctypes.

The library is looked for, in order: at the path in $WSTREAM_LIB (and only
there when it is set, so a wrong path is an error, not a silent fallback),
next to this package, then by ctypes.util.find_library. It is loaded on
first use, so the receiver-side modules (wstream.engine) work without it.
"""
import ctypes
import ctypes.util
import os
import threading

LIB_FILE = "libwstream_sender.so"

# enum wst_sender_param_field
PARAM_RANK = 1 << 0
PARAM_WORLD_SIZE = 1 << 1
PARAM_RECEIVERS = 1 << 2
PARAM_TIMEOUT = 1 << 3
PARAM_MOVER = 1 << 4
PARAM_LOG = 1 << 5
PARAM_DEVICE_PATH = 1 << 10
PARAM_AUTH = 1 << 12
PARAM_LANES = 1 << 14
PARAM_LANE_DEVICES = 1 << 15
LANES_MAX = 8

# enum wst_push_field
PUSH_CUDA_EVENT = 1 << 0
PUSH_LABEL = 1 << 1
LABEL_MAX = 64  # WST_LABEL_MAX, the NUL included

# enum wst_mem_type
MEM_HOST = 1
MEM_CUDA = 2

LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)
PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t,
                               ctypes.c_uint32, ctypes.c_uint64)


class SenderParams(ctypes.Structure):
    """struct wst_sender_params, field for field (tests check the order)."""
    _fields_ = [
        ("field_mask", ctypes.c_uint64),
        ("rank", ctypes.c_uint32),
        ("world_size", ctypes.c_uint32),
        ("receivers", ctypes.POINTER(ctypes.c_char_p)),
        ("n_receivers", ctypes.c_size_t),
        ("timeout_s", ctypes.c_double),
        ("mover", ctypes.c_char_p),
        ("log_level", ctypes.c_int),
        ("log_fn", LOG_FN),
        ("log_arg", ctypes.c_void_p),
        ("window_bytes", ctypes.c_uint64),
        ("heartbeat_s", ctypes.c_double),
        ("peer_timeout_s", ctypes.c_double),
        ("shm_data", ctypes.c_int),
        ("progress_fn", PROGRESS_FN),
        ("progress_arg", ctypes.c_void_p),
        ("device_path", ctypes.c_char_p),
        ("bounce_bytes", ctypes.c_uint64),
        ("auth_secret_file", ctypes.c_char_p),
        ("digest_threads", ctypes.c_uint),
        ("lanes", ctypes.c_uint),
        ("lane_devices", ctypes.c_char_p),
    ]


class Shard(ctypes.Structure):
    """struct wst_shard, field for field (tests check the order)."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("data", ctypes.c_void_p),
        ("mem_type", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_uint32),
        ("shape", ctypes.POINTER(ctypes.c_uint64)),
        ("box_start", ctypes.POINTER(ctypes.c_uint64)),
        ("box_stop", ctypes.POINTER(ctypes.c_uint64)),
        ("flat", ctypes.c_int),
    ]


class PushParams(ctypes.Structure):
    """struct wst_push_params, field for field (tests check the order)."""
    _fields_ = [
        ("field_mask", ctypes.c_uint64),
        ("cuda_event", ctypes.c_void_p),
        ("label", ctypes.c_char_p),
    ]


_PROTOTYPES = {
    # name: (restype, argtypes)
    "wst_sender_create": (ctypes.c_int, [ctypes.POINTER(SenderParams),
                                         ctypes.POINTER(ctypes.c_void_p)]),
    "wst_sender_register": (ctypes.c_int, [ctypes.c_void_p,
                                           ctypes.POINTER(Shard)]),
    "wst_sender_push": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64]),
    "wst_sender_push_after": (ctypes.c_int, [ctypes.c_void_p,
                                             ctypes.c_uint64,
                                             ctypes.c_void_p]),
    "wst_sender_push_with": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64,
                                            ctypes.POINTER(PushParams)]),
    "wst_sender_wait": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_double]),
    "wst_sender_connect": (ctypes.c_int, [ctypes.c_void_p]),
    "wst_sender_committed_version": (ctypes.c_uint64, [ctypes.c_void_p,
                                                       ctypes.c_size_t]),
    "wst_sender_committed_label": (ctypes.c_int, [ctypes.c_void_p,
                                                  ctypes.c_size_t,
                                                  ctypes.c_char_p,
                                                  ctypes.c_size_t]),
    "wst_sender_last_error": (ctypes.c_char_p, [ctypes.c_void_p]),
    "wst_sender_bytes_moved": (ctypes.c_uint64, [ctypes.c_void_p]),
    "wst_sender_lanes": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_size_t]),
    "wst_sender_mover": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_size_t]),
    "wst_sender_destroy": (None, [ctypes.c_void_p]),
    "wst_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "wst_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "wst_status_is_known": (ctypes.c_int, [ctypes.c_int]),
}

_lib = None
_lock = threading.Lock()


def _candidates(lib_file=LIB_FILE, env_var="WSTREAM_LIB"):
    """Paths to try, and whether they came from $WSTREAM_LIB (for the
    receiver's library, _receiver_lib.py: its file and variable)."""
    env = os.environ.get(env_var)
    if env:
        return [env], True
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.join(here, lib_file),
             os.path.join(os.path.dirname(here), lib_file)]
    found = ctypes.util.find_library(lib_file[3:-3])
    if found:
        paths.append(found)
    return paths, False


def _open(paths, from_env, lib_file=LIB_FILE, env_var="WSTREAM_LIB"):
    errors = []
    for path in paths:
        # A bare name from find_library is for the dynamic loader to find.
        if os.sep in path and not os.path.exists(path):
            errors.append("%s: no such file" % path)
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
    raise OSError("wstream: cannot load %s (%s%s); build the cmake target "
                  "%s and set %s to the library's path"
                  % (lib_file, env_var + " is set: " if from_env else "",
                     "; ".join(errors), lib_file[3:-3], env_var))


def load():
    """The loaded library, with every prototype declared (loads once)."""
    global _lib
    with _lock:
        if _lib is None:
            lib = _open(*_candidates())
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _lib = lib
        return _lib
