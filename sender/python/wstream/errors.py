"""WstreamError and one subclass per wst_status_t error (status.h).

The table mirrors WST_STATUS_LIST; the tests compare it with the C
library's wst_status_name for every value, so it cannot drift silently.
"""

# (value, enum name, message) as in include/wstream/status.h
STATUSES = [
    (0, "WST_OK", "success"),
    (1, "WST_INPROGRESS", "operation in progress"),
    (-1, "WST_ERR_NO_MEMORY", "out of memory"),
    (-2, "WST_ERR_INVALID", "invalid argument"),
    (-3, "WST_ERR_PROTOCOL", "protocol error"),
    (-4, "WST_ERR_VERSION", "protocol version mismatch"),
    (-5, "WST_ERR_TIMED_OUT", "timed out"),
    (-6, "WST_ERR_UNREACHABLE", "peer unreachable"),
    (-7, "WST_ERR_UNSUPPORTED_LAYOUT", "unsupported layout"),
    (-8, "WST_ERR_INTEGRITY", "integrity check failed"),
    (-9, "WST_ERR_UNUSABLE", "receiver unusable"),
    (-10, "WST_ERR_NO_DEVICE", "no CUDA device"),
    (-11, "WST_ERR_CANCELED", "canceled"),
    (-12, "WST_ERR_DTYPE_MISMATCH", "dtype mismatch"),
    (-13, "WST_ERR_SHAPE_MISMATCH", "shape mismatch"),
    (-14, "WST_ERR_COVERAGE", "coverage gap"),
    (-15, "WST_ERR_IO", "input/output error"),
    (-16, "WST_ERR_TRANSPORT", "transport error"),
    (-17, "WST_ERR_PEER_FAILED", "peer failed"),
    (-18, "WST_ERR_CONFIG", "bad configuration"),
    (-19, "WST_ERR_NON_LINEAR_PLACEMENT", "non-linear expert placement"),
    (-20, "WST_ERR_EXPERT_SHARDING",
     "experts sharded on a non-expert dimension"),
    (-21, "WST_ERR_EXPERT_DIVISIBILITY", "expert count not divisible by ep"),
    (-22, "WST_ERR_REPACK_SHAPE", "repack layout shape constraint violated"),
    (-23, "WST_ERR_UNSUPPORTED", "not supported"),
    (-24, "WST_ERR_BUSY", "busy"),
    (-25, "WST_ERR_TOO_LARGE", "message or value too large"),
    (-26, "WST_ERR_NOT_FOUND", "not found"),
    (-27, "WST_ERR_STATE", "operation not valid in this state"),
    (-28, "WST_ERR_STALE_VERSION", "version not above the committed one"),
]

_BY_VALUE = {value: (name, text) for value, name, text in STATUSES}


class WstreamError(Exception):
    """A wstream call failed with a wst_status_t error.

    status: the wst_status_t value (negative); name: its enum name
    ("WST_ERR_TIMED_OUT"); message: what went wrong (the sender's
    wst_sender_last_error, or the Python side's own words).
    """

    def __init__(self, status, name, message):
        super().__init__(status, name, message)
        self.status = status
        self.name = name
        self.message = message

    @property
    def description(self):
        """The status's generic text ("timed out")."""
        return _BY_VALUE.get(self.status, (None, "unknown status"))[1]

    def __str__(self):
        return "%s (%s): %s" % (self.name, self.description, self.message)


def _class_name(enum_name):
    # WST_ERR_DTYPE_MISMATCH -> DtypeMismatchError
    words = enum_name[len("WST_ERR_"):].split("_")
    return "".join(w.capitalize() for w in words) + "Error"


_CLASSES = {}
for _value, _name, _text in STATUSES:
    if _value >= 0:
        continue
    _cls = type(_class_name(_name), (WstreamError,),
                {"__doc__": "%s: %s." % (_name, _text),
                 "__module__": __name__})
    _CLASSES[_value] = _cls
    globals()[_cls.__name__] = _cls
del _value, _name, _text, _cls

ERROR_CLASSES = tuple(_CLASSES.values())


def status_name(status):
    """The enum name of a status, or "WST_STATUS_<n>" for unknown ones."""
    entry = _BY_VALUE.get(status)
    return entry[0] if entry else "WST_STATUS_%d" % status


def error(status, message, name=None):
    """The WstreamError subclass instance for 'status'."""
    cls = _CLASSES.get(status, WstreamError)
    return cls(status, name or status_name(status), message)

__all__ = ["WstreamError"] + [c.__name__ for c in ERROR_CLASSES]
