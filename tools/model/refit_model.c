/* refit_model.c - the arithmetic of wstream-model (see refit_model.h). */
#include "refit_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errbuf.h"

#define FP8_BLOCK 128 /* DeepSeek-V3's block-quantized FP8: 128x128 */
#define DENSE_COLS 4096
#define DENSE_PER_LAYER 2
#define MAX_LAYERS 100000

/* ---- architectures ------------------------------------------------------ */

static const struct wst_rm_arch presets[] = {
    /* config.json of each model (Hugging Face), main-model layers only:
     * DeepSeek-V3's multi-token-prediction layer is not loaded by an
     * engine that does not speculate, so it is not counted. */
    {.name = "deepseek-v3",
     .hidden = 7168,
     .n_layers = 61,
     .vocab = 129280,
     .heads = 128,
     .q_lora_rank = 1536,
     .kv_lora_rank = 512,
     .qk_nope_dim = 128,
     .qk_rope_dim = 64,
     .v_head_dim = 128,
     .dense_inter = 18432,
     .first_dense = 3,
     .n_experts = 256,
     .moe_inter = 2048,
     .shared_experts = 1,
     .router_bias = 1},
    {.name = "kimi-k2",
     .hidden = 7168,
     .n_layers = 61,
     .vocab = 163840,
     .heads = 64,
     .q_lora_rank = 1536,
     .kv_lora_rank = 512,
     .qk_nope_dim = 128,
     .qk_rope_dim = 64,
     .v_head_dim = 128,
     .dense_inter = 18432,
     .first_dense = 1,
     .n_experts = 384,
     .moe_inter = 2048,
     .shared_experts = 1,
     .router_bias = 1},
    {.name = "qwen3-30b-a3b",
     .hidden = 2048,
     .n_layers = 48,
     .vocab = 151936,
     .heads = 32,
     .kv_heads = 4,
     .head_dim = 128,
     .n_experts = 128,
     .moe_inter = 768,
     .qk_norm = 1},
    {.name = "qwen3-235b-a22b",
     .hidden = 4096,
     .n_layers = 94,
     .vocab = 151936,
     .heads = 64,
     .kv_heads = 4,
     .head_dim = 128,
     .n_experts = 128,
     .moe_inter = 1536,
     .qk_norm = 1},
    /* wstream-demo's presets (tools/demo/model.c), for the comparison with
     * measured refits on one machine. */
    {.name = "tiny",
     .hidden = 1024,
     .n_layers = 4,
     .vocab = 4096,
     .heads = 8,
     .kv_heads = 4,
     .head_dim = 128,
     .dense_inter = 2048,
     .qk_norm = 1},
    {.name = "tiny-moe",
     .hidden = 1024,
     .n_layers = 4,
     .vocab = 4096,
     .heads = 8,
     .kv_heads = 4,
     .head_dim = 128,
     .n_experts = 16,
     .moe_inter = 256,
     .qk_norm = 1},
};

wst_status_t wst_rm_arch_preset(const char *name, uint64_t n_layers,
                                struct wst_rm_arch *a, char *err, size_t errlen)
{
    const struct wst_rm_arch *p = NULL;
    size_t i;

