#!/usr/bin/python3
"""write_safetensors.py - checkpoints, agent layouts and checks for the
wstream-send tests (tests/integration/send_safetensors.sh).

The tensors are made by Debian's python3-numpy, as a trainer's would be
(seeded normal floats, random integers; bf16 is the upper half of numpy's
float32, which is what bf16 is; numpy has no float8, so those two are
random bytes), and their bytes come from numpy itself. The safetensors
container is put together by hand (8-byte little-endian header length, JSON
header padded with spaces, the tensors' bytes), so the tests do not depend
on the C parser they test, nor on a safetensors package, which Debian does
not have. Without numpy the tensors are random bytes. (numpy, not torch:
importing torch takes seconds per call here, numpy a tenth of one.)

  write DIR --case single|sharded|moe [--seed N] [--variant V]
      A checkpoint of several dtypes and odd shapes: DIR/model.safetensors,
      or three shards and model.safetensors.index.json (sharded). Tensor
      bytes are random (seeded), so every version differs. Variants an
      agent wanting the plain set refuses: retype stores model.norm.weight
      as F16 (not F32), reshape stores lm_head.weight transposed, drop
      leaves lm_head.weight out.
      moe: Hugging Face per-expert MoE tensors
      (model.layers.{l}.mlp.experts.{e}.{gate,up,down}_proj.weight) of two
      layers (layer 0: 4 bf16 experts, H=64, I=128; layer 1: 3 f32
      experts, H=7, I=5) and a few dense tensors, in two shards with an
      index, a layer's experts split over both. Variants wstream-send
      refuses: drop-expert (layer 0 expert 2's down_proj missing),
      drop-last (layer 1 expert 2's up_proj missing), reshape-expert
      (layer 1 expert 1's gate_proj transposed), retype-expert (layer 1
      expert 1's down_proj F16), both (layer 1's grouped up_proj as well).
  bad KIND PATH
      A malformed checkpoint: a file (tiny, header-past-eof, truncated,
      offsets-past-eof, shape-mismatch, overlap, unknown-dtype,
      unsupported-dtype, bad-json, negative-shape, duplicate-name;
      huge-header: 1,048,577 one-byte U8 tensors, a 72 MB header;
      many-tensors: 262,145 empty U8 tensors, a 15 MB header) or a
      sharded directory
      (index-missing-shard, index-dotdot, index-absolute, index-wrong-shard,
      index-duplicate; index-too-many: 1,048,577 tensors in five shards).
  layout CKPT OUT.json --shm NAME --rank R --part all|top|bottom|moe-a|moe-b
      An agent layout (receiver/agent/layout_file.h) wanting the checkpoint's
      tensors: all of every tensor, or the top or bottom half of the rows
      (dim 0) of every tensor of two or more dimensions (bottom also leaves
      lm_head.weight out). moe-a and moe-b (a moe checkpoint) want the
      dense tensors whole and the grouped expert tensors
      (model.layers.{l}.mlp.experts.{proj}.weight, [E, rows, cols]): layer
      0 through an "experts" entry (moe-a: loader trtllm-bf16, ep rank 1 of
      2; moe-b: loader checkpoint, ep rank 0 of 2), layer 1 as dense wants
      of boxes across several experts (moe-b's down_proj with an "expert"
      marker). Creates /dev/shm/NAME of the right size, filled with a
      poison byte.
  verify CKPT LAYOUT.json [--poison]
      Reads /dev/shm/NAME and compares it, byte for byte, with what the
      layout's wants must hold after a refit of CKPT; the bytes no want
      covers must still be poison. --poison: nothing may have been
      written at all (every byte is poison). For a layout of grouped
      expert tensors the reference is built here with numpy: each grouped
      tensor stacked from the per-expert tensors read from the files, each
      want its box, each "experts" entry what its loader makes (checkpoint:
      [gate; up] and down; trtllm-bf16: check_dump.py's step-by-step
      reference).

Exit 0 on success, 1 on a mismatch, 2 on bad usage or input.
"""

