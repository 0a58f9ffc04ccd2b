"""tests/gpu/hf_refit.py: Hugging Face transformers as the engine, on the
GPU, refitted by wstream from a trainer process taking optimizer steps.

    python3 tests/gpu/hf_refit.py OUT_DIR [--steps 3] [--size small|large]

A Qwen3-MoE-shaped model is built from a config with random weights
(nothing is downloaded) twice, on GPU 0: in a trainer process (seed 0,
AdamW on random tokens) and in an engine process (seed 1, so stale
weights cannot pass). The engine's model is attached through
wstream.attach: its CUDA parameters are exported by CUDA IPC, one handle
per allocation, into a wstream-agent it starts; the trainer registers its
parameters through the same sharding rules (wstream.sharding) and pushes
after every step. After each refit the engine's logits on a fixed batch
and its greedy generation must equal the trainer's bit for bit, and no
forward pass may run between a refit's pause and its commit.

transformers lays out a Qwen3-MoE layer's routed experts either as one
module per expert ("...mlp.experts.{e}.{gate,up,down}_proj.weight",
[I, H] / [H, I]: per_expert rules onto the grouped checkpoint tensors)
or, in later versions, grouped ("...mlp.experts.gate_up_proj" [E, 2I, H],
gate rows first, and "...mlp.experts.down_proj" [E, H, I]: an experts
rule with [gate; up] fused along dim 1). The script finds which from
the parameter names and shapes, and says so.

Prints one table row per step (model bytes, refit seconds, pause to
resume, logits and generation equal) and writes OUT_DIR/hf_refit.json.
Exit 0 when every step matched, 1 otherwise, 77 without a GPU, torch or
transformers. Needs $WSTREAM_AGENT, $WSTREAM_LIB and the package on
PYTHONPATH (tests/gpu/run.sh sets them).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

SIZES = {
    "small": dict(vocab_size=2048, hidden_size=512, intermediate_size=1024,
                  moe_intermediate_size=256, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=4, head_dim=64,
                  num_experts=16, num_experts_per_tok=2),
    "large": dict(vocab_size=8192, hidden_size=1024,
                  intermediate_size=2048, moe_intermediate_size=512,
                  num_hidden_layers=8, num_attention_heads=16,
                  num_key_value_heads=4, head_dim=64, num_experts=32,
                  num_experts_per_tok=2),
}
PROMPT = [[11, 12, 13, 14, 15, 16, 17, 18]]


def skip(why):
    print("SKIP hf_refit: %s" % why, flush=True)
    sys.exit(77)


def build(size, seed):
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    cfg = Qwen3MoeConfig(**SIZES[size], decoder_sparse_step=1,
                         mlp_only_layers=[], tie_word_embeddings=False,
                         max_position_embeddings=256, norm_topk_prob=True)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16)
    return model, cfg


def expert_rules(model, cfg):
    """The sharding rules for transformers' expert layout, and a line
    saying which layout it is."""
    from wstream import sharding as ws
    names = dict(model.named_parameters())
    e, i, h = cfg.num_experts, cfg.moe_intermediate_size, cfg.hidden_size
    per = [n for n in names if re.search(r"\.experts\.\d+\.", n)]
    if per:
        rule = ws.per_expert(
            r"(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)"
            r"\.weight", r"\1.\3.weight", 2, e)
        return [rule], ("per-expert modules: %s %s" %
                        (per[0], list(names[per[0]].shape)))
    grouped = [n for n in names if n.endswith(".experts.gate_up_proj")]
    if grouped:
        shape = tuple(names[grouped[0]].shape)
        if shape != (e, 2 * i, h):
            raise SystemExit("transformers' grouped gate_up_proj is %s, not "
                             "[E, 2I, H] = %s: no box maps it; a loader "
                             "would have to transpose" % (list(shape),
                                                         [e, 2 * i, h]))
        return [ws.experts(r"(.*\.mlp\.experts)\.gate_up_proj",
                           [r"\1.gate_proj.weight", r"\1.up_proj.weight"],
                           sizes=[i, i], dim=1),
                ws.experts(r"(.*\.mlp\.experts)\.down_proj",
                           r"\1.down_proj.weight")], \
            "grouped: %s %s" % (grouped[0], list(shape))
    raise SystemExit("no routed experts found in the model's parameters")


def outputs(model):
    import torch
    with torch.no_grad():
        ids = torch.tensor(PROMPT, device="cuda")
        logits = model(ids).logits.float().cpu()
        gen = model.generate(ids, max_new_tokens=8, do_sample=False,
                             pad_token_id=0)
    return logits, gen.cpu().tolist()


def say(*args):
    print("[%.2f]" % time.monotonic(), *args, flush=True)


def write_json(path, obj):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f)
    os.replace(path + ".tmp", path)


def wait_json(path, key, value, timeout=300):
    end = time.monotonic() + timeout
    while True:
        try:
            with open(path) as f:
                obj = json.load(f)
            if key is None or obj.get(key) == value:
                return obj
        except (FileNotFoundError, ValueError):
            pass
        if time.monotonic() > end:
            raise TimeoutError("waiting for %s" % path)
        time.sleep(0.01)


def engine(d, size, steps):
    import torch
    import wstream
    from wstream import sharding as ws
    model, cfg = build(size, seed=1)
    model.eval()
    rules, layout_line = expert_rules(model, cfg)
    say("engine: built;", layout_line)
    t0 = time.monotonic()
    attached = wstream.attach(model, ws.Spec(rules),
                              workdir=os.path.join(d, "engine"),
                              agent_args=["--timeout", "60",
                                          "--heartbeat", "0.5",
                                          "--peer-timeout", "10"])
    attach_s = time.monotonic() - t0
    say("engine: attached at", attached.address)
    try:
        allocs = attached.layout.get("allocations", [])
        write_json(os.path.join(d, "engine.addr"), {
            "address": attached.address, "experts": layout_line,
            "attach_s": attach_s,
            "regions": len(attached.layout["regions"]),
            "wants": len(attached.layout["wants"]),
            "cuda_allocations": sum(1 for a in allocs if "cuda_ipc" in a)})
        for v in range(1, steps + 1):
            attached.wait_version(v, timeout=300)
            say("engine: serving", v)
            with attached.serving(timeout=300) as held:
                logits, gen = outputs(model)
            saved = torch.load(os.path.join(d, "step%d.pt" % v))
            ev = {e[1]: e[0] for e in attached.events if e[2:3] == (v,)}
            write_json(os.path.join(d, "engine.step%d.json" % v), {
                "version": v, "held": held,
                "logits_equal": bool(torch.equal(logits.view(torch.int32),
                                                 saved["logits"].view(
                                                     torch.int32))),
                "generation_equal": gen == saved["generation"],
                "pause_to_resume_s": ev.get("commit", 0) - ev.get("pause",
                                                                  0)})
        write_json(os.path.join(d, "engine.done"), {
            "events": [list(e) for e in attached.events],
            "state": attached.state, "version": attached.version})
    finally:
        attached.close()


def trainer(d, size, steps):
    import torch
    import torch.nn.functional as F
    import wstream
    from wstream import sharding as ws
    model, cfg = build(size, seed=0)
    rules, _ = expert_rules(model, cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    addr = wait_json(os.path.join(d, "engine.addr"), None, None)["address"]
    gen = torch.Generator(device="cuda").manual_seed(7)
    report = {"bytes": sum(p.numel() * p.element_size()
                           for p in model.parameters()),
              "params": len(list(model.parameters())), "refit_s": []}
    with wstream.Sender([addr], lanes=1) as sender:
        ws.register_model(sender, model, ws.Spec(rules))
        say("trainer: registered; pushing to", addr)
        for v in range(1, steps + 1):
            model.train()
            tokens = torch.randint(0, cfg.vocab_size, (4, 33), device="cuda",
                                   generator=gen)
            out = model(tokens[:, :-1]).logits
            loss = F.cross_entropy(out.float().reshape(-1, cfg.vocab_size),
                                   tokens[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            model.eval()
            logits, generation = outputs(model)
            path = os.path.join(d, "step%d.pt" % v)
            torch.save({"logits": logits, "generation": generation},
                       path + ".tmp")
            os.replace(path + ".tmp", path)
            torch.cuda.synchronize()
            t0 = time.monotonic()
            sender.push(v)
            say("trainer: pushed", v)
            sender.wait(300)
            say("trainer: committed", v)
            report["refit_s"].append(time.monotonic() - t0)
            wait_json(os.path.join(d, "engine.step%d.json" % v), "version", v)
    write_json(os.path.join(d, "trainer.json"), report)


def run(out, size, steps, timeout):
    d = tempfile.mkdtemp(prefix="wst-hf-")
    # The deployment's secret, shared by the agent and the sender.
    secret = os.path.join(d, "secret")
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(32))
    os.environ["WST_AUTH_SECRET_FILE"] = secret
    logs = {}
    procs = []
    for role in ("engine", "trainer"):
        logs[role] = os.path.join(d, role + ".log")
        with open(logs[role], "w") as log:
            procs.append(subprocess.Popen(
                [sys.executable, __file__, role, d, size, str(steps)],
                stdout=log, stderr=subprocess.STDOUT))
    codes = []
    end = time.monotonic() + timeout
    for p in procs:
        try:
            codes.append(p.wait(max(1.0, end - time.monotonic())))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append("killed after %d s" % timeout)
    if codes != [0, 0]:
        for role, path in logs.items():
            with open(path, errors="replace") as f:
                print("---- %s (exit %s) ----\n%s" % (
                    role, codes[list(logs).index(role)], f.read()[-5000:]))
        alog = os.path.join(d, "engine", "agent.log")
        if os.path.exists(alog):
            with open(alog, errors="replace") as f:
                print("---- agent ----\n%s" % f.read()[-5000:])
        return 1
    addr = wait_json(os.path.join(d, "engine.addr"), None, None, 1)
    tr = wait_json(os.path.join(d, "trainer.json"), None, None, 1)
    done = wait_json(os.path.join(d, "engine.done"), None, None, 1)
    steps_out = [wait_json(os.path.join(d, "engine.step%d.json" % v),
                           None, None, 1) for v in range(1, steps + 1)]
    print("transformers experts: %s" % addr["experts"])
    print("attach: %.2f s, %d regions, %d wants, %d CUDA allocations"
          % (addr["attach_s"], addr["regions"], addr["wants"],
             addr["cuda_allocations"]))
    print("| step | model bytes | refit s | pause to resume s | logits "
          "equal | generation equal |")
    print("|---|---|---|---|---|---|")
    ok = done["state"] == "serving" and done["version"] == steps
    for v, s in enumerate(steps_out, 1):
        print("| %d | %d | %.3f | %.3f | %s | %s |" % (
            v, tr["bytes"], tr["refit_s"][v - 1], s["pause_to_resume_s"],
            s["logits_equal"], s["generation_equal"]))
        ok = ok and s["logits_equal"] and s["generation_equal"] and \
            s["held"] == v
    result = {"size": size, "trainer": tr, "engine": addr,
              "steps": steps_out, "ok": ok}
    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, "hf_refit_%s.json" % size), result)
    print("%s hf_refit (%s)" % ("PASS" if ok else "FAIL", size))
    return 0 if ok else 1


def main():
    try:
        import torch
        import transformers
    except ImportError as e:
        skip("%s" % e)
    if not torch.cuda.is_available():
        skip("torch sees no GPU")
    role = sys.argv[1] if len(sys.argv) > 1 else ""
    if role in ("engine", "trainer"):
        fn = engine if role == "engine" else trainer
        fn(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return 0
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--timeout", type=float, default=240,
                   help="seconds for both processes together")
    a = p.parse_args()
    print("transformers %s, torch %s" % (transformers.__version__,
                                         torch.__version__))
    return run(a.out, a.size, a.steps, a.timeout)


if __name__ == "__main__":
    sys.exit(main())
