"""wstream.sharding: which boxes of which checkpoint tensors each parameter
of a model holds, written once and used by both ends of a refit.

The wire carries checkpoint tensors by their Hugging Face names and
global shapes. An engine's parameter may hold one of them whole (a
replicated tensor), a tensor-parallel slice of it (column or row
parallel), its rank's experts of a grouped expert tensor, or several of
them side by side (a fused [q; k; v] or [gate; up]). A Spec says which,
with rules matched on parameter names:

    spec = Spec([
        fused(r"(.*)\\.qkv_proj\\.weight",
              [r"\\1.q_proj.weight", r"\\1.k_proj.weight",
               r"\\1.v_proj.weight"], sizes=[q, kv, kv], tp_dim=0),
        row(r".*\\.o_proj\\.weight"),
    ], tp_rank=1, tp_size=2)
    spec.place("model.layers.0.self_attn.qkv_proj.weight", (1536, 2048))

A parameter no rule matches is its own checkpoint tensor, whole
(identity names, replicated): a single-GPU model needs no rules at all,
unless it fuses tensors the checkpoint keeps apart.

place() gives the parameter's Placement: its pieces, each a box of one
checkpoint tensor and where in the parameter the box's origin lies.
want_boxes() cuts a piece into the boxes a receiver can write (rows at
one pitch); shard_boxes() into the boxes a sender can read (contiguous).
The engine (wstream.attach) turns the first into its layout's wants; a
trainer's Sender (register_model) the second into its shards; so both
ends agree by construction.

Pure Python, no torch: shapes are tuples of ints.
"""
import collections
import itertools
import re

# One box of checkpoint tensor 'tensor' (global shape 'shape'),
# [start, stop) per dimension, held by a parameter whose elements, viewed
# with the checkpoint tensor's rank ('view' of the Placement), hold the
# box's origin at index 'dst'.
Piece = collections.namedtuple("Piece", "tensor shape start stop dst")

# What a parameter holds: 'view' is the parameter's shape as the pieces
# index it (the parameter's own shape, or (1,) + it for one expert of a
# grouped tensor).
Placement = collections.namedtuple("Placement", "param view pieces")


def _dim(d, ndim, what):
    if d is None:
        return None
    if isinstance(d, bool) or not isinstance(d, int):
        raise TypeError("%s must be an int, not %s" % (what, type(d).__name__))
    if not -ndim <= d < ndim:
        raise ValueError("%s %d is out of range for %d dims" % (what, d, ndim))
    return d % ndim


