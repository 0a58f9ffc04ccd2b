"""One trainer rank of python.two_ranks, run as its own process:

    python3 rank_main.py ADDR RANK DIR

Rank r of 2 owns half the rows of each layer tensor (odd counts, so the
halves differ), a flat half of the norm (FSDP-style, not row-aligned) and
rank 1 alone a whole tensor. For versions 1 and 2 it updates its shards in
place, pushes, waits, writes DIR/r<rank>.v<v> and waits for DIR/go<v>, so
the test can check the shm between versions.
"""
import os
import sys
import time

import torch

import wstream

WORLD = 2
# name: (dtype, global shape)
TENSORS = {
    "model.layers.0.w": (torch.bfloat16, (9, 13)),
    "model.layers.1.w": (torch.float32, (7, 3, 5)),
    "model.norm.weight": (torch.float16, (5, 7)),
    "model.embed": (torch.uint8, (11, 3)),
}


def full(name, version):
    """The whole tensor 'name' at 'version', the same in every process."""
    import harness
    dtype, shape = TENSORS[name]
    gen = torch.Generator().manual_seed(version * 1000 + sorted(
        TENSORS).index(name))
    return harness.random_tensor(shape, dtype, gen)


def owned(name, rank):
    """(start, stop) this rank owns: row boxes, a flat range, or None."""
    shape = TENSORS[name][1]
    if name == "model.embed":
        return ((0, 0), shape) if rank == 1 else None
    if name == "model.norm.weight":
        cut = 17  # of 35 elements: mid-row
        return (0, cut) if rank == 0 else (cut, shape[0] * shape[1])
    cut = shape[0] // 2
    lo, hi = (0, cut) if rank == 0 else (cut, shape[0])
    return (lo,) + (0,) * (len(shape) - 1), (hi,) + shape[1:]


def piece(t, box):
    start, stop = box
    if isinstance(start, int):
        return t.reshape(-1)[start:stop]
    return t[tuple(slice(a, b) for a, b in zip(start, stop))]


def wait_file(path, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit("rank: no %s after %.0f s" % (path, timeout))
        time.sleep(0.02)


def main(addr, rank, folder):
    rank = int(rank)
    with wstream.Sender([addr], rank=rank, world_size=WORLD, timeout=20,
                        log_level="warn") as s:
        shards = {}
        for name, (dtype, shape) in TENSORS.items():
            box = owned(name, rank)
            if box is None:
                continue
            shards[name] = (piece(full(name, 1), box).clone(), box)
            s.register(name, shards[name][0], shape=shape, start=box[0],
                       stop=box[1])
        for version in (1, 2):
            for name, (buf, box) in shards.items():
                buf.copy_(piece(full(name, version), box))  # in place
            s.push(version)
            s.wait(timeout=30)
            open(os.path.join(folder, "r%d.v%d" % (rank, version)),
                 "w").close()
            wait_file(os.path.join(folder, "go%d" % version))


if __name__ == "__main__":
    main(*sys.argv[1:])
