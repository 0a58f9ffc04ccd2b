"""The C library's log lines, in Python.

Lines go to the logging logger "wstream" when the application has
configured logging (a handler anywhere up the tree), else to stderr with
the local time of day (HH:MM:SS.mmm). The last error line is kept, so that an
error whose message C only logged (no wst_sender_last_error) still has
one.

An error line logged while a call into C is in flight is held until the
call returns: when the call fails, the exception carries that line, and
printing it as well would say the same thing twice; any other held line is
printed then, with the time it was logged.
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
    """A wst_log_fn for one sender or receiver; called on library
    threads."""

    def __init__(self, name):
        self.name = name
        self._lock = threading.Lock()
        self._last_error = ""
        self._calls = 0      # calls in flight (begin() without end())
        self._held = []      # (text, stamp) of error lines held meanwhile
        # Kept here: C holds the pointer until destroy returns.
        self.c_fn = _lib.LOG_FN(self._write)

    def _write(self, _arg, level, line):
        text = line.decode("utf-8", "replace") if line else ""
        level = min(max(level, 0), len(_NAMES) - 1)
        now = time.time()
        if level == 0:
            with self._lock:
                self._last_error = text
                if self._calls:
                    self._held.append((text, now))
                    return
        self._emit(level, text, now)

    def _emit(self, level, text, stamp):
        try:
            if logger.hasHandlers():
                logger.log(_PY_LEVELS[level], "%s: %s", self.name, text)
            else:
                sys.stderr.write("%s.%03d wstream[%s] %s: %s\n"
                                 % (time.strftime("%H:%M:%S",
                                                  time.localtime(stamp)),
                                    int(stamp % 1 * 1000), self.name,
                                    _NAMES[level], text))
        except Exception:  # never raise into C
            pass

    def begin(self):
        """A call into C starts: forget the last error, hold error lines."""
        with self._lock:
            self._last_error = ""
            self._calls += 1

    def end(self, raised=None):
        """The call begun last returned; 'raised' is the message of the
        exception it will raise (None: it succeeded). Held lines that this
        message already says are dropped; the rest are printed once no call
        is in flight."""
        with self._lock:
            if raised:
                self._held = [(t, s) for t, s in self._held
                              if not t or (t not in raised
                                           and raised not in t)]
            self._calls = max(self._calls - 1, 0)
            out, self._held = (self._held, []) if not self._calls else ([],
                                                                 self._held)
        for text, stamp in out:
            self._emit(0, text, stamp)

    def last_error(self):
        with self._lock:
            return self._last_error
