"""wstream: stream model weights from trainer ranks into inference workers.

Sender side (needs torch and libwstream_sender.so, loaded on first use):

    import wstream
    with wstream.Sender(["10.0.0.5:7070"]) as s:
        s.register_all(model.state_dict()); s.push(1); s.wait()

Receiver side: wstream.EngineHook lets an inference engine follow the
refits of its wstream-agent (pause, refresh, resume; wstream.engine), or
wstream.Receiver hosts the receiver in the engine's own process
(libwstream_receiver.so; wstream.receiver).
"""
from . import errors
from .engine import EngineHook
from .errors import *  # noqa: F401,F403  (WstreamError, one class a status)
from .receiver import Receiver
from .sender import Sender

__version__ = "0.1.0"

__all__ = ["Sender", "EngineHook", "Receiver"] + errors.__all__
