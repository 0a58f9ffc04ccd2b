#!/usr/bin/python3
"""check_dump.py - checks a wstream dump bit for bit against its source set.

A dump directory DIR holds DIR/source (every checkpoint tensor, whole) and
DIR/live (what a receiver holds in its live memory after a refit), each with
an index.json (format 1) and one raw little-endian file per tensor; the C
writer is tools/demo/dump.c, whose header describes the format.

Every live tensor is compared with a reference built here from the source
tensors alone, independently of the C code that produced the live bytes:

  dense           source[box]
  experts, "checkpoint"
                  w13 = concatenate(gate[e0:e1], up[e0:e1], axis=1)
                  w2  = down[e0:e1]
  experts, "trtllm-bf16"
                  the four steps of REFIT_LAYOUTS.md section 3, done one by
                  one as separate array operations per expert (see
                  trtllm_w13 / trtllm_w2), never the closed form.

Comparison is on the raw bits (unsigned integers of the element size), so
NaN payloads, signed zeros and denormals all count. Exit 0 when everything
is bit-exact, 1 on any mismatch, 2 on bad usage or a malformed dump, 3 when
numpy is missing (a missing checker must never look like a pass or like an
expected failure).

Usage: check_dump.py DIR
       check_dump.py --self-test
"""

import json
import os
import re
import sys

try:
    import numpy as np
except ImportError:  # loud, and not 1: the negative test expects 1
    sys.stderr.write("check_dump: numpy is missing; install python3-numpy "
                     "(Debian) to run this checker\n")
    sys.exit(3)

FORMAT = 1
# Element sizes of the dtype names the C side writes (common/dtype.c).
DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "fp8_e4m3": 1,
               "fp8_e5m2": 1, "i8": 1, "u8": 1, "i32": 4, "i64": 8}
RAW = {1: np.dtype("u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4"),
       8: np.dtype("<u8")}
POISON = 0xA5  # byte the tests fill live buffers with before loading
EXPERTS_RE = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\."
                        r"(w13_weight|w2_weight)$")
MAX_LINES_PER_TENSOR = 8  # per tensor; the rest are only counted


class Malformed(Exception):
    """The dump does not follow the format; exit 2."""


# ---- the TRTLLM BF16 layout, step by step --------------------------------

TRTLLM_KBLOCK = 64        # step 4: 128-byte blocks of 64 bf16 along K
TRTLLM_SHUFFLE_ROWS = 32  # step 3: epilogue tile 128 -> blocks of 32 rows


def step1_swap(gate, up):
    """[gate; up] (the checkpoint w13 order) becomes [up; gate]."""
    w13 = np.concatenate([gate, up], axis=0)
    half = w13.shape[0] // 2
    return np.concatenate([w13[half:], w13[:half]], axis=0)


