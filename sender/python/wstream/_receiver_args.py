"""Checks of what wstream.Receiver hands to C, with messages that name the
argument: the C receiver can only answer WST_ERR_INVALID (or truncate a
string), so everything it would refuse is refused here first, with a
TypeError or ValueError saying which value and why.
"""
import ctypes

from . import _checks, _tensors

U16_MAX = (1 << 16) - 1
U32_MAX = _checks.U32_MAX
U64_MAX = _checks.U64_MAX
GROUP_SIZE_MAX = 4096      # WST_GROUP_SIZE_MAX (proto/codec.h)
GROUP_NAME_MAX = 63        # bytes of an engine group's name
LOG_NAME_MAX = 63          # bytes the receiver keeps of log_name
REASON_MAX = 511           # bytes kept of initial_unusable_reason
HOST_MAX = 255             # bytes of the listen host
STAGING_SLOTS_MAX = 64     # WST_RECV_STAGING_SLOTS_MAX
VERIFY_THREADS_MAX = 64    # WST_RECV_VERIFY_THREADS_MAX
MANIFEST_ENTRIES_MAX = 1 << 20  # WST_MAX_HAVES
RECEIVER_MOVERS = ("auto", "am")

MEM_HOST, MEM_CUDA = 1, 2  # enum wst_mem_type


def flag(what, value):
    if not isinstance(value, bool):
        raise TypeError("%s must be True or False, not %s"
                        % (what, type(value).__name__))
    return int(value)


def text(what, value, max_bytes, none_ok=True, empty_ok=True):
    """A str as NUL-free UTF-8 of at most max_bytes bytes (None: None)."""
    if value is None and none_ok:
        return None
    if not isinstance(value, str):
        raise TypeError("%s must be a str%s, not %s"
                        % (what, " or None" if none_ok else "",
                           type(value).__name__))
    raw = value.encode("utf-8")
    if b"\0" in raw:
        raise ValueError("%s must not contain NUL" % what)
    if not raw and not empty_ok:
        raise ValueError("%s must not be empty" % what)
    if len(raw) > max_bytes:
        raise ValueError("%s %r is %d bytes; at most %d"
                         % (what, value, len(raw), max_bytes))
    return raw


def host(value):
    raw = text("host", value, HOST_MAX, none_ok=False, empty_ok=False)
    if not value.isascii() or not value.isprintable() or " " in value:
        raise ValueError("host %r: printable ASCII without spaces only"
                         % value)
    return raw


def callback(what, fn):
    if fn is not None and not callable(fn):
        raise TypeError("%s must be callable or None, not %s"
                        % (what, type(fn).__name__))
    return fn


def group(name, size, member):
    """(name bytes or None, size, member) of an engine group."""
    raw = text("group", name, GROUP_NAME_MAX)
    size = _checks.in_range("group_size", size, 1, GROUP_SIZE_MAX)
    member = _checks.integer("group_member", member)
    if not 0 <= member < size:
        raise ValueError("group_member must be in [0, group_size=%d), got %d"
                         % (size, member))
    if not raw and (size, member) != (1, 0):
        raise ValueError("group_size and group_member need a group name")
    return raw or None, size, member


def heartbeat(interval, peer_timeout):
    interval = _checks.seconds("heartbeat", interval)
    peer_timeout = _checks.seconds("peer_timeout", peer_timeout)
    if peer_timeout <= interval:
        raise ValueError("peer_timeout (%r s) must be longer than heartbeat "
                         "(%r s)" % (peer_timeout, interval))
    return interval, peer_timeout


def dtype(value):
    """(enum wst_dtype value, bytes per element) of a dtype name."""
    if not isinstance(value, str):
        raise TypeError("dtype must be a str (%s), not %s"
                        % (", ".join(_tensors.DTYPES), type(value).__name__))
    if value not in _tensors.DTYPES:
        guess = _tensors.dtype_alias(value)
        raise ValueError("dtype must be one of %s, got %r%s"
                         % (", ".join(_tensors.DTYPES), value,
                            " (did you mean %r?)" % guess if guess else ""))
    return _tensors.DTYPES[value]


