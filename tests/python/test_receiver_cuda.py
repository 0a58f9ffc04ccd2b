"""python.receiver_cuda: a Receiver hosted in this process writes into GPU
memory, regions given as (address, nbytes, device) -- a torch CUDA
tensor's -- fed by a trainer process (push_main.py) from host tensors:
after each commit the device bytes, copied back, equal the pushed ones
bit for bit, a column slice with a row pitch included, and the bytes no
want covers are still poison. Needs torch with CUDA and a GPU:
tests/gpu/run.sh runs it on the GPU machine; elsewhere it is skipped,
saying so."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
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

POISON = 0xA5
TENSORS = {
    "model.layers.0.mlp.down_proj.weight": ("bf16", [1031, 257]),
    "model.layers.0.mlp.up_proj.weight": ("f32", [33, 700]),
}
COLS = (100, 300)  # of up_proj, at a pitch of PITCH bytes
PITCH = 1024


class ReceiverCudaTest(unittest.TestCase):
    def test_device_regions(self):
        harness.secret_file()
        down, up = TENSORS
        n_down = 1031 * 257 * 2
        live = {down: torch.full((n_down + 64,), POISON, dtype=torch.uint8,
                                 device="cuda"),
                up: torch.full((33 * PITCH,), POISON, dtype=torch.uint8,
                               device="cuda")}
        dev = torch.cuda.current_device()
        folder = tempfile.mkdtemp(prefix="wst-py-rxcuda-")
        self.addCleanup(shutil.rmtree, folder, True)
        with open(os.path.join(folder, "tensors.json"), "w") as f:
            json.dump(TENSORS, f)
        with wstream.Receiver(host="127.0.0.1", log_level="warn") as r:
            for name, t in live.items():
                r.add_region(name, (t.data_ptr(), t.numel(), dev))
            with self.assertRaisesRegex(ValueError, "one receiver serves "
                                        "one GPU"):
                r.add_region("elsewhere", (live[up].data_ptr(), 8, dev + 1))
            r.add_want(down, "bf16", (1031, 257), down)
            r.add_want(up, "f32", (33, 700), up, start=(0, COLS[0]),
                       stop=(33, COLS[1]), row_pitch=PITCH)
            port = r.start()
            trainer = subprocess.Popen(
                [sys.executable, os.path.join(os.path.dirname(__file__),
                                              "push_main.py"),
                 "127.0.0.1:%d" % port, folder],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                for version in (1, 2):
                    src = self.push(trainer, folder, version)
                    r.wait_committed(version, timeout=30)
                    self.check(live, src, version)
            finally:
                trainer.stdin.close()
                trainer.wait(30)
            self.assertEqual(r.state()["committed_version"], 2)

    @staticmethod
    def push(trainer, folder, version):
        src = {n: os.urandom(1031 * 257 * 2 if d == "bf16" else 33 * 700 * 4)
               for n, (d, _) in TENSORS.items()}
        os.mkdir(os.path.join(folder, "v%d" % version))
        for name, data in src.items():
            with open(os.path.join(folder, "v%d" % version, name), "wb") as f:
                f.write(data)
        trainer.stdin.write("%d\n" % version)
        trainer.stdin.flush()
        answer = trainer.stdout.readline().strip()
        assert answer == "ok %d" % version, answer
        return src

    def check(self, live, src, version):
        down, up = TENSORS
        got = live[down].cpu().numpy().tobytes()
        self.assertEqual(got[:len(src[down])], src[down],
                         "%s differs at version %d" % (down, version))
        self.assertEqual(set(got[len(src[down]):]), {POISON})
        got = live[up].cpu().numpy().tobytes()
        row, lo, hi = 700 * 4, COLS[0] * 4, COLS[1] * 4
        for i in range(33):
            line = got[i * PITCH:(i + 1) * PITCH]
            self.assertEqual(line[:hi - lo], src[up][i * row + lo:
                                                     i * row + hi],
                             "%s row %d differs at version %d"
                             % (up, i, version))
            self.assertEqual(set(line[hi - lo:]), {POISON})


if __name__ == "__main__":
    harness.main()
