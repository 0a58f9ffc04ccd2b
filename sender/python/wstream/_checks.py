"""Checks of every value that crosses into C, with messages that name it.

The C library validates too, but it can only say WST_ERR_INVALID; these
raise TypeError or ValueError saying which argument is wrong and why.
"""
import math
import operator
import os

MAX_DIMS = 8           # WST_MAX_DIMS
NAME_MAX = 255         # bytes of a tensor name (WST_NAME_MAX with its NUL)
LABEL_MAX = 63         # bytes of a version's label (WST_LABEL_MAX - 1)
U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1
I64_MAX = (1 << 63) - 1

MOVERS = ("auto", "put", "am")
DEVICE_PATHS = ("auto", "direct", "bounce", "nccl")
# The C library's level names (common/log.c), by enum wst_log_level.
LOG_LEVELS = ("error", "warn", "info", "debug", "trace")


def integer(what, value):
    """An int (numpy and torch integers too, never bool or float)."""
    if isinstance(value, bool):
        raise TypeError("%s must be an integer, not bool" % what)
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError("%s must be an integer, not %s"
                        % (what, type(value).__name__)) from None


def in_range(what, value, lo, hi):
    value = integer(what, value)
    if not lo <= value <= hi:
        raise ValueError("%s must be in [%d, %d], got %d"
                         % (what, lo, hi, value))
    return value


def seconds(what, value):
    """A positive, finite number of seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("%s must be a number of seconds, not %s"
                        % (what, type(value).__name__))
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError("%s must be positive and finite, got %r"
                         % (what, value))
    return value


def choice(what, value, allowed):
    if not isinstance(value, str):
        raise TypeError("%s must be a str, not %s"
                        % (what, type(value).__name__))
    if value not in allowed:
        raise ValueError("%s must be one of %s, got %r"
                         % (what, ", ".join(allowed), value))
    return value


def path(what, value):
    """An optional file path (str or os.PathLike) as bytes; None or ""
    stays None."""
    if value is None:
        return None
    value = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(value, str):
        raise TypeError("%s must be a path (str), not %s"
                        % (what, type(value).__name__))
    if "\0" in value:
        raise ValueError("%s must not contain NUL" % what)
    return value.encode() if value else None


def log_level(value):
    """0..4 from a name ("info") or the number itself."""
    if isinstance(value, str):
        return LOG_LEVELS.index(choice("log_level", value, LOG_LEVELS))
    return in_range("log_level", value, 0, len(LOG_LEVELS) - 1)


def receiver(value):
    """One "host:port" address, as bytes."""
    if not isinstance(value, str):
        raise TypeError("receiver address must be a 'host:port' str, not %s"
                        % type(value).__name__)
    host, sep, port = value.rpartition(":")
    ok = sep and 0 < len(host) < 256 and port.isdigit() and port.isascii()
    if not ok or not 1 <= int(port) <= 65535:
        raise ValueError("receiver address %r: want 'host:port' with a port "
                         "in 1..65535" % value)
    if not value.isascii() or not value.isprintable() or " " in value:
        raise ValueError("receiver address %r: printable ASCII without "
                         "spaces only" % value)
    return value.encode("ascii")


def receivers(value):
    """A non-empty list of addresses; one str is taken as a list of one."""
    if isinstance(value, str):
        value = [value]
    try:
        items = list(value)
    except TypeError:
        raise TypeError("receivers must be a list of 'host:port' strs, not "
                        "%s" % type(value).__name__) from None
    if not items:
        raise ValueError("receivers must name at least one 'host:port'")
    return [receiver(v) for v in items]


def label(value):
    """A version's label as bytes (None or "": none, None): at most 63
    characters of printable ASCII without spaces (common/label.h)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError("label must be a str or None, not %s"
                        % type(value).__name__)
    if len(value) > LABEL_MAX:
        raise ValueError("label %r: %d characters, at most %d"
                         % (value, len(value), LABEL_MAX))
    for i, c in enumerate(value):
        if not "!" <= c <= "~":
            raise ValueError("label %r: character %d (%r) is not printable "
                             "ASCII without spaces" % (value, i, c))
    return value.encode("ascii") or None


def rank_world(rank, world_size):
    world_size = in_range("world_size", world_size, 1, U32_MAX)
    rank = integer("rank", rank)
    if not 0 <= rank < world_size:
        raise ValueError("rank must be in [0, world_size=%d), got %d"
                         % (world_size, rank))
    return rank, world_size


def tensor_name(name):
    """A checkpoint tensor name, as NUL-free UTF-8 of at most 255 bytes."""
    if not isinstance(name, str):
        raise TypeError("tensor name must be a str, not %s"
                        % type(name).__name__)
    raw = name.encode("utf-8")
    if not raw or b"\0" in raw or len(raw) > NAME_MAX:
        raise ValueError("tensor name %r: want 1..%d bytes of UTF-8 without "
                         "NUL" % (name, NAME_MAX))
    return raw


