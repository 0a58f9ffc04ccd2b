"""python.cuda: CUDA tensors pushed from Python (the sender's device path:
its pinned bounce ring with Debian's UCX) into a real agent, after GPU
work the push waits for through the trainer's torch.cuda.Event; read back
bit for bit from the engine's shm. Needs torch with CUDA and a GPU:
tests/gpu/run.sh runs it on the GPU machine; elsewhere it is skipped,
saying so."""
import sys
import unittest

import harness

harness.need_torch()
import torch  # noqa: E402

import wstream  # noqa: E402

if not torch.cuda.is_available():
    print("SKIP: torch has no CUDA device here (torch.cuda.is_available() "
          "is False); tests/gpu/run.sh runs this test on a GPU machine",
          file=sys.stderr)
    sys.exit(77)

SHAPES = {
    "model.layers.0.mlp.up_proj.weight": ((1031, 257), torch.bfloat16),
    "model.layers.0.input_layernorm.weight": ((257,), torch.float32),
    "model.layers.1.mlp.codes": ((3, 5, 7), torch.int8),
    "model.norm.weight": ((257,), torch.float16),
}


class CudaPushTest(unittest.TestCase):
    def test_cuda_tensors_after_an_event(self):
        gen = torch.Generator().manual_seed(11)
        host = {n: harness.random_tensor(s, d, gen)
                for n, (s, d) in SHAPES.items()}
        dev = {n: t.cuda() for n, t in host.items()}
        wants = [harness.want(n, harness.wst_dtype(d), s)
                 for n, (s, d) in SHAPES.items()]
        stream = torch.cuda.Stream()
        with harness.Rig(wants) as rig, \
                wstream.Sender(rig.addr, log_level="warn") as s:
            s.register_all(dev)
            for version in (1, 2, 3):
                # The trainer's update runs on its own stream and is still
                # in flight when push returns: the event orders it.
                for n, (shape, dtype) in SHAPES.items():
                    host[n] = harness.random_tensor(shape, dtype, gen)
                src = {n: t.pin_memory() for n, t in host.items()}
                with torch.cuda.stream(stream):
                    torch.cuda._sleep(50_000_000)  # ~tens of ms of GPU time
                    for n, t in dev.items():
                        t.copy_(src[n], non_blocking=True)
                    ev = torch.cuda.Event()
                    ev.record(stream)
                s.push(version, cuda_event=ev)
                s.wait(timeout=60)
                for n, t in host.items():
                    got, gap = rig.region(n)
                    self.assertEqual(got, harness.tensor_bytes(t),
                                     "%s: version %d differs" % (n, version))
                    self.assertEqual(gap, bytes([harness.POISON]) * len(gap))
            self.assertEqual(rig.agent_status()["committed_version"], 3)


if __name__ == "__main__":
    harness.main()
