/* plan_model.c - the tensor lists of full-size MLA + MoE models
 * (plan_model.h). */
#include "plan_model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"

/* MLA sizes common to both models: q_lora_rank 1536, kv_lora_rank 512,
 * qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128. */
#define Q_LORA 1536u
#define KV_LORA 512u
#define QK_HEAD 192u   /* nope 128 + rope 64 */
#define KV_B_HEAD 256u /* nope 128 + v 128 */
#define V_HEAD 128u
#define ROPE 64u

static const struct pm_shape shapes[] = {
    /* deepseek-ai/DeepSeek-V3 config.json */
    {.name = "deepseek-v3",
     .layers = 61,
     .first_dense = 3,
     .experts = 256,
     .heads = 128,
     .hidden = 7168,
     .moe_inter = 2048,
     .dense_inter = 18432,
     .vocab = 129280},
    /* moonshotai/Kimi-K2-Instruct config.json */
    {.name = "kimi-k2",
     .layers = 61,
     .first_dense = 1,
     .experts = 384,
     .heads = 64,
     .hidden = 7168,
     .moe_inter = 2048,
     .dense_inter = 18432,
     .vocab = 163840},
};

const struct pm_shape *pm_shape_find(const char *name)
{
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        if (strcmp(shapes[i].name, name) == 0)
            return &shapes[i];
    return NULL;
}

/* Appends one tensor; 'fused' joins it to the previous tensor's group. */
__attribute__((format(printf, 8, 9))) static wst_status_t
add(struct pm_model *m, enum pm_cut cut, uint32_t layer, int fused,
    uint32_t ndim, uint64_t d0, uint64_t d1, const char *fmt, ...)
{
    struct pm_tensor *pt;
    va_list ap;

    if (wst_array_grow(&m->v, &m->cap, m->n + 1, sizeof(*m->v)) != WST_OK)
        return WST_ERR_NO_MEMORY;
    pt = &m->v[m->n];
    memset(pt, 0, sizeof(*pt));
    va_start(ap, fmt);
    vsnprintf(pt->t.name, sizeof(pt->t.name), fmt, ap);
    va_end(ap);
    pt->t.dtype = WST_DTYPE_BF16;
    pt->t.ndim = ndim;
    pt->t.shape[0] = d0;
    pt->t.shape[1] = d1;
    pt->cut = cut;
    pt->layer = layer;
    pt->fuse = fused ? m->v[m->n - 1].fuse : m->n;
    m->n++;
    return WST_OK;
}

static wst_status_t add_experts(struct pm_model *m, uint32_t l)
{
    const struct pm_shape *s = m->shape;
    static const char *proj[] = {"gate", "up", "down"};
    wst_status_t st = WST_OK;

    for (int p = 0; p < 3 && st == WST_OK; p++) {
        int down = p == 2;

        st = add(m, PM_EXPERTS, l, 0, 3, s->experts,
                 down ? s->hidden : s->moe_inter,
                 "model.layers.%u.mlp.experts.%s_proj.weight", l, proj[p]);
        if (st == WST_OK)
            m->v[m->n - 1].t.shape[2] = down ? s->moe_inter : s->hidden;
    }
    return st;
}

/* gate and up fused into one live parameter, then down. */
static wst_status_t add_mlp(struct pm_model *m, uint32_t l, const char *what,
                            uint64_t inter)
{
    uint64_t h = m->shape->hidden;
    wst_status_t st;

    st = add(m, PM_COLUMN, l, 0, 2, inter, h,
             "model.layers.%u.%s.gate_proj.weight", l, what);
    if (st == WST_OK)
        st = add(m, PM_COLUMN, l, 1, 2, inter, h,
                 "model.layers.%u.%s.up_proj.weight", l, what);
    if (st == WST_OK)
        st = add(m, PM_ROW, l, 0, 2, h, inter,
                 "model.layers.%u.%s.down_proj.weight", l, what);
    return st;
}

