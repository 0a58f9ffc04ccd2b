"""python.two_ranks: two Sender processes, ranks 0 and 1 of a world of 2,
each own part of the tensors (row halves, a flat half, a whole tensor);
the agent assembles them bit for bit, version after version."""
import os
import subprocess
import sys
import time
import unittest

import harness

harness.need_torch()
import rank_main  # noqa: E402


class TwoRanksTest(unittest.TestCase):
    def test_two_ranks(self):
        wants = [harness.want(n, harness.wst_dtype(d), s)
                 for n, (d, s) in rank_main.TENSORS.items()]
        with harness.Rig(wants) as rig:
            ranks = [subprocess.Popen([sys.executable, rank_main.__file__,
                                       rig.addr, str(r), rig.dir])
                     for r in range(rank_main.WORLD)]
            try:
                for version in (1, 2):
                    self.wait_ranks(rig, ranks, version)
                    self.check_live(rig, version)
                    open(rig.path("go%d" % version), "w").close()
                for r, p in enumerate(ranks):
                    self.assertEqual(p.wait(30), 0, "rank %d failed" % r)
            finally:
                for p in ranks:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
            st = rig.agent_status()
            self.assertEqual((st["committed_version"], st["usable"]),
                             (2, True))

    def wait_ranks(self, rig, ranks, version):
        deadline = time.monotonic() + 60
        names = [rig.path("r%d.v%d" % (r, version)) for r in range(2)]
        while not all(os.path.exists(n) for n in names):
            for r, p in enumerate(ranks):
                if p.poll() is not None:
                    self.fail("rank %d exited (%d) before committing "
                              "version %d" % (r, p.returncode, version))
            self.assertLess(time.monotonic(), deadline, "ranks too slow")
            time.sleep(0.02)

    def check_live(self, rig, version):
        for name in rank_main.TENSORS:
            got, gap = rig.region(name)
            want = harness.tensor_bytes(rank_main.full(name, version))
            self.assertEqual(got, want, "%s at version %d" % (name, version))
            self.assertEqual(set(gap), {harness.POISON}, name)


if __name__ == "__main__":
    harness.main()