class Memory:
    """Where a region's bytes are: address, nbytes, memory type, the GPU
    (None for host memory) and what must stay referenced meanwhile."""

    def __init__(self, address, nbytes, mem_type, device, keep):
        self.address, self.nbytes = address, nbytes
        self.mem_type, self.device, self.keep = mem_type, device, keep


def _from_buffer(name, obj):
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(
            "region %r: memory must be a writable buffer (bytearray, mmap, "
            "a ctypes array, numpy array...), an (address, nbytes) pair or "
            "(address, nbytes, device) for CUDA memory, not %s"
            % (name, type(obj).__name__)) from None
    if view.readonly:
        raise ValueError("region %r: the buffer is read-only; the receiver "
                         "writes into it" % name)
    if not view.c_contiguous:
        raise ValueError("region %r: the buffer is not contiguous" % name)
    if view.nbytes == 0:
        raise ValueError("region %r: the buffer is empty" % name)
    # Holds an export of the buffer: a bytearray cannot be resized, nor an
    # mmap closed, while the receiver may write into it.
    anchor = ctypes.c_char.from_buffer(obj)
    return Memory(ctypes.addressof(anchor), view.nbytes, MEM_HOST, None,
                  (view, anchor))


def memory(name, obj):
    """Memory of a writable buffer, an (address, nbytes) pair of host
    memory or an (address, nbytes, device) triple of CUDA memory."""
    if not isinstance(obj, tuple):
        return _from_buffer(name, obj)
    if len(obj) not in (2, 3):
        raise ValueError("region %r: want (address, nbytes) or (address, "
                         "nbytes, device), got a tuple of %d" % (name,
                                                                 len(obj)))
    address = _checks.in_range("region %r address" % name, obj[0], 1,
                               U64_MAX)
    nbytes = _checks.in_range("region %r nbytes" % name, obj[1], 1, U64_MAX)
    if address + nbytes - 1 > U64_MAX:
        raise ValueError("region %r: address + nbytes is past 2**64" % name)
    if len(obj) == 2:
        return Memory(address, nbytes, MEM_HOST, None, None)
    device = _checks.in_range("region %r device" % name, obj[2], 0, 1 << 16)
    return Memory(address, nbytes, MEM_CUDA, device, None)


def want_box(shape, start, stop):
    """(start, stop) of an N-D box inside 'shape' (default: all of it)."""
    lo = (0,) * len(shape) if start is None else \
        _checks.dims("start", start, len(shape))
    hi = tuple(shape) if stop is None else \
        _checks.dims("stop", stop, len(shape))
    for d in range(len(shape)):
        if not lo[d] <= hi[d] <= shape[d]:
            raise ValueError("box start %s stop %s is not inside shape %s "
                             "(dim %d)" % (list(lo), list(hi), list(shape),
                                           d))
    return lo, hi


def want_span(lo, hi, itemsize, row_pitch):
    """Bytes a want's box takes in its region from its offset: rows of the
    last dimension, row_pitch apart (0: dense), as the C receiver counts
    them."""
    extents = [b - a for a, b in zip(lo, hi)]
    row_bytes = extents[-1] * itemsize
    if row_pitch:
        if row_pitch % itemsize or row_pitch < row_bytes:
            raise ValueError("row_pitch %d must be a multiple of the element "
                             "size (%d) and at least a row of the box (%d "
                             "bytes)" % (row_pitch, itemsize, row_bytes))
    rows = 1
    for e in extents[:-1]:
        rows *= e
    if rows == 0 or row_bytes == 0:
        return 0
    return (rows - 1) * (row_pitch or row_bytes) + row_bytes


def expert_ids(value):
    """A ctypes uint32 array of an expert map (None: linear)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError("expert_ids must be a sequence of ints or None, not "
                        "%s" % type(value).__name__)
    ids = [_checks.in_range("expert_ids[%d]" % i, v, 0, U32_MAX)
           for i, v in enumerate(value)]
    if not ids:
        raise ValueError("expert_ids must not be empty (None: linear "
                         "placement)")
    return (ctypes.c_uint32 * len(ids))(*ids)