import json
import os
import random
import re
import struct
import sys

POISON = 0xA5
ALIGN = 64

# safetensors dtype -> (element bytes, wstream dtype name)
DTYPES = {
    "BF16": (2, "bf16"),
    "F16": (2, "f16"),
    "F32": (4, "f32"),
    "F64": (8, "f64"),
    "F8_E4M3": (1, "fp8_e4m3"),
    "F8_E5M2": (1, "fp8_e5m2"),
    "I8": (1, "i8"),
    "U8": (1, "u8"),
    "I32": (4, "i32"),
    "I64": (8, "i64"),
}
# wstream dtype name -> element bytes
DTYPES_BY_WST = {wst: size for size, wst in DTYPES.values()}

# name, dtype, shape: several dtypes, odd extents, a scalar, an empty one
# and a large one (several data chunks).
TENSORS = [
    ("model.embed_tokens.weight", "BF16", [37, 19]),
    ("model.layers.0.self_attn.q_proj.weight", "F16", [19, 23]),
    ("model.layers.0.input_layernorm.weight", "F32", [19]),
    ("model.layers.0.mlp.up_proj.weight", "F8_E4M3", [29, 19]),
    ("model.layers.0.mlp.gate_proj.weight", "F8_E5M2", [29, 19]),
    ("model.layers.1.self_attn.k_proj.weight", "F64", [5, 7, 3]),
    ("model.layers.1.counts", "I32", [13]),
    ("model.layers.1.ids", "I64", [3, 5]),
    ("model.layers.1.mlp.q8", "I8", [17, 3]),
    ("model.layers.1.mlp.u8", "U8", [1031]),
    ("model.layers.2.mlp.down_proj.weight", "BF16", [1031, 2053]),
    ("model.norm.weight", "F32", [19]),
    ("model.scale", "F32", []),
    ("model.empty", "F32", [0, 4]),
    ("lm_head.weight", "BF16", [37, 19]),
]


# The moe case: (layer, dtype, experts E, hidden H, inter I). Layer 0 fits
# the trtllm-bf16 loader (bf16, H % 64 == 0, I % 128 == 0).
MOE_LAYERS = [(0, "BF16", 4, 64, 128), (1, "F32", 3, 7, 5)]
PROJS = ("gate_proj", "up_proj", "down_proj")
EXPERT_RE = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\."
                       r"(gate_proj|up_proj|down_proj)\.weight$")


def expert_name(layer, e, proj):
    return "model.layers.%d.mlp.experts.%d.%s.weight" % (layer, e, proj)


def grouped_name(layer, proj):
    return "model.layers.%d.mlp.experts.%s.weight" % (layer, proj)


def moe_spec(variant):
    """[(name, dtype, shape)] of the moe checkpoint."""
    out = [("model.embed_tokens.weight", "BF16", [37, 19]),
           ("model.layers.0.mlp.gate.weight", "BF16", [4, 64]),
           ("model.layers.1.input_layernorm.weight", "F32", [7]),
           ("model.norm.weight", "F32", [7])]
    for layer, dtype, n_exp, hid, inter in MOE_LAYERS:
        for e in range(n_exp):
            for proj in PROJS:
                out.append((expert_name(layer, e, proj), dtype,
                            [hid, inter] if proj == "down_proj"
                            else [inter, hid]))
    drop = {"drop-expert": expert_name(0, 2, "down_proj"),
            "drop-last": expert_name(1, 2, "up_proj")}.get(variant)
    out = [t for t in out if t[0] != drop]
    for i, (name, dtype, shape) in enumerate(out):
        if variant == "reshape-expert" and \
                name == expert_name(1, 1, "gate_proj"):
            out[i] = (name, dtype, shape[::-1])
        if variant == "retype-expert" and \
                name == expert_name(1, 1, "down_proj"):
            out[i] = (name, "F16", shape)
    if variant == "both":
        out.append((grouped_name(1, "up_proj"), "F32", [3, 5, 7]))
    return out


