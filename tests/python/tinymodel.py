"""A small decoder-only transformer in plain torch.nn, as an inference
engine and a trainer would each hold it, for the model refit tests.

Layer 0 has a dense MLP, layer 1 a mixture of experts with grouped expert
parameters; attention has a fused qkv projection, the MLPs fused
gate/up. With tp_size > 1 the model is the tensor-parallel rank's part
(Megatron style: qkv and gate/up column parallel, o and down row
parallel, experts expert parallel over the same ranks, the rest
replicated) and its forward all-reduces over torch.distributed's default
group. The parameter names follow Hugging Face's where the tensors are
the same; rules() says how the fused and sharded ones map onto the
checkpoint's tensors, and load_full() does the same slicing by hand
(written apart from wstream.sharding, as a reference for the tests).
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

_DEFAULTS = dict(vocab=64, hidden=32, heads=4, kv_heads=2, head_dim=8,
              inter=48, experts=4, moe_inter=16, top_k=2, layers=2,
              tie=False)
# TINYMODEL_CONFIG (JSON) overrides the defaults, in every process.
CONFIG = dict(_DEFAULTS, **json.loads(os.environ.get("TINYMODEL_CONFIG",
                                                      "{}")))


def _all_reduce(x, tp_size):
    if tp_size > 1:
        import torch.distributed as dist
        dist.all_reduce(x)
    return x


class RMSNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + 1e-6) * self.weight


class Attention(nn.Module):
    def __init__(self, c, tp):
        super().__init__()
        self.tp = tp
        self.nh, self.nkv = c["heads"] // tp, c["kv_heads"] // tp
        self.hd = c["head_dim"]
        self.qkv_proj = nn.Linear(c["hidden"], (self.nh + 2 * self.nkv) *
                                  self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, c["hidden"], bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv_proj(x).split(
            [self.nh * self.hd, self.nkv * self.hd, self.nkv * self.hd], -1)
        q = q.view(b, t, self.nh, self.hd).transpose(1, 2)
        k = k.view(b, t, self.nkv, self.hd).transpose(1, 2)
        v = v.view(b, t, self.nkv, self.hd).transpose(1, 2)
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, 1)
        v = v.repeat_interleave(rep, 1)
        att = (q @ k.transpose(-1, -2)) / (self.hd ** 0.5)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, self.nh * self.hd)
        return _all_reduce(self.o_proj(y), self.tp)


class DenseMLP(nn.Module):
    def __init__(self, c, tp):
        super().__init__()
        self.tp = tp
        self.inter = c["inter"] // tp
        self.gate_up_proj = nn.Linear(c["hidden"], 2 * self.inter, bias=False)
        self.down_proj = nn.Linear(self.inter, c["hidden"], bias=False)

    def forward(self, x):
        g, u = self.gate_up_proj(x).split(self.inter, -1)
        return _all_reduce(self.down_proj(F.silu(g) * u), self.tp)


class Experts(nn.Module):
    """Grouped expert weights: gate_up_proj [E_local, 2I, H] ([gate; up]
    per expert), down_proj [E_local, H, I]."""

    def __init__(self, c, tp, rank):
        super().__init__()
        self.n_local = c["experts"] // tp
        self.first = rank * self.n_local
        i, h = c["moe_inter"], c["hidden"]
        self.inter = i
        self.gate_up_proj = nn.Parameter(torch.randn(self.n_local, 2 * i, h)
                                         * 0.1)
        self.down_proj = nn.Parameter(torch.randn(self.n_local, h, i) * 0.1)


class MoE(nn.Module):
    def __init__(self, c, tp, rank):
        super().__init__()
        self.tp, self.top_k = tp, c["top_k"]
        self.gate = nn.Linear(c["hidden"], c["experts"], bias=False)
        self.experts = Experts(c, tp, rank)

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = self.gate(x).softmax(-1)
        weight, idx = probs.topk(self.top_k, -1)
        out = torch.zeros_like(x)
        ex = self.experts
        for j in range(ex.n_local):
            e = ex.first + j
            rows, slot = (idx == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            g, u = (x[rows] @ ex.gate_up_proj[j].t()).split(ex.inter, -1)
            y = (F.silu(g) * u) @ ex.down_proj[j].t()
            out.index_add_(0, rows, y * weight[rows, slot].unsqueeze(-1))
        return _all_reduce(out, self.tp).reshape(shape)


class Layer(nn.Module):
    def __init__(self, c, tp, rank, moe):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden"])
        self.self_attn = Attention(c, tp)
        self.post_attention_layernorm = RMSNorm(c["hidden"])
        self.mlp = MoE(c, tp, rank) if moe else DenseMLP(c, tp)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self, c, tp, rank):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab"], c["hidden"])
        self.layers = nn.ModuleList(Layer(c, tp, rank, moe=(i % 2 == 1))
                                    for i in range(c["layers"]))
        self.norm = RMSNorm(c["hidden"])


class TinyModel(nn.Module):
    def __init__(self, config=None, tp_rank=0, tp_size=1, seed=0):
        super().__init__()
        c = dict(CONFIG, **(config or {}))
        self.config, self.tp_rank, self.tp_size = c, tp_rank, tp_size
        torch.manual_seed(seed)
        self.model = Inner(c, tp_size, tp_rank)
        self.lm_head = nn.Linear(c["hidden"], c["vocab"], bias=False)
        if c["tie"]:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, tokens):
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(self.model.norm(x))

    @torch.no_grad()
    def generate(self, tokens, n):
        for _ in range(n):
            nxt = self(tokens)[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], 1)
        return tokens

    def rules(self):
        """wstream.sharding rules: how the fused and sharded parameters
        map onto the checkpoint's tensors."""
        from wstream import sharding as ws
        c = self.config
        q, kv = c["heads"] * c["head_dim"], c["kv_heads"] * c["head_dim"]
        return [
            ws.fused(r"(.*)\.self_attn\.qkv_proj\.weight",
                     [r"\1.self_attn.q_proj.weight",
                      r"\1.self_attn.k_proj.weight",
                      r"\1.self_attn.v_proj.weight"],
                     sizes=[q, kv, kv], dim=0, tp_dim=0),
            ws.row(r".*\.self_attn\.o_proj\.weight"),
            ws.fused(r"(.*)\.mlp\.gate_up_proj\.weight",
                     [r"\1.mlp.gate_proj.weight", r"\1.mlp.up_proj.weight"],
                     sizes=[c["inter"], c["inter"]], dim=0, tp_dim=0),
            ws.row(r".*\.mlp\.down_proj\.weight"),
            ws.experts(r"(.*)\.mlp\.experts\.gate_up_proj",
                       [r"\1.mlp.experts.gate_proj.weight",
                        r"\1.mlp.experts.up_proj.weight"],
                       sizes=[c["moe_inter"], c["moe_inter"]], dim=1),
            ws.experts(r"(.*)\.mlp\.experts\.down_proj",
                       r"\1.mlp.experts.down_proj.weight"),
        ]

    def spec(self):
        from wstream import sharding as ws
        return ws.Spec(self.rules(), tp_rank=self.tp_rank,
                       tp_size=self.tp_size, ep_rank=self.tp_rank,
                       ep_size=self.tp_size)

    @torch.no_grad()
    def load_full(self, full):
        """Copies this rank's part of a TP=1 model's state_dict 'full'
        into the parameters, slicing by hand (the reference)."""
        r, t = self.tp_rank, self.tp_size

        def rows(w, parts):
            out, at = [], 0
            for n in parts:
                out.append(w[at:at + n].chunk(t, 0)[r])
                at += n
            return torch.cat(out, 0)

        c = self.config
        q, kv = c["heads"] * c["head_dim"], c["kv_heads"] * c["head_dim"]
        for name, p in self.named_parameters():
            w = full[name]
            if name.endswith("qkv_proj.weight"):
                w = rows(w, [q, kv, kv])
            elif name.endswith("mlp.gate_up_proj.weight"):
                w = rows(w, [c["inter"], c["inter"]])
            elif name.endswith("o_proj.weight") or \
                    name.endswith("mlp.down_proj.weight"):
                w = w.chunk(t, 1)[r]
            elif name.endswith("experts.gate_up_proj") or \
                    name.endswith("experts.down_proj"):
                w = w.chunk(t, 0)[r]
            p.copy_(w)