def step2_interleave(x):
    """Rows of the top and bottom halves alternate: out[2k] is top row k,
    out[2k+1] bottom row k (the gated-activation row reorder), so [up; gate]
    becomes up0, gate0, up1, gate1, ..."""
    m = x.shape[0]
    assert m % 2 == 0
    src = np.empty(m, dtype=np.int64)
    src[0::2] = np.arange(m // 2)
    src[1::2] = np.arange(m // 2, m)
    return x[src]


def step3_shuffle(x):
    """FlashInfer's shuffle_matrix_a with epilogue tile 128 (block size 32
    for bf16). The helper walks every source row s: within its block of 32
    it sends row position p = s mod 32 to destination position
    8*(p mod 4) + floor(p/4), i.e. the block, read as 8 groups of 4
    consecutive rows, is written as 4 groups of 8: source rows 0,4,8,...,28
    land at 0..7, rows 1,5,...,29 at 8..15, and so on. It records the
    inverse (for each destination row, its source row) and gathers with it.
    Done the same way here: a forward map, inverted, then a gather."""
    m = x.shape[0]
    blk = TRTLLM_SHUFFLE_ROWS
    assert m % blk == 0
    src_of_dst = np.empty(m, dtype=np.int64)
    for s in range(m):
        p = s % blk
        d = (s // blk) * blk + 8 * (p % 4) + p // 4
        src_of_dst[d] = s
    return x[src_of_dst]


def step4_block_k(x):
    """[M, K] becomes [K/64, M, 64]: K cut into 64-element blocks, block
    index outermost."""
    m, k = x.shape
    assert k % TRTLLM_KBLOCK == 0
    return np.ascontiguousarray(
        x.reshape(m, k // TRTLLM_KBLOCK, TRTLLM_KBLOCK).transpose(1, 0, 2))


def trtllm_w13(gate, up):
    """One expert's W13, [H/64, 2I, 64], from gate and up ([I, H] each)."""
    return step4_block_k(step3_shuffle(step2_interleave(step1_swap(gate, up))))


def trtllm_w2(down):
    """One expert's W2, [I/64, H, 64], from down ([H, I]): no gate, so only
    the shuffle and the block layout."""
    return step4_block_k(step3_shuffle(down))


# ---- self-test: the literal steps against the documented closed form -----

def closed_sigma(n):
    """REFIT_LAYOUTS.md section 3's closed form; used only by --self-test."""
    return 32 * (n // 32) + 4 * (n % 8) + (n % 32) // 8


def self_test():
    failures = 0
    for inter, hidden in [(64, 64), (128, 128), (256, 1024), (768, 2048),
                          (2048, 512)]:
        m = 2 * inter
        # Each element names its origin: (row label) * hidden + column, with
        # up row r labelled 2r and gate row r labelled 2r + 1, as in the
        # closed form's q.
        col = np.arange(hidden, dtype=np.int64)
        rows = np.arange(inter, dtype=np.int64)[:, None]
        up = (2 * rows) * hidden + col
        gate = (2 * rows + 1) * hidden + col
        got = trtllm_w13(gate, up)
        n = np.arange(m)
        q = closed_sigma(n)
        kb = np.arange(hidden // 64)
        j = np.arange(64)
        want = (q[None, :, None] * hidden + 64 * kb[:, None, None] +
                j[None, None, :])
        if got.shape != (hidden // 64, m, 64) or not np.array_equal(got, want):
            print("self-test: w13 I=%d H=%d: steps differ from the closed "
                  "form" % (inter, hidden))
            failures += 1
        # The first rows, as the layout page lists them.
        names = ["%s%d" % ("gate" if v % 2 else "up", v // 2)
                 for v in got[0, :24, 0] // hidden]
        head = (["up%d" % r for r in range(0, 16, 2)] +
                ["gate%d" % r for r in range(0, 16, 2)] +
                ["up%d" % r for r in range(1, 16, 2)])
        if names != head:
            print("self-test: w13 I=%d H=%d: first rows %s" %
                  (inter, hidden, " ".join(names)))
            failures += 1
        # W2: rows of down ([H, I]) in the shuffle order alone.
        down = (np.arange(hidden, dtype=np.int64)[:, None] * inter +
                np.arange(inter, dtype=np.int64))
        got2 = trtllm_w2(down)
        q2 = closed_sigma(np.arange(hidden))
        kb2 = np.arange(inter // 64)
        want2 = (q2[None, :, None] * inter + 64 * kb2[:, None, None] +
                 j[None, None, :])
        if not np.array_equal(got2, want2):
            print("self-test: w2 H=%d I=%d: steps differ from the closed "
                  "form" % (hidden, inter))
            failures += 1
    # A reference that cannot fail is no reference: a wrong shuffle (the
    # helper's map applied as a gather instead of inverted) must be caught.
    x = np.arange(64)
    blk = x.reshape(2, 32)
    p = np.arange(32)
    wrong = blk[:, 8 * (p % 4) + p // 4].reshape(-1)
    if np.array_equal(wrong, step3_shuffle(x)):
        print("self-test: the shuffle equals its own inverse; the check "
              "would not see a direction error")
        failures += 1
    if failures:
        print("check_dump: self-test FAILED (%d)" % failures)
        return 1
    print("check_dump: self-test passed (literal steps == closed form on 5 "
          "shapes)")
    return 0


# ---- reading a dump -------------------------------------------------------

def need(cond, what):
    if not cond:
        raise Malformed(what)


def int_list(v, what, length=None):
    need(isinstance(v, list) and all(isinstance(x, int) and
                                     not isinstance(x, bool) and x >= 0
                                     for x in v), what + ": not a list of "
         "non-negative integers")
    if length is not None:
        need(len(v) == length, "%s: %d entries, want %d" % (what, len(v),
                                                            length))
    return [int(x) for x in v]


def load_set(root, which):
    """Entries of DIR/which/index.json by name, each with a read-only map of
    its file as unsigned integers of the element size."""
    d = os.path.join(root, which)
    path = os.path.join(d, "index.json")
    try:
        with open(path, "r", encoding="utf-8") as f:
            idx = json.load(f)
    except (OSError, ValueError) as e:
        raise Malformed("%s: %s" % (path, e))
    need(isinstance(idx, dict) and idx.get("format") == FORMAT,
         "%s: format is not %d" % (path, FORMAT))
    tensors = idx.get("tensors")
    need(isinstance(tensors, list), "%s: no tensors array" % path)
    out = {}
    for i, t in enumerate(tensors):
        w = "%s: tensors[%d]" % (path, i)
        need(isinstance(t, dict), w + ": not an object")
        for k in ("name", "file", "dtype", "shape", "layout", "box",
                  "tensor_shape"):
            need(k in t, "%s: no \"%s\"" % (w, k))
        name = t["name"]
        need(isinstance(name, str) and name, w + ": bad name")
        w = "%s (%s)" % (w, name)
        need(name not in out, w + ": duplicate name")
        need(t["dtype"] in DTYPE_BYTES, "%s: unknown dtype %r" %
             (w, t["dtype"]))
        shape = int_list(t["shape"], w + ": shape")
        tshape = int_list(t["tensor_shape"], w + ": tensor_shape")
        box = t["box"]
        need(isinstance(box, dict), w + ": box is not an object")
        start = int_list(box.get("start"), w + ": box.start", len(tshape))
        stop = int_list(box.get("stop"), w + ": box.stop", len(tshape))
        need(all(a <= b <= n for a, b, n in zip(start, stop, tshape)),
             w + ": box outside tensor_shape")
        fname = t["file"]
        need(isinstance(fname, str) and fname and "/" not in fname and
             fname not in (".", ".."), w + ": bad file name")
        fpath = os.path.join(d, fname)
        esize = DTYPE_BYTES[t["dtype"]]
        nbytes = esize * int(np.prod(shape, dtype=np.int64))
        try:
            size = os.path.getsize(fpath)
        except OSError as e:
            raise Malformed("%s: %s" % (w, e))
        need(size == nbytes, "%s: %s has %d bytes, shape says %d" %
             (w, fpath, size, nbytes))
        if nbytes == 0:
            data = np.zeros(shape, dtype=RAW[esize])
        else:
            data = np.memmap(fpath, dtype=RAW[esize], mode="r",
                             shape=tuple(shape))
        out[name] = {"meta": t, "shape": shape, "tensor_shape": tshape,
                     "start": start, "stop": stop, "data": data,
                     "esize": esize}
    return out


def source_of(sources, name, dtype, tshape, what):
    need(name in sources, "%s: source tensor %s is not in source/" %
         (what, name))
    s = sources[name]
    need(s["meta"]["dtype"] == dtype, "%s: source %s is %s, live is %s" %
         (what, name, s["meta"]["dtype"], dtype))
    need(s["shape"] == tshape, "%s: source %s has shape %s, tensor_shape "
         "says %s" % (what, name, s["shape"], tshape))
    return s["data"]


# ---- comparing ------------------------------------------------------------

class Report:
    def __init__(self):
        self.lines = 0
        self.bad_tensors = set()

    def mismatch(self, tensor, layout, expert, got, want, base_index):
        """One line for one (tensor, expert) class: how many elements
        differ, how many of those still hold the poison bytes (never
        written), and the first position in the live file's index space."""
        diff = got != want
        n = int(np.count_nonzero(diff))
        first = np.unravel_index(int(np.argmax(diff)), diff.shape)
        pos = tuple(base_index) + tuple(int(i) for i in first)
        width = 2 * got.dtype.itemsize
        poison = int.from_bytes(bytes([POISON]) * got.dtype.itemsize,
                                "little")
        unwritten = int(np.count_nonzero(got[diff] == poison))
        where = "" if expert is None else " expert %d (global %d)" % expert
        self.bad_tensors.add(tensor)
        self.lines += 1
        print("MISMATCH %s [%s]%s: %d of %d elements differ (%d still "
              "poison), first at %s: expected 0x%0*x got 0x%0*x" %
              (tensor, layout, where, n, diff.size, unwritten, list(pos),
               width, int(want[first]), width, int(got[first])))


def check_dense(name, t, sources, rep):
    meta = t["meta"]
    srcs = meta.get("sources")
    need(isinstance(srcs, list) and len(srcs) == 1,
         "live %s: a dense tensor needs exactly one source" % name)
    src = source_of(sources, srcs[0], meta["dtype"], t["tensor_shape"],
                    "live " + name)
    want = src[tuple(slice(a, b) for a, b in zip(t["start"], t["stop"]))]
    need(list(want.shape) == t["shape"], "live %s: shape %s, box is %s" %
         (name, t["shape"], list(want.shape)))
    got = t["data"]
    if not np.array_equal(got, want):
        rep.mismatch(name, meta["layout"], None, np.asarray(got),
                     np.asarray(want), [])


def check_experts(name, proj, t, sources, rep):
    meta = t["meta"]
    layout = meta["layout"]
    srcs = meta.get("sources")
    w13 = proj == "w13_weight"
    need(isinstance(srcs, list) and len(srcs) == (2 if w13 else 1),
         "live %s: wants %d sources" % (name, 2 if w13 else 1))
    need(len(t["tensor_shape"]) == 3, "live %s: tensor_shape is not 3-D" %
         name)
    e_all, rows, cols = t["tensor_shape"]
    e0, e1 = t["start"][0], t["stop"][0]
    need(t["start"][1:] == [0, 0] and t["stop"][1:] == [rows, cols],
         "live %s: box must be whole in dims 1 and 2" % name)
    n_local = e1 - e0
    if w13:
        inter, hidden = rows, cols
        gate = source_of(sources, srcs[0], meta["dtype"], t["tensor_shape"],
                         "live " + name)
        up = source_of(sources, srcs[1], meta["dtype"], t["tensor_shape"],
                       "live " + name)
    else:
        hidden, inter = rows, cols
        down = source_of(sources, srcs[0], meta["dtype"], t["tensor_shape"],
                         "live " + name)
    if layout == "checkpoint":
        shape = [n_local, 2 * inter, hidden] if w13 else [n_local, hidden,
                                                          inter]
    elif layout == "trtllm-bf16":
        need(meta["dtype"] == "bf16", "live %s: trtllm-bf16 needs bf16" %
             name)
        need(hidden % 64 == 0 and inter % 64 == 0 and (2 * inter) % 32 == 0
             and hidden % 32 == 0, "live %s: H=%d I=%d do not fit the "
             "layout" % (name, hidden, inter))
        shape = ([n_local, hidden // 64, 2 * inter, 64] if w13 else
                 [n_local, inter // 64, hidden, 64])
    else:
        raise Malformed("live %s: unknown layout %r" % (name, layout))
    need(t["shape"] == shape, "live %s: shape %s, %s wants %s" %
         (name, t["shape"], layout, shape))
    got_all = t["data"]
    lines = quiet = 0
    for i in range(n_local):
        e = e0 + i
        if layout == "checkpoint":
            want = (np.concatenate([gate[e], up[e]], axis=0) if w13 else
                    down[e])
        elif w13:
            want = trtllm_w13(gate[e], up[e])
        else:
            want = trtllm_w2(down[e])
        got = np.asarray(got_all[i])
        if np.array_equal(got, want):
            continue
        if lines < MAX_LINES_PER_TENSOR:
            rep.mismatch(name, layout, (i, e), got, np.asarray(want), [i])
        else:
            rep.bad_tensors.add(name)
            quiet += 1
        lines += 1
    if quiet:
        print("MISMATCH %s [%s]: %d more experts differ (lines left out)" %
              (name, layout, quiet))
        rep.lines += 1


def check(root):
    sources = load_set(root, "source")
    live = load_set(root, "live")
    for name, s in sources.items():
        need(s["meta"]["layout"] == "checkpoint" and
             s["start"] == [0] * len(s["shape"]) and
             s["stop"] == s["shape"] and s["tensor_shape"] == s["shape"],
             "source %s: must be a whole tensor in checkpoint layout" % name)
    rep = Report()
    total = 0
    for name, t in live.items():
        m = EXPERTS_RE.match(name)
        if m is not None:
            check_experts(name, m.group(2), t, sources, rep)
        elif t["meta"]["layout"] == "checkpoint":
            check_dense(name, t, sources, rep)
        else:
            raise Malformed("live %s: layout %r on a dense tensor" %
                            (name, t["meta"]["layout"]))
        total += t["data"].nbytes
    if rep.bad_tensors:
        print("check_dump: %d of %d tensors differ (%d mismatch lines), %d "
              "bytes compared" % (len(rep.bad_tensors), len(live), rep.lines,
                                  total))
        return 1
    print("check_dump: %d tensors, %d bytes, all bit-exact" % (len(live),
                                                               total))
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) != 2 or argv[1].startswith("-"):
        sys.stderr.write("usage: check_dump.py DIR | --self-test\n")
        return 2
    try:
        return check(argv[1])
    except Malformed as e:
        sys.stderr.write("check_dump: malformed dump: %s\n" % e)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