def nbytes(dtype, shape):
    n = DTYPES[dtype][0]
    for d in shape:
        n *= d
    return n


def numpy_bytes(dtype, shape, gen):
    """The bytes of a numpy array of 'dtype' and 'shape' (seeded by 'gen'),
    or None where numpy has no such dtype."""
    import numpy as np
    floats = {"F16": np.float16, "F32": np.float32, "F64": np.float64}
    ints = {"I8": np.int8, "U8": np.uint8, "I32": np.int32, "I64": np.int64}
    if dtype in floats:
        a = (gen.standard_normal(shape) * 3).astype(floats[dtype])
    elif dtype == "BF16":
        f = (gen.standard_normal(shape) * 3).astype("<f4")
        a = (f.view("<u4") >> 16).astype("<u2")
    elif dtype in ints:
        info = np.iinfo(ints[dtype])
        a = gen.integers(info.min, info.max, size=shape, dtype=ints[dtype],
                         endpoint=True)
    else:
        return None
    return np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()


def tensors(seed, variant=None, spec=TENSORS):
    """[(name, dtype, shape, bytes)] for a seed."""
    rng = random.Random(seed)
    gen = None
    try:
        import numpy
        gen = numpy.random.default_rng(seed)
    except ImportError:
        pass
    out = []
    for name, dtype, shape in spec:
        if variant == "retype" and name == "model.norm.weight":
            dtype = "F16"
        if variant == "reshape" and name == "lm_head.weight":
            shape = shape[::-1]
        data = numpy_bytes(dtype, shape, gen) if gen is not None else None
        if data is None:
            data = rng.randbytes(nbytes(dtype, shape))
        assert len(data) == nbytes(dtype, shape)
        if variant == "drop" and name == "lm_head.weight":
            continue
        out.append((name, dtype, shape, data))
    return out


def pack(entries, gap_after=None, metadata=None):
    """safetensors bytes of [(name, dtype, shape, data)]; 'gap_after' adds
    unused bytes after that tensor (allowed by the format)."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    blobs = []
    at = 0
    for name, dtype, shape, data in entries:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
        if name == gap_after:
            blobs.append(b"\x5a" * 13)
            at += 13
    return raw(header, b"".join(blobs))


def raw(header, data):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)  # padded like the real writers
    return struct.pack("<Q", len(text)) + text + data


def write_file(path, blob):
    with open(path, "wb") as f:
        f.write(blob)


SHARDS = ["model-00001-of-00003.safetensors",
          "model-00002-of-00003.safetensors",
          "model-00003-of-00003.safetensors"]


def shard_of(name):
    if name.startswith("model.layers.0.") or name == "model.embed_tokens.weight":
        return 0
    if name.startswith("model.layers.1.") or name == "model.scale":
        return 1
    return 2


def write_index(d, weight_map, total):
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total},
                   "weight_map": weight_map}, f, indent=2)


def write_moe(d, seed, variant):
    """Two shards and an index; layer 1's experts split over both."""
    entries = tensors(seed, None, moe_spec(variant))
    shards = ("model-00001-of-00002.safetensors",
              "model-00002-of-00002.safetensors")
    weight_map = {}
    in_first = ("model.layers.0.", "model.layers.1.mlp.experts.0.")
    for k, shard in enumerate(shards):
        mine = [e for e in entries if e[0].startswith(in_first) == (k == 0)]
        write_file(os.path.join(d, shard),
                   pack(mine, metadata={"format": "pt"}))
        for e in mine:
            weight_map[e[0]] = shard
    write_index(d, weight_map, sum(len(e[3]) for e in entries))
    return 0


