"""The trainer of python.model: a TinyModel (TP 1) taking AdamW steps on
random tokens, pushing its parameters through wstream.Sender after each,
registered by the model's own sharding rules.

    model_trainer.py DIR STEPS ENGINES

Before pushing version v it saves DIR/step<v>.pt (its parameters, the
logits and greedy tokens on a fixed batch); after the agents committed v
it waits for every engine's DIR/engine<r>.ack to say v. Writes
DIR/trainer.json: seconds per refit (push to wait) and bytes.
"""
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

import wstream
from wstream import sharding
from tinymodel import TinyModel

BATCH = (torch.arange(16) * 7 % 64).view(2, 8)
PROMPT = torch.tensor([[1, 2, 3, 4]])


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def main():
    dirname, steps, engines = sys.argv[1], int(sys.argv[2]), \
        int(sys.argv[3])
    torch.set_num_threads(1)
    model = TinyModel(seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    addrs = []
    for r in range(engines):
        path = os.path.join(dirname, "engine%d.addr" % r)
        end = time.monotonic() + 60
        while read_json(path) is None:
            if time.monotonic() > end:
                raise TimeoutError("no %s" % path)
            time.sleep(0.02)
        addrs.append(read_json(path)["address"])
    gen = torch.Generator().manual_seed(5)
    report = {"refit_s": [], "bytes": 0, "params": 0}
    with wstream.Sender(addrs, lanes=1) as sender:
        sharding.register_model(sender, model, model.spec())
        report["bytes"] = sum(p.numel() * p.element_size()
                              for p in model.parameters())
        report["params"] = len(list(model.parameters()))
        for v in range(1, steps + 1):
            model.train()
            tokens = torch.randint(0, 64, (4, 9), generator=gen)
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, 64),
                                   tokens[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            model.eval()
            with torch.no_grad():
                saved = {"state": {n: p.detach().clone()
                                   for n, p in model.named_parameters()},
                         "batch": BATCH, "logits": model(BATCH),
                         "tokens": model.generate(PROMPT, 6).tolist()}
            path = os.path.join(dirname, "step%d.pt" % v)
            torch.save(saved, path + ".tmp")
            os.replace(path + ".tmp", path)
            t0 = time.monotonic()
            sender.push(v, label="step-%d" % v)
            sender.wait(60)
            report["refit_s"].append(time.monotonic() - t0)
            for r in range(engines):
                path = os.path.join(dirname, "engine%d.ack" % r)
                end = time.monotonic() + 120
                while (read_json(path) or {}).get("version") != v:
                    if time.monotonic() > end:
                        raise TimeoutError("engine %d never acked %d"
                                           % (r, v))
                    time.sleep(0.01)
    with open(os.path.join(dirname, "trainer.json"), "w") as f:
        json.dump(report, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