def dims(what, value, ndim=None, lo=0):
    """A sequence of integers >= lo; of length ndim when given."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError("%s must be a sequence of integers, not %s"
                        % (what, type(value).__name__))
    out = tuple(integer("%s[%d]" % (what, i), v) for i, v in enumerate(value))
    if ndim is not None and len(out) != ndim:
        raise ValueError("%s has %d dims, the shape has %d"
                         % (what, len(out), ndim))
    for i, v in enumerate(out):
        if not lo <= v <= I64_MAX:
            raise ValueError("%s[%d] = %d is out of range" % (what, i, v))
    return out


def shape(value, itemsize):
    """A global shape: 1..8 dims, each >= 1, whose bytes fit in int64."""
    out = dims("shape", value, lo=1)
    if not 1 <= len(out) <= MAX_DIMS:
        raise ValueError("shape %s has %d dims; wstream takes 1..%d"
                         % (list(out), len(out), MAX_DIMS))
    if math.prod(out) * itemsize > I64_MAX:
        raise ValueError("shape %s is too large" % (list(out),))
    return out


def _box_kind(value):
    if value is None:
        return None
    return "nd" if hasattr(value, "__len__") else "flat"


def box(shp, start, stop):
    """(start, stop, flat) of a shard's box inside shape 'shp'.

    Sequences give an N-D box; two ints give a flat one: elements
    [start, stop) of the row-major flattened tensor (FSDP-style).
    """
    kinds = {_box_kind(start), _box_kind(stop)} - {None}
    if len(kinds) > 1:
        raise TypeError("start and stop must both be sequences (an N-D box) "
                        "or both ints (a flat box), got %s and %s"
                        % (type(start).__name__, type(stop).__name__))
    if kinds == {"flat"}:
        total = math.prod(shp)
        lo = 0 if start is None else integer("start", start)
        hi = total if stop is None else integer("stop", stop)
        if not 0 <= lo <= hi <= total:
            raise ValueError("flat box [%d, %d) is not inside the %d "
                             "elements of shape %s"
                             % (lo, hi, total, list(shp)))
        return (lo,), (hi,), True
    lo = (0,) * len(shp) if start is None else dims("start", start, len(shp))
    hi = shp if stop is None else dims("stop", stop, len(shp))
    for d in range(len(shp)):
        if not lo[d] <= hi[d] <= shp[d]:
            raise ValueError("box start %s stop %s is not inside shape %s "
                             "(dim %d)" % (list(lo), list(hi), list(shp), d))
    return lo, hi, False


def box_text(lo, hi, flat):
    """A slice's box as messages write it: "[0:3, 0:4]", "flat [10:20]"."""
    text = "[%s]" % ", ".join("%d:%d" % (a, b) for a, b in zip(lo, hi))
    return "flat " + text if flat else text


def _unravel(f, shp):
    out = []
    for n in reversed(shp):
        out.append(f % n)
        f //= n
    return out[::-1]


def _ravel(x, shp):
    f = 0
    for i, n in zip(x, shp):
        f = f * n + i
    return f


def _first_in_box_from(shp, lo, hi, a):
    """The row-major index of the first element of box [lo, hi) at or after
    flat index a, or None. Row-major order is lexicographic on indexes, so
    it is x = unravel(a) itself, or else the deepest position at which x
    can be raised into the box, the dims after it at the box's start."""
    if any(l >= h for l, h in zip(lo, hi)) or a >= math.prod(shp):
        return None
    x, best = _unravel(a, shp), None
    for d in range(len(shp)):
        if x[d] < lo[d]:
            return _ravel(x[:d] + list(lo[d:]), shp)
        if x[d] >= hi[d]:
            break
        if x[d] + 1 < hi[d]:
            best = x[:d] + [x[d] + 1] + list(lo[d + 1:])
    else:
        return a
    return None if best is None else _ravel(best, shp)


def _common_element(shp, a, b):
    """An element two slices (start, stop, flat) of shape shp both hold, as
    an N-D index, or None."""
    if not a[2] and not b[2]:
        lo = [max(x, y) for x, y in zip(a[0], b[0])]
        hi = [min(x, y) for x, y in zip(a[1], b[1])]
        return lo if all(l < h for l, h in zip(lo, hi)) else None
    if a[2] and b[2]:
        lo, hi = max(a[0][0], b[0][0]), min(a[1][0], b[1][0])
        return _unravel(lo, shp) if lo < hi else None
    flat, box = (a, b) if a[2] else (b, a)
    f = _first_in_box_from(shp, box[0], box[1], flat[0][0])
    return _unravel(f, shp) if f is not None and f < flat[1][0] else None


def slice_fits(name, earlier, new):
    """ValueError, naming both slices, unless slice 'new' of tensor 'name'
    fits with the slices registered before it under that name: the same
    dtype and global shape, and no element in common. A slice is a tuple
    (start, stop, flat, dtype name, global shape)."""
    lo, hi, flat, dtype, shp = new
    mine = box_text(lo, hi, flat)
    for old in earlier:
        theirs = box_text(old[0], old[1], old[2])
        if old[3] != dtype:
            raise ValueError(
                "tensor %r: slice %s has dtype %s, but slice %s registered "
                "before it has %s; the slices of a tensor share its dtype"
                % (name, mine, dtype, theirs, old[3]))
        if tuple(old[4]) != tuple(shp):
            raise ValueError(
                "tensor %r: slice %s gives the tensor shape %s, but slice %s "
                "registered before it gives %s; the slices of a tensor share "
                "its shape" % (name, mine, list(shp), theirs, list(old[4])))
        x = _common_element(shp, old, new)
        if x is not None:
            raise ValueError(
                "tensor %r: slice %s overlaps slice %s registered before it "
                "(both hold element %s); the slices of a tensor must be "
                "disjoint" % (name, mine, theirs, list(x)))