    if (name == NULL || a == NULL) {
        wst_errf(err, errlen, "model preset: NULL argument");
        return WST_ERR_INVALID;
    }
    if (strncmp(name, "dense:", 6) == 0) {
        char *end = NULL;
        unsigned long long mib = strtoull(name + 6, &end, 10);

        if (name[6] < '0' || name[6] > '9' || *end != '\0' || mib == 0 ||
            mib > (1ull << 20)) {
            wst_errf(err, errlen,
                     "model preset \"%s\": want dense:<MiB>, "
                     "1..1048576 MiB",
                     name);
            return WST_ERR_INVALID;
        }
        memset(a, 0, sizeof(*a));
        snprintf(a->name, sizeof(a->name), "%s", name);
        a->dense_mib = mib;
        a->hidden = DENSE_COLS;
        a->n_layers = n_layers != 0 ? n_layers : 4;
        return WST_OK;
    }
    for (i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
        if (strcmp(presets[i].name, name) == 0)
            p = &presets[i];
    if (p == NULL) {
        wst_errf(err, errlen,
                 "unknown model preset \"%s\" (deepseek-v3, kimi-k2, "
                 "qwen3-30b-a3b, qwen3-235b-a22b, tiny, tiny-moe, "
                 "dense:<MiB>)",
                 name);
        return WST_ERR_INVALID;
    }
    *a = *p;
    if (n_layers != 0)
        a->n_layers = n_layers;
    return WST_OK;
}

/* ---- tensor records ----------------------------------------------------- */

struct builder {
    struct wst_rm_model *m;
    size_t cap;
    int oom;
};

static void add(struct builder *b, uint32_t layer, enum wst_rm_split split,
                uint64_t rows, uint64_t cols, uint64_t copies, int linear)
{
    struct wst_rm_tensor *t;

    if (b->oom || rows == 0 || cols == 0 || copies == 0)
        return;
    if (b->m->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        void *p = realloc(b->m->t, cap * sizeof(*b->m->t));
        if (p == NULL) {
            b->oom = 1;
            return;
        }
        b->m->t = p;
        b->cap = cap;
    }
    t = &b->m->t[b->m->n++];
    memset(t, 0, sizeof(*t));
    t->layer = layer;
    t->split = split;
    t->rows = rows;
    t->cols = cols;
    t->copies = copies;
    t->linear = linear;
}

static void add_attention(struct builder *b, const struct wst_rm_arch *a,
                          uint32_t l)
{
    uint64_t h = a->hidden;

    if (a->q_lora_rank != 0) { /* MLA: down projections stay whole */
        uint64_t qk = a->qk_nope_dim + a->qk_rope_dim;
        add(b, l, WST_RM_REPL, a->q_lora_rank, h, 1, 1);
        add(b, l, WST_RM_REPL, a->q_lora_rank, 1, 1, 0);
        add(b, l, WST_RM_TP, a->heads * qk, a->q_lora_rank, 1, 1);
        add(b, l, WST_RM_REPL, a->kv_lora_rank + a->qk_rope_dim, h, 1, 1);
        add(b, l, WST_RM_REPL, a->kv_lora_rank, 1, 1, 0);
        add(b, l, WST_RM_TP, a->heads * (a->qk_nope_dim + a->v_head_dim),
            a->kv_lora_rank, 1, 1);
        add(b, l, WST_RM_TP, h, a->heads * a->v_head_dim, 1, 1);
        return;
    }
    add(b, l, WST_RM_TP, a->heads * a->head_dim, h, 1, 1);    /* q */
    add(b, l, WST_RM_KV, a->kv_heads * a->head_dim, h, 2, 1); /* k, v */
    add(b, l, WST_RM_TP, h, a->heads * a->head_dim, 1, 1);    /* o */
    if (a->qk_norm)
        add(b, l, WST_RM_REPL, a->head_dim, 1, 2, 0);
}

static void add_layer(struct builder *b, const struct wst_rm_arch *a,
                      uint32_t l)
{
    uint64_t h = a->hidden;
    int moe = a->n_experts != 0 && l >= a->first_dense;

    add(b, l, WST_RM_REPL, h, 1, 2, 0); /* the two layer norms */
    add_attention(b, a, l);
    if (!moe) {
        add(b, l, WST_RM_TP, a->dense_inter, h, 2, 1); /* gate, up */
        add(b, l, WST_RM_TP, h, a->dense_inter, 1, 1); /* down */
        return;
    }
    add(b, l, WST_RM_REPL, a->n_experts, h, 1, 0); /* router */
    if (a->router_bias) {
        add(b, l, WST_RM_REPL, a->n_experts, 1, 1, 0);
        b->m->t[b->m->n - 1].fp32 = 1;
    }
    add(b, l, WST_RM_EXPERT, a->moe_inter, h, 2 * a->n_experts, 1);
    add(b, l, WST_RM_EXPERT, h, a->moe_inter, a->n_experts, 1);
    add(b, l, WST_RM_TP, a->shared_experts * a->moe_inter, h, 2, 1);
    add(b, l, WST_RM_TP, h, a->shared_experts * a->moe_inter, 1, 1);
}

/* "dense:<MiB>" as the demo builds it: DENSE_PER_LAYER [rows, 4096] bf16
 * tensors a layer, exactly MiB mebibytes, split on dim 0 by the engine. */
static void add_dense(struct builder *b, const struct wst_rm_arch *a)
{
    uint64_t rows = a->dense_mib * (1ull << 20) / (DENSE_COLS * 2);
    uint64_t n = a->n_layers * DENSE_PER_LAYER, i;

    for (i = 0; i < n; i++)
        add(b, (uint32_t)(i / DENSE_PER_LAYER), WST_RM_TP,
            rows / n + (i < rows % n ? 1 : 0), DENSE_COLS, 1, 0);
}

wst_status_t wst_rm_model_build(const struct wst_rm_arch *a,
                                enum wst_rm_dtype dtype, struct wst_rm_model *m,
                                char *err, size_t errlen)
{
    struct builder b = {.m = m};
    uint32_t l;

    memset(m, 0, sizeof(*m));
    if (a->n_layers == 0 || a->n_layers > MAX_LAYERS || a->hidden == 0 ||
        (a->dense_mib == 0 &&
         (a->vocab == 0 || a->heads == 0 ||
          (a->q_lora_rank == 0 && (a->kv_heads == 0 || a->head_dim == 0)) ||
          (a->n_experts != 0 && a->moe_inter == 0) ||
          (a->n_experts == 0 && a->dense_inter == 0))) ||
        (a->dense_mib != 0 && a->dense_mib * (1ull << 20) / (DENSE_COLS * 2) <
                                  a->n_layers * DENSE_PER_LAYER)) {
        wst_errf(err, errlen,
                 "model %s: incomplete dims (layers, hidden, vocab, heads, "
                 "kv heads and head dim or MLA ranks, an MLP or experts)",
                 a->name);
        return WST_ERR_INVALID;
    }
    m->arch = *a;
    m->dtype = dtype;
    if (a->dense_mib != 0) {
        add_dense(&b, a);
    } else {
        add(&b, WST_RM_GLOBAL_FIRST, WST_RM_VOCAB, a->vocab, a->hidden, 1, 0);
        for (l = 0; l < a->n_layers; l++)
            add_layer(&b, a, l);
        add(&b, WST_RM_GLOBAL_LAST, WST_RM_REPL, a->hidden, 1, 1, 0);
        add(&b, WST_RM_GLOBAL_LAST, WST_RM_VOCAB, a->vocab, a->hidden, 1, 0);
    }
    if (b.oom) {
        wst_rm_model_release(m);
        wst_errf(err, errlen, "model %s: out of memory", a->name);
        return WST_ERR_NO_MEMORY;
    }
    return WST_OK;
}

void wst_rm_model_release(struct wst_rm_model *m)
{
    if (m == NULL)
        return;
    free(m->t);
    memset(m, 0, sizeof(*m));
}

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return (a + b - 1) / b;
}

