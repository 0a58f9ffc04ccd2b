"""The C library's log lines, in Python.

Lines go to the logging logger "wstream" when the application has
configured logging (a handler anywhere up the tree), else to stderr with
the local time of day (HH:MM:SS.mmm). The last error line is kept, so that an
error whose message C only logged (no wst_sender_last_error) still has
one.
"""
import logging
import sys
import threading
import time

from . import _lib
from ._checks import LOG_LEVELS as _NAMES

_PY_LEVELS = [logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG,
              logging.DEBUG - 5]

logger = logging.getLogger("wstream")


class LogSink:
    """A wst_log_fn for one sender; called on library threads."""

    def __init__(self, name):
        self.name = name
        self._lock = threading.Lock()
        self._last_error = ""
        # Kept here: C holds the pointer until wst_sender_destroy returns.
        self.c_fn = _lib.LOG_FN(self._write)

    def _write(self, _arg, level, line):
        text = line.decode("utf-8", "replace") if line else ""
        level = min(max(level, 0), len(_NAMES) - 1)
        if level == 0:
            with self._lock:
                self._last_error = text
        try:
            if logger.hasHandlers():
                logger.log(_PY_LEVELS[level], "%s: %s", self.name, text)
            else:
                now = time.time()
                sys.stderr.write("%s.%03d wstream[%s] %s: %s\n"
                                 % (time.strftime("%H:%M:%S",
                                                  time.localtime(now)),
                                    int(now % 1 * 1000), self.name,
                                    _NAMES[level], text))
        except Exception:  # never raise into C
            pass

    def clear(self):
        """Forget the last error: a new call starts."""
        with self._lock:
            self._last_error = ""

    def last_error(self):
        with self._lock:
            return self._last_error
