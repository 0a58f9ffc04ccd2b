"""The lines of the agent's engine socket protocol (README.md, "Engine
socket protocol"): parsing what the agent sends, strictly, and formatting
the engine's replies so the agent's own strict parser takes them.
"""
import re

from . import errors

LINE_MAX = 600  # bytes, the '\n' included
U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1

# Canonical decimal, as the agent prints numbers (%llu): no sign, no
# leading zeros.
_NUMBER = re.compile(r"0|[1-9][0-9]{0,19}")
_STATUS = re.compile(r"WST_[A-Z0-9_]+")
# A version's label (common/label.h): printable ASCII without spaces.
_LABEL = re.compile(r"[!-~]{1,63}")


def protocol_error(text):
    return errors.error(-3, text)  # WST_ERR_PROTOCOL


def _number(line, field, limit):
    if not _NUMBER.fullmatch(field) or int(field) > limit:
        raise protocol_error("agent line %r: %r is not a number in [0, %d]"
                             % (line, field, limit))
    return int(field)


def parse(raw):
    """One line from the agent (bytes, without its '\\n') as a tuple:
    ("BEGIN", v, label), ("LAYER", l, v), ("COMMITTED", v, label),
    ("UNUSABLE", status, reason) or ("ERROR", text); label is the version's
    ("" when the line names none). Anything else raises ProtocolError."""
    try:
        line = raw.decode("ascii")
    except UnicodeDecodeError:
        raise protocol_error("agent line %r is not ASCII" % raw) from None
    if not line or not line.isprintable() or line != line.strip(" ") or \
            "  " in line:
        raise protocol_error("agent line %r: want printable fields "
                             "separated by one space" % line)
    fields = line.split(" ")
    word = fields[0]
    if word == "UNUSABLE" and len(fields) >= 3:
        if not _STATUS.fullmatch(fields[1]):
            raise protocol_error("agent line %r: %r is not a status name"
                                 % (line, fields[1]))
        return ("UNUSABLE", fields[1], " ".join(fields[2:]))
    if word == "ERROR" and len(fields) >= 2:
        return ("ERROR", " ".join(fields[1:]))
    if word in ("BEGIN", "COMMITTED") and len(fields) in (2, 3):
        label = fields[2] if len(fields) == 3 else ""
        if label and not _LABEL.fullmatch(label):
            raise protocol_error("agent line %r: %r is not a label (1 to 63 "
                                 "bytes of printable ASCII without spaces)"
                                 % (line, label))
        return (word, _number(line, fields[1], U64_MAX), label)
    if word == "LAYER" and len(fields) == 3:
        return (word, _number(line, fields[1], U32_MAX),
                _number(line, fields[2], U64_MAX))
    raise protocol_error("agent line %r: unknown message or wrong number of "
                         "fields" % line)


def _reason_text(reason, room):
    # The rest of the line: printable ASCII words, one space apart, cut to
    # fit; never empty (the agent takes an empty reason as malformed).
    text = "".join(c if " " <= c <= "~" else " " for c in str(reason))
    text = " ".join(text.split())[:room].rstrip()
    return text or "no reason given"


def reply(fields, reason=None):
    """A reply line (bytes with its '\\n') of 'fields', then 'reason'."""
    head = " ".join(str(f) for f in fields)
    if reason is not None:
        head += " " + _reason_text(reason, LINE_MAX - len(head) - 2)
    return (head + "\n").encode("ascii")
