"""One engine rank of python.model: a TinyModel attached to its own
wstream-agent through wstream.attach, checked after every refit against
the trainer's saved step (by the model's own slicing, not wstream's).

    model_engine.py DIR TP_RANK TP_SIZE STEPS

Writes DIR/engine<r>.addr (where to push), then per version v
DIR/engine<r>.step<v>.json (what it found) and DIR/engine<r>.ack (v);
at the end DIR/engine<r>.events.json. With TP_SIZE 1 a thread generates
text all the time, through Attached.serving(); with more, the ranks
generate together between refits (all-reduce over gloo).
"""
import json
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

import wstream
from tinymodel import TinyModel

PROMPT = torch.tensor([[1, 2, 3, 4]])


def write_json(path, obj):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f)
    os.replace(path + ".tmp", path)


def bits(t):
    return t.detach().contiguous().view(torch.int32) \
        if t.dtype == torch.float32 else t.detach()


def wait_file(path, timeout=120.0):
    end = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise TimeoutError("no %s" % path)
        time.sleep(0.01)


class Generator(threading.Thread):
    """Greedy generation, forever, one forward pass at a time, each
    recorded with the version it ran on."""

    def __init__(self, model, attached):
        super().__init__(daemon=True)
        self.model, self.attached = model, attached
        self.forwards, self.stopping, self.error = [], False, None

    def run(self):
        try:
            while not self.stopping:
                with self.attached.serving(timeout=120) as version:
                    t0 = time.monotonic()
                    with torch.no_grad():
                        self.model(PROMPT)
                    self.forwards.append((t0, time.monotonic(), version))
                time.sleep(0.001)
        except BaseException as e:
            self.error = repr(e)


def check_step(model, dirname, rank, tp, version):
    saved = torch.load(os.path.join(dirname, "step%d.pt" % version))
    ref = TinyModel(tp_rank=rank, tp_size=tp, seed=99)
    ref.load_full(saved["state"])
    mine = dict(model.named_parameters())
    bad = [n for n, p in ref.named_parameters()
           if not torch.equal(bits(p), bits(mine[n]))]
    out = {"version": version, "params": len(mine), "mismatch": bad}
    with torch.no_grad():
        logits = model(saved["batch"])
        tokens = model.generate(PROMPT, 6)
    out["tokens"] = tokens.tolist()
    if tp == 1:
        out["logits_equal"] = bool(torch.equal(bits(logits),
                                               bits(saved["logits"])))
        out["tokens_equal"] = tokens.tolist() == saved["tokens"]
    return out


def main():
    dirname, rank, tp, steps = sys.argv[1], int(sys.argv[2]), \
        int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(1)
    if tp > 1:
        dist.init_process_group("gloo", init_method="file://%s/dist" %
                                dirname, rank=rank, world_size=tp)
    model = TinyModel(tp_rank=rank, tp_size=tp, seed=1000 + rank)
    model.eval()
    group = ("tiny-engine", tp, rank) if tp > 1 else None
    attached = wstream.attach(
        model, model.spec(), rank=rank, group=group,
        workdir=os.path.join(dirname, "engine%d" % rank),
        agent_args=["--timeout", "30", "--heartbeat", "0.5",
                    "--peer-timeout", "5", "--lanes", "1"])
    gen = None
    try:
        write_json(os.path.join(dirname, "engine%d.addr" % rank),
                   {"address": attached.address,
                    "regions": len(attached.layout["regions"]),
                    "wants": len(attached.layout["wants"])})
        if tp == 1:
            gen = Generator(model, attached)
            gen.start()
        for v in range(1, steps + 1):
            attached.wait_version(v, timeout=120)
            with attached.serving(timeout=120) as held:
                out = check_step(model, dirname, rank, tp, v)
                out["held"] = held
                out["label"] = attached.label
            write_json(os.path.join(dirname, "engine%d.step%d.json"
                                    % (rank, v)), out)
            write_json(os.path.join(dirname, "engine%d.ack" % rank),
                       {"version": v})
        if gen is not None:
            gen.stopping = True
            gen.join(60)
        write_json(os.path.join(dirname, "engine%d.events.json" % rank),
                   {"events": [list(e) for e in attached.events],
                    "forwards": gen.forwards if gen else [],
                    "generator_error": gen.error if gen else None,
                    "state": attached.state, "version": attached.version})
    finally:
        attached.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