uint64_t wst_rm_tensor_bytes(const struct wst_rm_tensor *t,
                             enum wst_rm_dtype dtype)
{
    uint64_t elems = t->rows * t->cols;

    if (t->fp32)
        return 4 * elems;
    if (dtype == WST_RM_FP8 && t->linear)
        return elems +
               4 * ceil_div(t->rows, FP8_BLOCK) * ceil_div(t->cols, FP8_BLOCK);
    return 2 * elems;
}

uint64_t wst_rm_model_bytes(const struct wst_rm_model *m, uint64_t *tensors_p)
{
    uint64_t total = 0, tensors = 0;
    size_t i;

    for (i = 0; i < m->n; i++) {
        total += m->t[i].copies * wst_rm_tensor_bytes(&m->t[i], m->dtype);
        tensors += m->t[i].copies;
    }
    if (tensors_p != NULL)
        *tensors_p = tensors;
    return total;
}

/* ---- bytes per GPU ------------------------------------------------------ */

static wst_status_t layout_check(const struct wst_rm_model *m,
                                 const struct wst_rm_layout *lay, char *err,
                                 size_t errlen)
{
    uint64_t e = m->arch.n_experts;

    if (lay->tp == 0 || lay->pp == 0 || lay->dp == 0) {
        wst_errf(err, errlen, "layout: tp, pp and dp must be at least 1");
        return WST_ERR_INVALID;
    }
    if (lay->pp > m->arch.n_layers) {
        wst_errf(err, errlen, "layout: pp %llu is more than the %llu layers",
                 (unsigned long long)lay->pp,
                 (unsigned long long)m->arch.n_layers);
        return WST_ERR_INVALID;
    }
    if (lay->ep != 0 && e != 0 &&
        (e % lay->ep != 0 || lay->ep > lay->tp * lay->dp)) {
        wst_errf(err, errlen,
                 "layout: ep %llu must divide the %llu experts and be at "
                 "most tp x dp (%llu)",
                 (unsigned long long)lay->ep, (unsigned long long)e,
                 (unsigned long long)(lay->tp * lay->dp));
        return WST_ERR_INVALID;
    }
    return WST_OK;
}