static wst_status_t add_attention(struct pm_model *m, uint32_t l)
{
    const struct pm_shape *s = m->shape;
    uint64_t h = s->hidden;
    wst_status_t st;

    st = add(m, PM_REPLICATED, l, 0, 1, h, 0,
             "model.layers.%u.input_layernorm.weight", l);
    if (st == WST_OK)
        st = add(m, PM_REPLICATED, l, 0, 1, h, 0,
                 "model.layers.%u.post_attention_layernorm.weight", l);
    /* q_a and kv_a are one replicated parameter in vLLM */
    if (st == WST_OK)
        st = add(m, PM_REPLICATED, l, 0, 2, Q_LORA, h,
                 "model.layers.%u.self_attn.q_a_proj.weight", l);
    if (st == WST_OK)
        st = add(m, PM_REPLICATED, l, 1, 2, KV_LORA + ROPE, h,
                 "model.layers.%u.self_attn.kv_a_proj_with_mqa.weight", l);
    if (st == WST_OK)
        st = add(m, PM_REPLICATED, l, 0, 1, Q_LORA, 0,
                 "model.layers.%u.self_attn.q_a_layernorm.weight", l);
    if (st == WST_OK)
        st = add(m, PM_REPLICATED, l, 0, 1, KV_LORA, 0,
                 "model.layers.%u.self_attn.kv_a_layernorm.weight", l);
    if (st == WST_OK)
        st = add(m, PM_COLUMN, l, 0, 2, (uint64_t)s->heads * QK_HEAD, Q_LORA,
                 "model.layers.%u.self_attn.q_b_proj.weight", l);
    if (st == WST_OK)
        st = add(m, PM_COLUMN, l, 0, 2, (uint64_t)s->heads * KV_B_HEAD, KV_LORA,
                 "model.layers.%u.self_attn.kv_b_proj.weight", l);
    if (st == WST_OK)
        st = add(m, PM_ROW, l, 0, 2, h, (uint64_t)s->heads * V_HEAD,
                 "model.layers.%u.self_attn.o_proj.weight", l);
    return st;
}

static wst_status_t add_layer(struct pm_model *m, uint32_t l)
{
    const struct pm_shape *s = m->shape;
    wst_status_t st = add_attention(m, l);

    if (st != WST_OK)
        return st;
    if (l < s->first_dense)
        return add_mlp(m, l, "mlp", s->dense_inter);
    st = add(m, PM_REPLICATED, l, 0, 2, s->experts, s->hidden,
             "model.layers.%u.mlp.gate.weight", l);
    if (st == WST_OK)
        st = add(m, PM_REPLICATED, l, 0, 1, s->experts, 0,
                 "model.layers.%u.mlp.gate.e_score_correction_bias", l);
    if (st == WST_OK)
        m->v[m->n - 1].t.dtype = WST_DTYPE_F32;
    if (st == WST_OK)
        st = add_mlp(m, l, "mlp.shared_experts", s->moe_inter);
    if (st == WST_OK)
        st = add_experts(m, l);
    return st;
}

wst_status_t pm_model_build(struct pm_model *m, const struct pm_shape *s,
                            uint32_t layers)
{
    wst_status_t st;

    memset(m, 0, sizeof(*m));
    m->shape = s;
    m->layers = layers == 0 || layers > s->layers ? s->layers : layers;
    st = add(m, PM_VOCAB, UINT32_MAX, 0, 2, s->vocab, s->hidden,
             "model.embed_tokens.weight");
    for (uint32_t l = 0; l < m->layers && st == WST_OK; l++)
        st = add_layer(m, l);
    if (st == WST_OK)
        st = add(m, PM_REPLICATED, UINT32_MAX, 0, 1, s->hidden, 0,
                 "model.norm.weight");
    if (st == WST_OK)
        st = add(m, PM_VOCAB, UINT32_MAX, 0, 2, s->vocab, s->hidden,
                 "lm_head.weight");
    if (st != WST_OK)
        pm_model_free(m);
    return st;
}

void pm_model_free(struct pm_model *m)
{
    free(m->v);
    m->v = NULL;
    m->n = m->cap = 0;
}
