"""An in-process receiver's engine hooks as Python callables.

The C receiver calls its hooks on its engine thread (receiver.h); ctypes
takes the GIL for each call. Nothing a callable does may escape into C:
an exception from on_begin refuses the refit (nothing is written), one
from on_layer fails it, each with a status and the exception's text as
the reason the senders and the state report. on_committed and
on_unusable have no status to carry one: their exceptions are logged and
kept for Receiver.check(). The CFUNCTYPE objects live as long as this
adapter, which the Receiver keeps until the C receiver is destroyed.
"""
import ctypes
import sys
import threading

from . import _log, _receiver_lib as rl, errors

WST_ERR_STATE = -27     # a refused begin, as the agent's REFUSE
WST_ERR_UNUSABLE = -9   # a failed layer, as the agent's FAILED


def _reason(e):
    text = str(e)
    return "%s: %s" % (type(e).__name__, text) if text else \
        type(e).__name__


def _status(e, default):
    """The status an exception refuses with: a WstreamError's own (a
    known error), else 'default'."""
    status = getattr(e, "status", None)
    if isinstance(e, errors.WstreamError) and isinstance(status, int) and \
            status < 0 and errors.status_name(status).startswith("WST_ERR"):
        return status
    return default


def _write(buf, size, text):
    """text into the hook's reason buffer, NUL-terminated, cut at a
    character boundary."""
    if not buf or size == 0:
        return
    raw = text.encode("utf-8", "replace")[:size - 1]
    raw = raw.decode("utf-8", "ignore").encode("utf-8")
    ctypes.memmove(buf, raw + b"\0", len(raw) + 1)


class Hooks:
    """struct wst_receiver_hooks over on_begin(version),
    on_layer(layer, version), on_committed(version) and
    on_unusable(status_name, reason); None leaves a hook out."""

    def __init__(self, name, on_begin, on_layer, on_committed, on_unusable):
        self.name = name
        self._fns = (on_begin, on_layer, on_committed, on_unusable)
        self._lock = threading.Lock()
        self._kept = []          # exceptions of on_committed / on_unusable
        self.engine_thread = None  # ident of the thread hooks run on
        self.c = rl.Hooks()
        if on_begin is not None:
            self.c.begin = rl.BEGIN_FN(self._begin)
        if on_layer is not None:
            self.c.layer_finalized = rl.LAYER_FN(self._layer)
        if on_committed is not None:
            self.c.committed = rl.COMMITTED_FN(self._committed)
        if on_unusable is not None:
            self.c.unusable = rl.UNUSABLE_FN(self._unusable)

    @property
    def any(self):
        return any(fn is not None for fn in self._fns)

    def first_error(self):
        with self._lock:
            return self._kept[0] if self._kept else None

    # -- called by C on the engine thread; never raise --

    def _ask(self, fn, args, default, buf, size):
        self.engine_thread = threading.get_ident()
        try:
            result = fn(*args)
            if result is False:
                _write(buf, size, "declined by %s"
                       % getattr(fn, "__name__", "the hook"))
                return default
            return 0
        except BaseException as e:  # noqa: B902 (nothing may reach C)
            try:
                _write(buf, size, _reason(e))
                return _status(e, default)
            except BaseException:
                return default

    def _begin(self, _arg, version, buf, size):
        return self._ask(self._fns[0], (version,), WST_ERR_STATE, buf, size)

    def _layer(self, _arg, layer, version, buf, size):
        return self._ask(self._fns[1], (layer, version), WST_ERR_UNUSABLE,
                         buf, size)

    def _tell(self, what, fn, args):
        self.engine_thread = threading.get_ident()
        try:
            fn(*args)
        except BaseException as e:  # noqa: B902
            try:
                with self._lock:
                    self._kept.append(e)
                line = "%s raised %s" % (what, _reason(e))
                if _log.logger.hasHandlers():
                    _log.logger.error("%s: %s", self.name, line)
                else:
                    sys.stderr.write("wstream[%s] error: %s\n"
                                     % (self.name, line))
            except BaseException:
                pass

    def _committed(self, _arg, version):
        self._tell("on_committed", self._fns[2], (version,))

    def _unusable(self, _arg, status, reason):
        try:
            name = errors.status_name(status)
            why = reason.decode("utf-8", "replace") if reason else ""
        except BaseException:
            name, why = "WST_STATUS_%d" % status, ""
        self._tell("on_unusable", self._fns[3], (name, why))
