"""The trainer of python.receiver, a process of its own:

    python3 push_main.py ADDR DIR

Registers the tensors DIR/tensors.json lists ({name: [dtype, shape]})
with a wstream.Sender to ADDR, then for each line "V" on stdin loads
DIR/v<V>/<name> (the tensor's raw bytes) into them in place, pushes
version V and waits; it answers each with one line on stdout, "ok V" or
"error V STATUS_NAME MESSAGE". End of input ends it.
"""
import json
import os
import sys

import torch

import wstream

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16,
          "f32": torch.float32, "u8": torch.uint8}


def main(addr, folder):
    with open(os.path.join(folder, "tensors.json")) as f:
        specs = json.load(f)
    raw = {}
    with wstream.Sender([addr], timeout=20, log_level="warn") as s:
        for name, (dtype, shape) in specs.items():
            n = torch.tensor([], dtype=DTYPES[dtype]).element_size()
            for d in shape:
                n *= d
            raw[name] = torch.zeros(n, dtype=torch.uint8)
            s.register(name, raw[name].view(DTYPES[dtype]).reshape(shape))
        for line in sys.stdin:
            version = int(line)
            for name, buf in raw.items():
                with open(os.path.join(folder, "v%d" % version, name),
                          "rb") as f:
                    buf.copy_(torch.frombuffer(bytearray(f.read()),
                                               dtype=torch.uint8))
            try:
                s.push(version)
                s.wait(timeout=30)
                print("ok %d" % version, flush=True)
            except wstream.WstreamError as e:
                print("error %d %s %s" % (version, e.name,
                                          e.message.replace("\n", " ")),
                      flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
