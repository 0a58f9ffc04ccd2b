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

  write DIR --case single|sharded [--seed N] [--variant retype|reshape|drop]
      A checkpoint of several dtypes and odd shapes: DIR/model.safetensors,
      or three shards and model.safetensors.index.json (sharded). Tensor
      bytes are random (seeded), so every version differs. Variants an
      agent wanting the plain set refuses: retype stores model.norm.weight
      as F16 (not F32), reshape stores lm_head.weight transposed, drop
      leaves lm_head.weight out.
  bad KIND PATH
      A malformed checkpoint: a file (tiny, header-past-eof, truncated,
      offsets-past-eof, shape-mismatch, overlap, unknown-dtype,
      unsupported-dtype, bad-json, negative-shape, duplicate-name;
      huge-header: 1,048,577 one-byte U8 tensors, a 72 MB header;
      many-tensors: 262,145 empty U8 tensors, a 15 MB header) or a
      sharded directory
      (index-missing-shard, index-dotdot, index-absolute, index-wrong-shard,
      index-duplicate; index-too-many: 1,048,577 tensors in five shards).
  layout CKPT OUT.json --shm NAME --rank R --part all|top|bottom
      An agent layout (receiver/agent/layout_file.h) wanting the checkpoint's
      tensors: all of every tensor, or the top or bottom half of the rows
      (dim 0) of every tensor of two or more dimensions (bottom also leaves
      lm_head.weight out). Creates /dev/shm/NAME of the right size, filled
      with a poison byte.
  verify CKPT LAYOUT.json [--poison]
      Reads /dev/shm/NAME and compares it, byte for byte, with what the
      layout's wants must hold after a refit of CKPT; the bytes no want
      covers must still be poison. --poison: nothing may have been
      written at all (every byte is poison).

Exit 0 on success, 1 on a mismatch, 2 on bad usage or input.
"""

import json
import os
import random
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


def tensors(seed, variant=None):
    """[(name, dtype, shape, bytes)] for a seed."""
    rng = random.Random(seed)
    gen = None
    try:
        import numpy
        gen = numpy.random.default_rng(seed)
    except ImportError:
        pass
    out = []
    for name, dtype, shape in TENSORS:
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


def cmd_write(args):
    d = args[0]
    case = opt(args, "--case", "single")
    seed = int(opt(args, "--seed", "1"))
    entries = tensors(seed, opt(args, "--variant", None))
    os.makedirs(d, exist_ok=True)
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


def cmd_layout(args):
    ckpt, out = args[0], args[1]
    shm = opt(args, "--shm", None)
    rank = int(opt(args, "--rank", "0"))
    part = opt(args, "--part", "all")
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
    layout = {"format": 1, "rank": rank, "shm": "/" + shm, "shm_bytes": at,
              "regions": regions, "wants": wants}
    with open(out, "w") as f:
        json.dump(layout, f, indent=1)
    with open("/dev/shm/" + shm, "wb") as f:
        f.write(bytes([POISON]) * at)
    return 0


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
    if not poison_only:
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
    print("verify: %s: %d bytes, %d wants %s" %
          (layout["shm"], len(expect), len(layout["wants"]),
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