/* Which stage a record lives on. */
static uint64_t stage_of(const struct wst_rm_tensor *t, uint64_t per,
                         uint64_t pp)
{
    if (t->layer == WST_RM_GLOBAL_FIRST)
        return 0;
    if (t->layer == WST_RM_GLOBAL_LAST)
        return pp - 1;
    return t->layer / per;
}

/* One GPU's bytes of record t, and the tensor pieces they are. */
static uint64_t gpu_share(const struct wst_rm_model *m,
                          const struct wst_rm_tensor *t,
                          const struct wst_rm_layout *lay, uint64_t *pieces)
{
    uint64_t one = wst_rm_tensor_bytes(t, m->dtype);
    uint64_t kv = m->arch.kv_heads;

    *pieces = t->copies;
    switch (t->split) {
    case WST_RM_REPL:
        return t->copies * one;
    case WST_RM_TP:
    case WST_RM_VOCAB:
        return t->copies * ceil_div(one, lay->tp);
    case WST_RM_KV:
        return t->copies * ceil_div(one, lay->tp < kv ? lay->tp : kv);
    case WST_RM_EXPERT:
        if (lay->ep == 0) /* split by the intermediate dim over tp */
            return t->copies * ceil_div(one, lay->tp);
        *pieces = t->copies / lay->ep;
        return *pieces * one;
    }
    return 0;
}

wst_status_t wst_rm_gpu_bytes(const struct wst_rm_model *m,
                              const struct wst_rm_layout *lay, uint64_t stage,
                              struct wst_rm_gpu_bytes *out, char *err,
                              size_t errlen)
{
    uint64_t per, last = 0, pieces;
    int have_last = 0;
    size_t i;
    wst_status_t st = layout_check(m, lay, err, errlen);

    if (st != WST_OK)
        return st;
    if (stage >= lay->pp) {
        wst_errf(err, errlen, "stage %llu of pp %llu",
                 (unsigned long long)stage, (unsigned long long)lay->pp);
        return WST_ERR_INVALID;
    }
    memset(out, 0, sizeof(*out));
    per = ceil_div(m->arch.n_layers, lay->pp);
    for (i = 0; i < m->n; i++) {
        const struct wst_rm_tensor *t = &m->t[i];
        uint64_t b;

        if (stage_of(t, per, lay->pp) != stage)
            continue;
        b = gpu_share(m, t, lay, &pieces);
        out->tensors += pieces;
        if (t->split == WST_RM_EXPERT)
            out->experts += b;
        else if (t->split == WST_RM_REPL)
            out->replicated += b;
        else
            out->sharded += b;
        if (t->layer < WST_RM_GLOBAL_LAST && (!have_last || t->layer > last)) {
            last = t->layer;
            have_last = 1;
        }
    }
    out->total = out->replicated + out->sharded + out->experts;
    for (i = 0; have_last && i < m->n; i++) {
        const struct wst_rm_tensor *t = &m->t[i];
        uint64_t b;

        if (t->layer != last)
            continue;
        b = gpu_share(m, t, lay, &pieces);
        out->last_layer += b;
        if (t->split == WST_RM_EXPERT)
            out->last_expert += b;
    }
    return WST_OK;
}

