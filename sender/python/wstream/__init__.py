"""wstream: stream model weights from trainer ranks into inference workers.

Sender side (needs torch and libwstream_sender.so, loaded on first use):

    import wstream
    with wstream.Sender(["10.0.0.5:7070"]) as s:
        s.register_all(model.state_dict()); s.push(1); s.wait()

Receiver side: wstream.attach(model, spec) gives an inference engine's
torch model to a wstream-agent it starts, which refits the parameters in
place (wstream.attach); wstream.sharding says which boxes of which
checkpoint tensors each parameter holds, for both ends. Underneath,
wstream.EngineHook follows the refits of an agent (pause, refresh,
resume; wstream.engine), or wstream.Receiver hosts the receiver in the
engine's own process (libwstream_receiver.so; wstream.receiver).
"""
from . import errors, sharding
from .attach import Attached, attach
from .engine import EngineHook
from .errors import *  # noqa: F401,F403  (WstreamError, one class a status)
from .receiver import Receiver
from .sender import Sender

__version__ = "0.1.0"

__all__ = ["Sender", "EngineHook", "Receiver", "attach", "Attached",
           "sharding"] + errors.__all__