class Rule:
    """Parameters whose name fully matches 'pattern' (a regex) hold boxes
    of checkpoint tensors.

    tensors: the checkpoint tensor's name as a template over the match
    (re's \\1 or \\g<name>), None for the parameter's own name; or a list
    of them, fused side by side along fuse_dim, each 'sizes[i]' long
    there in the checkpoint (global, before any split).
    tp_dim, ep_dim: the dimension (of the view) split evenly over the
    tensor-parallel or expert-parallel ranks: the rank holds slice
    [rank * n / size, (rank + 1) * n / size) of it, of each fused part.
    expert: for a parameter that holds one expert of a grouped tensor
    ([E, rows, cols] on the wire, one [rows, cols] parameter per expert):
    the match group (name or number) holding the global expert id, and
    experts: E.
    """

    def __init__(self, pattern, tensors=None, sizes=None, fuse_dim=0,
                 tp_dim=None, ep_dim=None, expert=None, experts=None):
        self.regex = re.compile(pattern)
        if tensors is None or isinstance(tensors, str):
            self.tensors = [tensors]
        else:
            self.tensors = list(tensors)
            if not self.tensors or not all(isinstance(t, str)
                                           for t in self.tensors):
                raise TypeError("rule %r: tensors must be a str or a "
                                "non-empty list of str" % pattern)
        if len(self.tensors) > 1:
            if sizes is None or len(sizes) != len(self.tensors):
                raise ValueError("rule %r fuses %d tensors: sizes must "
                                 "give each one's length along dim %s"
                                 % (pattern, len(self.tensors), fuse_dim))
            for s in sizes:
                if isinstance(s, bool) or not isinstance(s, int) or s <= 0:
                    raise ValueError("rule %r: sizes must be positive ints, "
                                     "not %r" % (pattern, s))
        elif sizes is not None:
            raise ValueError("rule %r: sizes is for fused tensors" % pattern)
        self.sizes = list(sizes) if sizes is not None else None
        self.fuse_dim, self.tp_dim, self.ep_dim = fuse_dim, tp_dim, ep_dim
        if (expert is None) != (experts is None):
            raise ValueError("rule %r: expert and experts go together"
                             % pattern)
        if experts is not None and (isinstance(experts, bool) or
                                    not isinstance(experts, int) or
                                    experts <= 0):
            raise ValueError("rule %r: experts must be a positive int"
                             % pattern)
        self.expert, self.experts = expert, experts
        self.pattern = pattern

    def __repr__(self):
        return "<wstream.sharding.Rule %r>" % self.pattern

    def place(self, name, shape, match, ranks):
        """The pieces of parameter 'name' of local 'shape' (a tuple) for
        ranks = {"tp": (rank, size), "ep": (rank, size)}."""
        view = tuple(shape)
        first = 0
        if self.expert is not None:
            view = (1,) + view
            first = self._expert_id(name, match)
        nd = len(view)
        what = "parameter %r (rule %r)" % (name, self.pattern)
        if nd == 0:
            raise ValueError("%s is 0-dim: give it shape (1,)" % what)
        tp = _dim(self.tp_dim, nd, "tp_dim")
        ep = _dim(self.ep_dim, nd, "ep_dim")
        if tp is not None and tp == ep:
            raise ValueError("%s: tp_dim and ep_dim are both %d" % (what, tp))
        if self.expert is not None and 0 in (tp, ep):
            raise ValueError("%s holds one expert: dim 0 cannot be split"
                             % what)
        split = {}
        for d, key in ((tp, "tp"), (ep, "ep")):
            if d is not None and ranks[key][1] > 1:
                split[d] = ranks[key]
        fuse = _dim(self.fuse_dim, nd, "fuse_dim") \
            if len(self.tensors) > 1 else None
        names = [name if t is None else match.expand(t)
                 for t in self.tensors]
        # Each part's local length along the fused dim (the whole view's
        # length when nothing is fused).
        if fuse is None:
            local_lengths = [None]
        else:
            r, size = split.get(fuse, (0, 1))
            local_lengths = []
            for t, s in zip(names, self.sizes):
                if s % size:
                    raise ValueError("%s: %r is %d long along dim %d, not "
                                     "divisible by %d ranks"
                                     % (what, t, s, fuse, size))
                local_lengths.append(s // size)
            if sum(local_lengths) != view[fuse]:
                raise ValueError(
                    "%s has %d along dim %d but its parts %s hold %d there"
                    % (what, view[fuse], fuse, names, sum(local_lengths)))
        pieces = []
        offset = 0
        for i, tensor in enumerate(names):
            glob, start, stop, dst = [], [], [], []
            for d in range(nd):
                local = view[d]
                if d == fuse:
                    local = local_lengths[i]
                r, size = split.get(d, (0, 1))
                g = local * size if d != fuse else self.sizes[i]
                lo = r * local
                if self.expert is not None and d == 0:
                    g, lo = self.experts, first
                glob.append(g)
                start.append(lo)
                stop.append(lo + local)
                dst.append(offset if d == fuse else 0)
            if fuse is not None:
                offset += local_lengths[i]
            pieces.append(Piece(tensor, tuple(glob), tuple(start),
                                tuple(stop), tuple(dst)))
        return Placement(name, view, pieces)

    def _expert_id(self, name, match):
        try:
            text = match.group(self.expert)
        except IndexError as e:
            raise ValueError("parameter %r (rule %r): no group %r in the "
                             "match (%s)" % (name, self.pattern, self.expert,
                                             e)) from None
        if text is None or not text.isdigit():
            raise ValueError("parameter %r (rule %r): group %r is %r, not an "
                             "expert id" % (name, self.pattern, self.expert,
                                            text))
        e = int(text)
        if e >= self.experts:
            raise ValueError("parameter %r (rule %r): expert %d of %d"
                             % (name, self.pattern, e, self.experts))
        return e


def replicated(pattern, tensor=None):
    """The whole checkpoint tensor (default: the parameter's name)."""
    return Rule(pattern, tensor)


def column(pattern, tensor=None):
    """Column parallel (a Linear's output dim, dim 0): the rank's rows."""
    return Rule(pattern, tensor, tp_dim=0)


def row(pattern, tensor=None):
    """Row parallel (a Linear's input dim, the last): the rank's columns."""
    return Rule(pattern, tensor, tp_dim=-1)


def fused(pattern, tensors, sizes, dim=0, tp_dim=None, ep_dim=None):
    """Several checkpoint tensors side by side along 'dim' ([q; k; v],
    [gate; up]); with tp_dim == dim each is split over the ranks first
    (the rank's q rows, then its k rows, ...)."""
    return Rule(pattern, tensors, sizes=sizes, fuse_dim=dim, tp_dim=tp_dim,
                ep_dim=ep_dim)


def experts(pattern, tensors=None, sizes=None, dim=1, tp_dim=None):
    """A grouped expert parameter [E_local, ...]: the expert-parallel
    rank's experts (linear placement: rank r holds [r*E/ep, (r+1)*E/ep)),
    of one checkpoint tensor or of several fused along 'dim' ([gate; up])."""
    return Rule(pattern, tensors, sizes=sizes, fuse_dim=dim, ep_dim=0,
                tp_dim=tp_dim)


def per_expert(pattern, tensor, expert, experts):
    """A parameter that is one expert of a grouped checkpoint tensor
    ([E, rows, cols]): 'expert' names the match group with its id."""
    return Rule(pattern, tensor, expert=expert, experts=experts)


class Spec:
    """Rules (the first that matches wins) and this rank's place in the
    tensor- and expert-parallel groups; see the module docstring."""

    def __init__(self, rules=(), tp_rank=0, tp_size=1, ep_rank=0,
                 ep_size=1):
        for what, r, size in (("tp", tp_rank, tp_size),
                              ("ep", ep_rank, ep_size)):
            for v in (r, size):
                if isinstance(v, bool) or not isinstance(v, int):
                    raise TypeError("%s rank and size must be ints" % what)
            if size < 1 or not 0 <= r < size:
                raise ValueError("%s rank %d of %d" % (what, r, size))
        self.rules = list(rules)
        for rule in self.rules:
            if not isinstance(rule, Rule):
                raise TypeError("rules must be wstream.sharding.Rule "
                                "objects, not %s" % type(rule).__name__)
        self.ranks = {"tp": (tp_rank, tp_size), "ep": (ep_rank, ep_size)}

    def __repr__(self):
        return "<wstream.sharding.Spec tp %d/%d ep %d/%d, %d rules>" % (
            self.ranks["tp"] + self.ranks["ep"] + (len(self.rules),))

    def place(self, name, shape):
        """The Placement of parameter 'name' whose local shape is 'shape'."""
        shape = tuple(int(s) for s in shape)
        for rule in self.rules:
            m = rule.regex.fullmatch(name)
            if m is not None:
                return rule.place(name, shape, m, self.ranks)
        if not shape:
            raise ValueError("parameter %r is 0-dim: wstream has shape "
                             "(1,) for it; view it so" % name)
        zero = (0,) * len(shape)
        return Placement(name, shape,
                         [Piece(name, shape, zero, shape, zero)])

    def placements(self, shapes):
        """[Placement] of {name: shape}, checking that no two parameters
        hold overlapping boxes of one checkpoint tensor."""
        out = [self.place(n, s) for n, s in shapes.items()]
        check_disjoint(out)
        return out


def _overlap(a, b):
    return all(a.start[d] < b.stop[d] and b.start[d] < a.stop[d]
               for d in range(len(a.start)))


def check_disjoint(placements):
    """ValueError when two pieces hold overlapping boxes of one tensor or
    one tensor appears with two global shapes."""
    by_tensor = collections.defaultdict(list)
    for p in placements:
        for piece in p.pieces:
            by_tensor[piece.tensor].append((p.param, piece))
    for tensor, held in by_tensor.items():
        for (pa, a), (pb, b) in itertools.combinations(held, 2):
            if a.shape != b.shape:
                raise ValueError("checkpoint tensor %r has shape %s in %r "
                                 "but %s in %r" % (tensor, list(a.shape), pa,
                                                   list(b.shape), pb))
            if _overlap(a, b):
                raise ValueError("parameters %r and %r both hold part of "
                                 "%r (%s..%s and %s..%s)"
                                 % (pa, pb, tensor, list(a.start),
                                    list(a.stop), list(b.start),
                                    list(b.stop)))


def _strides(view):
    out, acc = [], 1
    for n in reversed(view):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def _cut(view, piece, last_uncut):
    """Splits the piece into boxes of extent 1 in every dim before
    last_uncut: [(start, stop, element offset into the view)]."""
    strides = _strides(view)
    ext = [b - a for a, b in zip(piece.start, piece.stop)]
    out = []
    for idx in itertools.product(*[range(ext[d]) for d in range(last_uncut)]):
        start = list(piece.start)
        stop = list(piece.stop)
        elem = 0
        for d in range(len(view)):
            i = idx[d] if d < last_uncut else 0
            if d < last_uncut:
                start[d] += i
                stop[d] = start[d] + 1
            elem += (piece.dst[d] + i) * strides[d]
        out.append((tuple(start), tuple(stop), elem))
    return out


def want_boxes(view, piece):
    """The boxes a receiver writes for 'piece' of a parameter shaped
    'view': [(start, stop, element offset, row pitch in elements or 0 for
    dense)], each a row-major array of the box's extents whose rows
    (last-dim runs) lie one pitch apart in the parameter."""
    nd = len(view)
    ext = [b - a for a, b in zip(piece.start, piece.stop)]
    # Rows lie one pitch apart when every dim between the first with more
    # than one row and the last is whole; cut the dims before the last
    # partial one (among all but the last dim) into single rows.
    partial = [d for d in range(nd - 1) if ext[d] != view[d]]
    last_uncut = partial[-1] if partial else 0
    pitch = 0 if ext[-1] == view[-1] else view[-1]
    return [(a, b, off, pitch) for a, b, off in _cut(view, piece, last_uncut)]


def shard_boxes(view, piece):
    """The boxes a sender reads for 'piece': [(start, stop, element offset)],
    each contiguous in the parameter (every dim after its first is whole)."""
    nd = len(view)
    ext = [b - a for a, b in zip(piece.start, piece.stop)]
    partial = [d for d in range(1, nd) if ext[d] != view[d]]
    last_uncut = partial[-1] if partial else 0
    return _cut(view, piece, last_uncut)


def register_model(sender, model, spec=None):
    """Registers every parameter of torch module 'model' with 'sender' (a
    wstream.Sender) as the boxes 'spec' (default Spec(): identity names,
    whole tensors) says it holds. Returns the placements."""
    spec = spec if spec is not None else Spec()
    params = dict(model.named_parameters())
    placements = spec.placements({n: tuple(p.shape)
                                  for n, p in params.items()})
    for pl in placements:
        flat = params[pl.param].detach().reshape(-1)
        for piece in pl.pieces:
            for start, stop, off in shard_boxes(pl.view, piece):
                n = 1
                for a, b in zip(start, stop):
                    n *= b - a
                part = flat[off:off + n].view([b - a for a, b in
                                               zip(start, stop)])
                sender.register(piece.tensor, part, shape=piece.shape,
                                start=start, stop=stop)
    return placements