/* ---- time ---------------------------------------------------------------- */

static int in_range(double v, double lo, double hi)
{
    return v > lo && v <= hi;
}

static wst_status_t inputs_check(const struct wst_rm_inputs *in, char *err,
                                 size_t errlen)
{
    const char *what = NULL;

    if (!(in->nic_gbit > 0))
        what = "the NIC speed must be above 0 Gb/s";
    else if (!(in->trainer_nics_per_gpu > 0) ||
             !(in->inference_nics_per_gpu > 0))
        what = "NICs per GPU must be above 0";
    else if (!in_range(in->wire_efficiency, 0, 1.5) ||
             !in_range(in->wstream_efficiency, 0, 4))
        what = "efficiencies: wire in (0, 1.5], wstream in (0, 4]";
    else if (in->bounce && !(in->copy_gbps > 0))
        what = "the bounce path needs a pinned copy rate above 0";
    else if (!(in->local_fraction >= 0 && in->local_fraction <= 1))
        what = "the local fraction must be in [0, 1]";
    else if (in->local_fraction > 0 && !(in->nvlink_gbps > 0))
        what = "a local fraction above 0 needs an NVLink rate";
    else if (in->repack_gbps < 0 || in->digest_gbps < 0 ||
             in->plan_us_per_item < 0 || in->rtt_s < 0 || in->commit_s < 0 ||
             in->plan_s < 0)
        what = "rates and times cannot be negative";
    if (what == NULL)
        return WST_OK;
    wst_errf(err, errlen, "%s", what);
    return WST_ERR_INVALID;
}

/* A side's GPU count: the one given, which must match its layout. */
static wst_status_t gpus(const char *side, const struct wst_rm_layout *lay,
                         uint64_t given, uint64_t *out, char *err,
                         size_t errlen)
{
    uint64_t product = lay->tp * lay->pp * lay->dp;

    if (product == 0) {
        wst_errf(err, errlen, "%s: tp, pp and dp must be at least 1", side);
        return WST_ERR_INVALID;
    }
    if (given != 0 && given != product) {
        wst_errf(err, errlen,
                 "%s: %llu GPUs, but its layout tp %llu x pp %llu x dp %llu "
                 "is %llu",
                 side, (unsigned long long)given, (unsigned long long)lay->tp,
                 (unsigned long long)lay->pp, (unsigned long long)lay->dp,
                 (unsigned long long)product);
        return WST_ERR_INVALID;
    }
    *out = product;
    return WST_OK;
}

static double max3(double a, double b, double c)
{
    double m = a > b ? a : b;
    return m > c ? m : c;
}

static double rate(double nics, double gbit, double eff, int bounce,
                   double copy)
{
    double r = nics * gbit / 8 * eff;
    return bounce && copy < r ? copy : r;
}