def cmd_write(args):
    d = args[0]
    case = opt(args, "--case", "single")
    seed = int(opt(args, "--seed", "1"))
    os.makedirs(d, exist_ok=True)
    if case == "moe":
        return write_moe(d, seed, opt(args, "--variant", None))
    entries = tensors(seed, opt(args, "--variant", None))
    if case == "single":
        write_file(os.path.join(d, "model.safetensors"),
                   pack(entries, gap_after="model.layers.1.counts",
                        metadata={"format": "pt"}))
        return 0
    if case != "sharded":
        return usage("unknown case " + case)
    weight_map = {}
    for k, shard in enumerate(SHARDS):
        mine = [e for e in entries if shard_of(e[0]) == k]
        write_file(os.path.join(d, shard), pack(mine, metadata={"format": "pt"}))
        for e in mine:
            weight_map[e[0]] = shard
    write_index(d, weight_map, sum(len(e[3]) for e in entries))
    return 0


def small():
    return [("a.weight", "F32", [2, 3], bytes(range(24))),
            ("b.weight", "BF16", [5], bytes(range(10)))]


def cmd_bad(args):
    kind, path = args[0], args[1]
    good = pack(small())
    header = {"a.weight": {"dtype": "F32", "shape": [2, 3],
                           "data_offsets": [0, 24]},
              "b.weight": {"dtype": "BF16", "shape": [5],
                           "data_offsets": [24, 34]}}
    data = bytes(range(34))
    if kind == "tiny":
        blob = good[:5]
    elif kind == "header-past-eof":
        blob = good[:40]
    elif kind == "truncated":
        blob = good[:-7]
    elif kind == "offsets-past-eof":
        header["b.weight"]["data_offsets"] = [24, 44]
        header["b.weight"]["shape"] = [10]
        blob = raw(header, data)
    elif kind == "shape-mismatch":
        header["a.weight"]["shape"] = [2, 4]
        blob = raw(header, data)
    elif kind == "overlap":
        header["b.weight"]["data_offsets"] = [20, 30]
        blob = raw(header, data)
    elif kind == "unknown-dtype":
        header["b.weight"]["dtype"] = "Q4_K"
        blob = raw(header, data)
    elif kind == "unsupported-dtype":
        header["b.weight"]["dtype"] = "I16"
        blob = raw(header, data)
    elif kind == "bad-json":
        text = b'{"a.weight": {"dtype": "F32", "shape": [2, 3],}}'
        blob = struct.pack("<Q", len(text)) + text + data
    elif kind == "negative-shape":
        header["b.weight"]["shape"] = [-5]
        blob = raw(header, data)
    elif kind == "duplicate-name":
        # A dict cannot hold the same key twice: the text is spelled out.
        text = (b'{"a.weight":{"dtype":"F32","shape":[2,3],'
                b'"data_offsets":[0,24]},"b.weight":{"dtype":"BF16",'
                b'"shape":[5],"data_offsets":[24,34]},"a.weight":'
                b'{"dtype":"U8","shape":[0],"data_offsets":[34,34]}}')
        blob = struct.pack("<Q", len(text)) + text + data
    elif kind == "huge-header":
        blob = many_u8(1048577, 1)
    elif kind == "many-tensors":
        blob = many_u8(262145, 0)
    elif kind.startswith("index-"):
        return bad_index(kind, path)
    else:
        return usage("unknown kind " + kind)
    write_file(path, blob)
    return 0


def many_u8(n, size):
    """n U8 tensors of 'size' bytes each (0 or 1), the header built as
    text: json.dumps of a million-entry dict takes seconds."""
    parts = ['"t.%07d":{"dtype":"U8","shape":[%d],"data_offsets":[%d,%d]}'
             % (i, size, i * size, (i + 1) * size) for i in range(n)]
    text = ("{" + ",".join(parts) + "}").encode()
    return struct.pack("<Q", len(text)) + text + bytes(n * size)