wst_status_t wst_rm_predict(const struct wst_rm_model *m,
                            const struct wst_rm_inputs *in,
                            struct wst_rm_prediction *out, char *err,
                            size_t errlen)
{
    const struct wst_rm_layout *inf = &in->inference;
    double eff = in->wire_efficiency * in->wstream_efficiency;
    double f = in->local_fraction, b, s;
    uint64_t stage, pieces;
    wst_status_t st;

    memset(out, 0, sizeof(*out));
    st = inputs_check(in, err, errlen);
    if (st == WST_OK)
        st = gpus("inference", inf, in->inference_gpus, &out->inference_gpus,
                  err, errlen);
    if (st == WST_OK)
        st = gpus("trainer", &in->trainer, in->trainer_gpus, &out->trainer_gpus,
                  err, errlen);
    for (stage = 0; st == WST_OK && stage < inf->pp; stage++) {
        struct wst_rm_gpu_bytes g;

        st = wst_rm_gpu_bytes(m, inf, stage, &g, err, errlen);
        if (st != WST_OK)
            break;
        out->total_in += g.total * inf->tp * inf->dp;
        if (stage == 0 || g.total > out->gpu.total) {
            out->gpu = g;
            out->worst_stage = stage;
        }
    }
    if (st != WST_OK)
        return st;
    if (in->live_bytes != 0) {
        out->bytes_given = 1;
        out->total_in = in->live_bytes;
        out->gpu.total = ceil_div(in->live_bytes, out->inference_gpus);
    }
    out->per_sender = ceil_div(out->total_in, out->trainer_gpus);
    out->line_in_gbps = in->inference_nics_per_gpu * in->nic_gbit / 8;
    out->line_out_gbps = in->trainer_nics_per_gpu * in->nic_gbit / 8;
    out->rate_in_gbps = rate(in->inference_nics_per_gpu, in->nic_gbit, eff,
                             in->bounce, in->copy_gbps);
    out->rate_out_gbps = rate(in->trainer_nics_per_gpu, in->nic_gbit, eff,
                              in->bounce, in->copy_gbps);
    b = (double)out->gpu.total / 1e9;
    s = (double)out->per_sender / 1e9;
    out->recv_s = (1 - f) * b / out->rate_in_gbps;
    out->send_s = (1 - f) * s / out->rate_out_gbps;
    out->nvlink_s = f > 0 ? f * b / in->nvlink_gbps : 0;
    out->transfer_s = max3(out->recv_s, out->send_s, out->nvlink_s);
    out->floor_s = max3((1 - f) * b / out->line_in_gbps,
                        (1 - f) * s / out->line_out_gbps, out->nvlink_s);
    out->plan_items = in->plan_items;
    if (out->plan_items == 0) {
        pieces = ceil_div(in->trainer.tp, inf->tp);
        out->plan_items = out->gpu.tensors * (pieces ? pieces : 1);
        out->plan_items_estimated = 1;
    }
    out->plan_s = in->plan_s > 0
                      ? in->plan_s
                      : (double)out->plan_items * in->plan_us_per_item * 1e-6;
    out->control_s = (double)in->round_trips * in->rtt_s;
    if (in->repack_gbps > 0)
        out->tail_s += (double)out->gpu.last_expert / 1e9 / in->repack_gbps;
    if (in->digest_gbps > 0)
        out->tail_s += (double)out->gpu.last_layer / 1e9 / in->digest_gbps;
    out->commit_s = in->commit_s;
    out->senders_in = in->senders_per_receiver != 0 ? in->senders_per_receiver
                                                    : out->trainer_gpus;
    out->stage_layers = ceil_div(m->arch.n_layers, inf->pp);
    out->agent_cpu_s = (double)out->senders_in * (double)out->stage_layers *
                       in->agent_cpu_us * 1e-6;
    /* A pair counts once from either side: trainer_gpus x receivers_out
     * = inference_gpus x senders_in. */
    out->receivers_out = (double)out->senders_in * (double)out->inference_gpus /
                         (double)out->trainer_gpus;
    out->sender_cpu_s = out->receivers_out * (double)out->stage_layers *
                        in->sender_cpu_us * 1e-6;
    if (in->host_cores > 0)
        out->shared_cpu_s = (out->agent_cpu_s * (double)out->inference_gpus +
                             out->sender_cpu_s * (double)out->trainer_gpus) /
                            in->host_cores;
    out->cpu_s = max3(out->agent_cpu_s, out->sender_cpu_s, out->shared_cpu_s);
    out->steady_s =
        out->control_s +
        (out->cpu_s > out->transfer_s ? out->cpu_s : out->transfer_s) +
        out->tail_s + out->commit_s;
    out->first_s = out->steady_s + out->plan_s;
    return WST_OK;
}