def bad_index(kind, d):
    os.makedirs(d, exist_ok=True)
    if kind == "index-too-many":
        # Four shards at the per-file limit of 262,144 tensors (links to
        # one file, as in a Hugging Face cache) and one more tensor:
        # 1,048,577 in all, one over the checkpoint's limit. The index
        # names each shard once.
        write_file(os.path.join(d, "full.bin"), many_u8(262144, 0))
        weight_map = {}
        for k in range(5):
            shard = "s%d.safetensors" % k
            if k < 4:
                os.symlink("full.bin", os.path.join(d, shard))
            else:
                write_file(os.path.join(d, shard), many_u8(1, 0))
            weight_map["t.%07d" % k] = shard
        write_index(d, weight_map, 0)
        return 0
    entries = small()
    write_file(os.path.join(d, "s1.safetensors"), pack(entries[:1]))
    write_file(os.path.join(d, "s2.safetensors"), pack(entries[1:]))
    weight_map = {"a.weight": "s1.safetensors", "b.weight": "s2.safetensors"}
    if kind == "index-missing-shard":
        weight_map["b.weight"] = "s3.safetensors"
    elif kind == "index-dotdot":
        weight_map["b.weight"] = "../s2.safetensors"
    elif kind == "index-absolute":
        weight_map["b.weight"] = os.path.abspath(os.path.join(d, "s2.safetensors"))
    elif kind == "index-wrong-shard":
        weight_map["b.weight"] = "s1.safetensors"
    elif kind == "index-duplicate":
        write_file(os.path.join(d, "s2.safetensors"), pack(entries))
    else:
        return usage("unknown kind " + kind)
    write_index(d, weight_map, 34)
    return 0


def read_checkpoint(path):
    """{name: (dtype, shape, bytes)} read from the files themselves."""
    if os.path.isdir(path):
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
            files = [os.path.join(path, s) for s in files]
        else:
            files = [os.path.join(path, "model.safetensors")]
    else:
        files = [path]
    out = {}
    for name in files:
        with open(name, "rb") as f:
            blob = f.read()
        (n,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8:8 + n])
        base = 8 + n
        for key, e in header.items():
            if key == "__metadata__":
                continue
            b, end = e["data_offsets"]
            out[key] = (e["dtype"], e["shape"], blob[base + b:base + end])
    return out


def want_rows(name, shape, part):
    """The dim-0 row range [a, b) a layout part wants, or None."""
    if nbytes("U8", shape) == 0 and len(shape) > 0:
        return None  # no elements: nothing to want
    rows = shape[0] if shape else 1
    if part == "all" or len(shape) < 2:
        return (0, rows)
    if part == "bottom" and name == "lm_head.weight":
        return None
    half = (rows + 1) // 2
    return (0, half) if part == "top" else (half, rows)


def moe_groups(source):
    """{grouped name: (wstream dtype, [E, rows, cols], [(e, per-expert
    name)])} of a checkpoint's per-expert tensors, found by name alone."""
    found = {}
    for name, (dtype, shape, _) in source.items():
        m = EXPERT_RE.match(name)
        if m:
            key = grouped_name(int(m[1]), m[3])
            found.setdefault(key, []).append((int(m[2]), name, dtype, shape))
    out = {}
    for key, experts in found.items():
        experts.sort()
        _, _, dtype, shape = experts[0]
        out[key] = (DTYPES[dtype][1], [len(experts)] + shape,
                    [(e, n) for e, n, _, _ in experts])
    return out


# moe-a / moe-b: the boxes of layer 1's grouped tensors, and the "experts"
# entry of layer 0 (loader, ep_rank of 2).
MOE_PARTS = {
    "moe-a": ({"gate_proj": ([1, 1, 2], [3, 4, 7]),
               "up_proj": ([0, 0, 0], [3, 5, 7]),
               "down_proj": ([0, 0, 0], [2, 7, 5])}, "trtllm-bf16", 1),
    "moe-b": ({"gate_proj": ([0, 0, 0], [3, 5, 7]),
               "up_proj": ([0, 2, 0], [3, 3, 7]),
               "down_proj": ([1, 0, 0], [2, 7, 5])}, "checkpoint", 0),
}


def moe_layout(source, part):
    """(regions, wants, experts, bytes) of a moe-a or moe-b layout."""
    boxes, loader, ep_rank = MOE_PARTS[part]
    groups = moe_groups(source)
    regions, wants, experts, at = [], [], [], 0

    def region(name, size):
        nonlocal at
        regions.append({"name": name, "offset": at, "bytes": size})
        at += -(-size // ALIGN) * ALIGN

    for name, (dtype, shape, data) in sorted(source.items()):
        if EXPERT_RE.match(name):
            continue
        region(name, len(data))
        wants.append({"tensor": name, "dtype": DTYPES[dtype][1],
                      "shape": shape, "start": [0] * len(shape),
                      "stop": shape, "region": name, "offset": 0})
    for proj, (start, stop) in boxes.items():
        name = grouped_name(1, proj)
        dtype, shape, _ = groups[name]
        size = DTYPES_BY_WST[dtype]
        for a, b in zip(start, stop):
            size *= b - a
        region(name, size)
        w = {"tensor": name, "dtype": dtype, "shape": shape, "start": start,
             "stop": stop, "region": name, "offset": 0}
        if part == "moe-b" and proj == "down_proj":
            w["expert"] = {"ep_rank": 1, "ep_size": 3}
        wants.append(w)
    dtype, (n_exp, inter, hid), _ = groups[grouped_name(0, "gate_proj")]
    local = n_exp // 2
    proj_bytes = local * inter * hid * DTYPES_BY_WST[dtype]
    region("model.layers.0.mlp.experts.w13_weight", 2 * proj_bytes)
    region("model.layers.0.mlp.experts.w2_weight", proj_bytes)
    experts.append({"layer": 0, "loader": loader, "dtype": dtype,
                    "experts": n_exp, "ep_rank": ep_rank, "ep_size": 2,
                    "hidden": hid, "inter": inter,
                    "w13": {"region": "model.layers.0.mlp.experts.w13_weight",
                            "offset": 0},
                    "w2": {"region": "model.layers.0.mlp.experts.w2_weight",
                           "offset": 0}})
    return regions, wants, experts, at


def cmd_layout(args):
    ckpt, out = args[0], args[1]
    shm = opt(args, "--shm", None)
    rank = int(opt(args, "--rank", "0"))
    part = opt(args, "--part", "all")
    if part in MOE_PARTS:
        regions, wants, experts, at = moe_layout(read_checkpoint(ckpt), part)
        write_layout(out, shm, rank, regions, wants, at, experts)
        return 0
    regions, wants, at = [], [], 0
    for name, (dtype, shape, data) in sorted(read_checkpoint(ckpt).items()):
        rows = want_rows(name, shape, part)
        if rows is None:
            continue
        full = shape if shape else [1]
        row_bytes = len(data) // full[0]
        size = (rows[1] - rows[0]) * row_bytes
        regions.append({"name": name, "offset": at, "bytes": size})
        wants.append({"tensor": name, "dtype": DTYPES[dtype][1],
                      "shape": full,
                      "start": [rows[0]] + [0] * (len(full) - 1),
                      "stop": [rows[1]] + full[1:],
                      "region": name, "offset": 0})
        at += -(-size // ALIGN) * ALIGN
    write_layout(out, shm, rank, regions, wants, at)
    return 0


def write_layout(out, shm, rank, regions, wants, at, experts=None):
    """The layout file, and its shm created full of poison."""
    layout = {"format": 1, "rank": rank, "shm": "/" + shm, "shm_bytes": at,
              "regions": regions, "wants": wants}
    if experts:
        layout["experts"] = experts
    with open(out, "w") as f:
        json.dump(layout, f, indent=1)
    with open("/dev/shm/" + shm, "wb") as f:
        f.write(bytes([POISON]) * at)


def expect_moe(layout, source, expect):
    """Writes into 'expect' what a layout of grouped expert tensors must
    hold, from a numpy reference built here: every grouped tensor stacked
    from its per-expert tensors, each want its box, each "experts" entry
    its loader's layout of the engine's experts."""
    import numpy as np
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.dont_write_bytecode = True  # nothing into the source tree
    import check_dump  # the trtllm-bf16 reference, step by step
    raw = {1: np.dtype("u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4"),
           8: np.dtype("<u8")}
    arrays = {}
    for name, (dtype, shape, data) in source.items():
        arrays[name] = np.frombuffer(data, raw[DTYPES[dtype][0]]).reshape(
            shape or [1])
    for name, (_, _, experts) in moe_groups(source).items():
        assert [e for e, _ in experts] == list(range(len(experts))), name
        arrays[name] = np.stack([arrays[n] for _, n in experts])
    regions = {r["name"]: r for r in layout["regions"]}

    def put(region, offset, a):
        at = regions[region]["offset"] + offset
        b = np.ascontiguousarray(a).tobytes()
        expect[at:at + len(b)] = b

    for w in layout["wants"]:
        box = tuple(slice(a, b) for a, b in zip(w["start"], w["stop"]))
        put(w["region"], w["offset"], arrays[w["tensor"]][box])
    for x in layout.get("experts", []):
        local = x["experts"] // x["ep_size"]
        first = x["ep_rank"] * local
        gate, up, down = (arrays[grouped_name(x["layer"], p)][
            first:first + local] for p in PROJS)
        if x["loader"] == "checkpoint":
            w13 = np.concatenate([gate, up], axis=1)
            w2 = down
        else:
            w13 = np.stack([check_dump.trtllm_w13(g, u)
                            for g, u in zip(gate, up)])
            w2 = np.stack([check_dump.trtllm_w2(d) for d in down])
        put(x["w13"]["region"], x["w13"]["offset"], w13)
        put(x["w2"]["region"], x["w2"]["offset"], w2)


def cmd_verify(args):
    ckpt, layout_path = args[0], args[1]
    poison_only = "--poison" in args
    with open(layout_path) as f:
        layout = json.load(f)
    with open("/dev/shm/" + layout["shm"].lstrip("/"), "rb") as f:
        live = f.read()
    expect = bytearray([POISON]) * layout["shm_bytes"]
    source = read_checkpoint(ckpt)
    regions = {r["name"]: r for r in layout["regions"]}
    if not poison_only and any(w["tensor"] not in source
                               for w in layout["wants"]):
        expect_moe(layout, source, expect)
    elif not poison_only:
        for w in layout["wants"]:
            _, _, data = source[w["tensor"]]
            row_bytes = len(data) // w["shape"][0]
            a, b = w["start"][0], w["stop"][0]
            at = regions[w["region"]]["offset"] + w["offset"]
            expect[at:at + (b - a) * row_bytes] = \
                data[a * row_bytes:b * row_bytes]
    if len(live) < len(expect):
        print("verify: %s holds %d bytes, expected %d" %
              (layout["shm"], len(live), len(expect)))
        return 1
    live = live[:len(expect)]
    if live != bytes(expect):
        spans = sorted((r["offset"], r["offset"] + r["bytes"], r["name"])
                       for r in layout["regions"])
        bad = [name for a, b, name in spans if live[a:b] != expect[a:b]]
        first = next(i for i in range(len(expect)) if live[i] != expect[i])
        print("verify: MISMATCH in %s: first differing byte at %d; %s" %
              (layout["shm"], first,
               "regions " + ", ".join(bad) if bad
               else "bytes outside every want were written"))
        return 1
    n_exp = len(layout.get("experts", []))
    print("verify: %s: %d bytes, %d wants%s %s" %
          (layout["shm"], len(expect), len(layout["wants"]),
           " and %d experts entries" % n_exp if n_exp else "",
           "untouched (all poison)" if poison_only else "bit-exact"))
    return 0


def opt(args, name, default):
    if name in args:
        i = args.index(name)
        if i + 1 < len(args):
            return args[i + 1]
    return default


def usage(msg):
    sys.stderr.write("write_safetensors: %s\n" % msg)
    return 2


def main(argv):
    cmds = {"write": (cmd_write, 1), "bad": (cmd_bad, 2),
            "layout": (cmd_layout, 2), "verify": (cmd_verify, 2)}
    if len(argv) < 2 or argv[1] not in cmds or len(argv) < 2 + cmds[argv[1]][1]:
        return usage("usage: see the module docstring")
    return cmds[argv[1]][0](argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
