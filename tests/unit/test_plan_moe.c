/* test_plan_moe.c - grouped experts through the planner (common/planner.h).
 *
 * Three parts: whole-model plans for MoE shapes (Qwen3-30B-A3B and
 * DeepSeek-V3), built in memory with exact coverage checks and printed cost;
 * the plan-time expert refusals; and a brute-force byte check of plans for a
 * small grouped tensor whose senders mix EP ranges, FSDP slices of any dim
 * and flat shards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "array.h"
#include "dtype.h"
#include "planner.h"
#include "plan_oracle.h"

/* ---- a model description ------------------------------------------------ */

struct model_tensor {
    struct wst_tensor_desc t;
    int grouped; /* [E, rows, cols] expert tensor */
};

struct model {
    const char *label;
    struct model_tensor *v;
    size_t n, cap;
};

__attribute__((format(printf, 7, 8))) static void
model_add(struct model *m, int grouped, uint32_t ndim, uint64_t d0, uint64_t d1,
          uint64_t d2, const char *fmt, ...)
{
    struct model_tensor *mt;
    va_list ap;

    assert_int_equal(wst_array_grow(&m->v, &m->cap, m->n + 1, sizeof(*m->v)),
                     WST_OK);
    mt = &m->v[m->n++];
    memset(mt, 0, sizeof(*mt));
    va_start(ap, fmt);
    vsnprintf(mt->t.name, sizeof(mt->t.name), fmt, ap);
    va_end(ap);
    mt->t.dtype = WST_DTYPE_BF16;
    mt->t.ndim = ndim;
    mt->t.shape[0] = d0;
    mt->t.shape[1] = d1;
    mt->t.shape[2] = d2;
    mt->grouped = grouped;
}

/* 2-D and 1-D dense tensors, and the three grouped experts of a layer. */
static void dense2(struct model *m, uint64_t r, uint64_t c, uint32_t l,
                   const char *what)
{
    if (l == UINT32_MAX)
        model_add(m, 0, 2, r, c, 0, "%s", what);
    else
        model_add(m, 0, 2, r, c, 0, "model.layers.%u.%s", l, what);
}

static void dense1(struct model *m, uint64_t n, uint32_t l, const char *what)
{
    if (l == UINT32_MAX)
        model_add(m, 0, 1, n, 0, 0, "%s", what);
    else
        model_add(m, 0, 1, n, 0, 0, "model.layers.%u.%s", l, what);
}

static void experts(struct model *m, uint32_t l, uint64_t e, uint64_t h,
                    uint64_t i)
{
    model_add(m, 1, 3, e, i, h, "model.layers.%u.mlp.experts.gate_proj.weight",
              l);
    model_add(m, 1, 3, e, i, h, "model.layers.%u.mlp.experts.up_proj.weight",
              l);
    model_add(m, 1, 3, e, h, i, "model.layers.%u.mlp.experts.down_proj.weight",
              l);
}

/* REFIT_LAYOUTS.md section 1: 48 layers, H=2048, I=768, E=128, 32 query /
 * 4 KV heads of 128, vocab 151936, untied embeddings. */
static void qwen3_30b_a3b(struct model *m)
{
    const uint64_t h = 2048, e = 128, moe_i = 768, q = 32 * 128, kv = 4 * 128;
    uint32_t l;

    m->label = "qwen3-30b-a3b";
    dense2(m, 151936, h, UINT32_MAX, "model.embed_tokens.weight");
    for (l = 0; l < 48; l++) {
        dense1(m, h, l, "input_layernorm.weight");
        dense1(m, h, l, "post_attention_layernorm.weight");
        dense2(m, q, h, l, "self_attn.q_proj.weight");
        dense2(m, kv, h, l, "self_attn.k_proj.weight");
        dense2(m, kv, h, l, "self_attn.v_proj.weight");
        dense2(m, h, q, l, "self_attn.o_proj.weight");
        dense1(m, 128, l, "self_attn.q_norm.weight");
        dense1(m, 128, l, "self_attn.k_norm.weight");
        dense2(m, e, h, l, "mlp.gate.weight");
        experts(m, l, e, h, moe_i);
    }
    dense1(m, h, UINT32_MAX, "model.norm.weight");
    dense2(m, 151936, h, UINT32_MAX, "lm_head.weight");
}

/* DeepSeek-V3: 61 layers, the first 3 with a dense MLP, E=256, H=7168, moe
 * I=2048, dense I=18432, vocab 129280; MLA tensors as dense placeholders,
 * one shared expert (dense) and the fp32 e_score_correction_bias. */
static void deepseek_v3(struct model *m)
{
    const uint64_t h = 7168, e = 256, moe_i = 2048, dense_i = 18432;
    uint32_t l;

    m->label = "deepseek-v3";
    dense2(m, 129280, h, UINT32_MAX, "model.embed_tokens.weight");
    for (l = 0; l < 61; l++) {
        dense1(m, h, l, "input_layernorm.weight");
        dense1(m, h, l, "post_attention_layernorm.weight");
        dense2(m, 1536, h, l, "self_attn.q_a_proj.weight");
        dense1(m, 1536, l, "self_attn.q_a_layernorm.weight");
        dense2(m, 128 * 192, 1536, l, "self_attn.q_b_proj.weight");
        dense2(m, 576, h, l, "self_attn.kv_a_proj_with_mqa.weight");
        dense1(m, 512, l, "self_attn.kv_a_layernorm.weight");
        dense2(m, 128 * 256, 512, l, "self_attn.kv_b_proj.weight");
        dense2(m, h, 128 * 128, l, "self_attn.o_proj.weight");
        if (l < 3) {
            dense2(m, dense_i, h, l, "mlp.gate_proj.weight");
            dense2(m, dense_i, h, l, "mlp.up_proj.weight");
            dense2(m, h, dense_i, l, "mlp.down_proj.weight");
            continue;
        }
        dense2(m, e, h, l, "mlp.gate.weight");
        dense1(m, e, l, "mlp.gate.e_score_correction_bias");
        m->v[m->n - 1].t.dtype = WST_DTYPE_F32;
        dense2(m, moe_i, h, l, "mlp.shared_experts.gate_proj.weight");
        dense2(m, moe_i, h, l, "mlp.shared_experts.up_proj.weight");
        dense2(m, h, moe_i, l, "mlp.shared_experts.down_proj.weight");
        experts(m, l, e, h, moe_i);
    }
    dense1(m, h, UINT32_MAX, "model.norm.weight");
    dense2(m, 129280, h, UINT32_MAX, "lm_head.weight");
}

/* ---- a whole-model planning input --------------------------------------- */

/* Trainer: n_s sender ranks; rank r owns experts [r*E/n_s, (r+1)*E/n_s) of
 * every grouped tensor (EP) and a ceil-sized dim-0 chunk of every dense one
 * (FSDP). Receiver: ep_rank of ep_size for experts, dense tensors whole;
 * one region per want, sized to it. Have i of every sender is tensor i. */
struct big {
    const struct model *m;
    uint32_t n_s, ep_rank, ep_size;
    struct wst_have *haves; /* [n_s * m->n] */
    const struct wst_have **ptrs;
    size_t *n_haves;
    struct wst_want *wants;
    struct wst_region_desc *regions;
    struct wst_plan_input in;
};

static uint64_t row_elems(const struct wst_tensor_desc *t)
{
    uint64_t n = 1;
    uint32_t d;

    for (d = 1; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return (a + b - 1) / b;
}

static struct wst_box full_box(const struct wst_tensor_desc *t)
{
    struct wst_box b;

    memset(&b, 0, sizeof(b));
    b.ndim = t->ndim;
    memcpy(b.stop, t->shape, sizeof(b.stop));
    return b;
}

/* Dim-0 range sender r owns of tensor t. */
static void owned_rows(const struct big *b, const struct model_tensor *mt,
                       uint32_t r, uint64_t *a_p, uint64_t *b_p)
{
    uint64_t n = mt->t.shape[0], chunk, a;

    if (mt->grouped) {
        *a_p = r * (n / b->n_s);
        *b_p = (r + 1) * (n / b->n_s);
        return;
    }
    chunk = ceil_div(n, b->n_s);
    a = r * chunk < n ? r * chunk : n;
    *a_p = a;
    *b_p = a + chunk < n ? a + chunk : n;
}

static void big_init(struct big *b, const struct model *m, uint32_t n_s,
                     uint32_t ep_rank, uint32_t ep_size)
{
    size_t i, n = m->n;
    uint32_t r;

    memset(b, 0, sizeof(*b));
    b->m = m, b->n_s = n_s, b->ep_rank = ep_rank, b->ep_size = ep_size;
    b->haves = calloc((size_t)n_s * n, sizeof(*b->haves));
    b->ptrs = calloc(n_s, sizeof(*b->ptrs));
    b->n_haves = calloc(n_s, sizeof(*b->n_haves));
    b->wants = calloc(n, sizeof(*b->wants));
    b->regions = calloc(n, sizeof(*b->regions));
    assert_true(b->haves && b->ptrs && b->n_haves && b->wants && b->regions);
    for (r = 0; r < n_s; r++) {
        b->ptrs[r] = &b->haves[(size_t)r * n];
        b->n_haves[r] = n;
        for (i = 0; i < n; i++) {
            struct wst_have *h = &b->haves[(size_t)r * n + i];

            h->tensor = m->v[i].t;
            h->box = full_box(&m->v[i].t);
            owned_rows(b, &m->v[i], r, &h->box.start[0], &h->box.stop[0]);
            h->mem = WST_MEM_HOST;
        }
    }
    for (i = 0; i < n; i++) {
        struct wst_want *w = &b->wants[i];
        uint64_t per = m->v[i].t.shape[0] / ep_size;

        w->tensor = m->v[i].t;
        w->box = full_box(&m->v[i].t);
        w->region = (uint32_t)i;
        if (m->v[i].grouped) {
            w->expert.grouped = 1;
            w->expert.ep_rank = ep_rank;
            w->expert.ep_size = ep_size;
            w->box.start[0] = ep_rank * per;
            w->box.stop[0] = (ep_rank + 1) * per;
        }
        memcpy(b->regions[i].name, w->tensor.name, WST_NAME_MAX);
        b->regions[i].length =
            wst_box_elems(&w->box) * wst_dtype_size(w->tensor.dtype);
        b->regions[i].mem = WST_MEM_HOST;
    }
    b->in.wants = b->wants;
    b->in.n_wants = n;
    b->in.regions = b->regions;
    b->in.n_regions = n;
    b->in.haves = b->ptrs;
    b->in.n_haves = b->n_haves;
    b->in.n_senders = n_s;
    b->in.receiver_rank = ep_rank;
}

static void big_free(struct big *b)
{
    free(b->haves);
    free(b->ptrs);
    free(b->n_haves);
    free(b->wants);
    free(b->regions);
}

static const struct wst_plan_item *sort_items;

static int cmp_region_dst(const void *pa, const void *pb)
{
    const struct wst_plan_item *a = &sort_items[*(const size_t *)pa];
    const struct wst_plan_item *b = &sort_items[*(const size_t *)pb];

    if (a->region != b->region)
        return a->region < b->region ? -1 : 1;
    return a->dst_offset < b->dst_offset ? -1 : (a->dst_offset > b->dst_offset);
}

/* Checks one item against the rule "rows come from their owner": the dim-0
 * index at the item's first and last byte belongs to item->sender, and the
 * source offset is where that sender's shard holds those bytes. */
static void check_big_item(const struct big *b, const struct wst_plan *plan,
                           const struct wst_plan_item *it)
{
    const struct model_tensor *mt = &b->m->v[it->region];
    uint64_t es = wst_dtype_size(mt->t.dtype);
    uint64_t row_bytes = row_elems(&mt->t) * es;
    uint64_t start = b->wants[it->region].box.start[0];
    uint64_t first = start + it->dst_offset / row_bytes;
    uint64_t last = start + (it->dst_offset + it->length - 1) / row_bytes;
    uint64_t a, z;
    uint32_t l = wst_tensor_layer(mt->t.name);

    assert_int_equal(it->have, it->region); /* have i is tensor i */
    owned_rows(b, mt, it->sender, &a, &z);
    assert_true(a <= first && last < z);
    assert_int_equal(it->src_offset,
                     (first - a) * row_bytes + it->dst_offset % row_bytes);
    assert_int_equal(it->layer, l == UINT32_MAX ? plan->n_layers - 1 : l);
}

/* Exact coverage, exact item count, every item from the owner of its rows. */
static void check_big_plan(const struct big *b, const struct wst_plan *plan,
                           uint64_t *wanted_p, uint64_t *expert_bytes_p)
{
    const struct model *m = b->m;
    uint64_t wanted = 0, expert_bytes = 0, pos = 0, per, a, z, es;
    size_t i, k, want_items = 0, *order;
    uint32_t r, cur = UINT32_MAX;

    /* wanted bytes and item count from the model alone */
    for (i = 0; i < m->n; i++) {
        es = wst_dtype_size(m->v[i].t.dtype);
        if (m->v[i].grouped) {
            per = m->v[i].t.shape[0] / b->ep_size;
            wanted += per * row_elems(&m->v[i].t) * es;
            expert_bytes += per * row_elems(&m->v[i].t) * es;
        } else {
            wanted += m->v[i].t.shape[0] * row_elems(&m->v[i].t) * es;
        }
        for (r = 0; r < b->n_s; r++) {
            owned_rows(b, &m->v[i], r, &a, &z);
            if (a < b->wants[i].box.stop[0] && b->wants[i].box.start[0] < z)
                want_items++;
        }
    }
    assert_int_equal(plan->total_bytes, wanted);
    assert_int_equal(plan->n_items, want_items);
    assert_int_equal(plan->n_senders, b->n_s);

    /* per region, the items tile [0, length) with no gap or overlap */
    order = malloc(plan->n_items * sizeof(*order));
    assert_non_null(order);
    for (i = 0; i < plan->n_items; i++)
        order[i] = i;
    sort_items = plan->items;
    qsort(order, plan->n_items, sizeof(*order), cmp_region_dst);
    for (k = 0; k < plan->n_items; k++) {
        const struct wst_plan_item *it = &plan->items[order[k]];

        if (it->region != cur) {
            if (cur != UINT32_MAX)
                assert_int_equal(pos, b->regions[cur].length);
            assert_true(cur == UINT32_MAX ? it->region == 0
                                          : it->region == cur + 1);
            cur = it->region;
            pos = 0;
        }
        assert_int_equal(it->dst_offset, pos);
        pos += it->length;
        check_big_item(b, plan, it);
    }
    assert_int_equal(cur, m->n - 1);
    assert_int_equal(pos, b->regions[cur].length);
    free(order);
    *wanted_p = wanted;
    *expert_bytes_p = expert_bytes;
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Plans the model, checks it, prints its cost; returns the plan. */
static struct wst_plan *plan_model(struct big *b)
{
    struct wst_plan *plan = NULL, *again = NULL;
    uint64_t wanted, expert_bytes;
    char err[512] = "";
    double t0, ms;

    t0 = now_ms();
    if (wst_plan_build(&b->in, NULL, &plan, err, sizeof(err)) != WST_OK)
        fail_msg("%s: plan failed: %s", b->m->label, err);
    ms = now_ms() - t0;
    check_big_plan(b, plan, &wanted, &expert_bytes);
    printf("%s: %zu tensors, %u senders x %zu haves, receiver ep %u of %u: "
           "plan %.1f ms, %zu items (~%.1f KiB plan messages at 40 B/item), "
           "%.2f GiB wanted (%.2f GiB experts)\n",
           b->m->label, b->m->n, b->n_s, b->m->n, b->ep_rank, b->ep_size, ms,
           plan->n_items, plan->n_items * 40.0 / 1024, wanted / 1073741824.0,
           expert_bytes / 1073741824.0);
    fflush(stdout);
    assert_true(ms < 2000.0); /* a sanity bound, not a benchmark */
    assert_int_equal(wst_plan_build(&b->in, NULL, &again, NULL, 0), WST_OK);
    assert_int_equal(again->hash, plan->hash);
    wst_plan_destroy(again);
    return plan;
}

/* Sums the bytes of grouped-tensor items per sender. */
static void expert_bytes_by_sender(const struct big *b,
                                   const struct wst_plan *plan, uint64_t *out)
{
    size_t i;

    memset(out, 0, b->n_s * sizeof(*out));
    for (i = 0; i < plan->n_items; i++) {
        if (b->m->v[plan->items[i].region].grouped)
            out[plan->items[i].sender] += plan->items[i].length;
    }
}

static void test_plan_moe_qwen3_30b_a3b(void **state)
{
    struct model m = {0};
    struct big b;
    struct wst_plan *plan;
    uint64_t by_sender[8], per_expert_layer;
    uint32_t r;

    (void)state;
    qwen3_30b_a3b(&m);
    assert_int_equal(m.n, 3 + 48 * 12);
    big_init(&b, &m, 8, 3, 8);
    plan = plan_model(&b);
    assert_int_equal(plan->n_layers, 49);
    /* one run per expert tensor (experts [48, 64), all on rank 3) and one
     * per FSDP shard of each dense tensor */
    assert_int_equal(plan->n_items, 48 * 3 + (3 + 48 * 9) * 8);
    expert_bytes_by_sender(&b, plan, by_sender);
    per_expert_layer = 3ull * 16 * 768 * 2048 * 2;
    for (r = 0; r < 8; r++)
        assert_int_equal(by_sender[r], r == 3 ? 48 * per_expert_layer : 0);
    /* layer 10 of sender 3: its experts plus its dense shards */
    assert_true(plan->layer_bytes[3 * 49 + 10] > per_expert_layer);
    wst_plan_destroy(plan);
    big_free(&b);
    free(m.v);
}

static void test_plan_moe_deepseek_v3(void **state)
{
    struct model m = {0};
    struct big b;
    struct wst_plan *plan;
    uint64_t by_sender[64], per_sender_layer;
    uint32_t r;
    size_t i;

    (void)state;
    deepseek_v3(&m);
    assert_int_equal(m.n, 3 + 3 * 12 + 58 * 17);
    big_init(&b, &m, 64, 5, 32);
    plan = plan_model(&b);
    assert_int_equal(plan->n_layers, 62);
    /* experts [40, 48): 4 from sender 10, 4 from sender 11 */
    assert_int_equal(plan->n_items, 58 * 3 * 2 + (3 + 3 * 12 + 58 * 14) * 64);
    expert_bytes_by_sender(&b, plan, by_sender);
    per_sender_layer = 3ull * 4 * 2048 * 7168 * 2;
    for (r = 0; r < 64; r++)
        assert_int_equal(by_sender[r],
                         r == 10 || r == 11 ? 58 * per_sender_layer : 0);
    for (i = 0; i < plan->n_items; i++) {
        const struct wst_plan_item *it = &plan->items[i];

        if (m.v[it->region].grouped)
            assert_int_equal(it->length, per_sender_layer / 3);
    }
    wst_plan_destroy(plan);
    big_free(&b);
    free(m.v);
}

/* ---- refusals ----------------------------------------------------------- */

#define EXP_NAME "model.layers.7.mlp.experts.down_proj.weight"

struct small {
    struct wst_have haves[8][32];
    const struct wst_have *ptrs[8];
    size_t n_haves[8];
    struct wst_want wants[4];
    struct wst_region_desc regions[2];
    struct wst_plan_input in;
    char err[1024];
};

static void small_init(struct small *s, uint32_t n_s, uint32_t rank)
{
    uint32_t i;

    memset(s, 0, sizeof(*s));
    for (i = 0; i < 8; i++)
        s->ptrs[i] = s->haves[i];
    s->in.wants = s->wants;
    s->in.regions = s->regions;
    s->in.haves = s->ptrs;
    s->in.n_haves = s->n_haves;
    s->in.n_senders = n_s;
    s->in.receiver_rank = rank;
}

static struct wst_tensor_desc tensor3(const char *name, enum wst_dtype dt,
                                      uint64_t e, uint64_t r, uint64_t c)
{
    struct wst_tensor_desc t;

    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "%s", name);
    t.dtype = dt;
    t.ndim = 3;
    t.shape[0] = e, t.shape[1] = r, t.shape[2] = c;
    return t;
}

static struct wst_box box3(uint64_t e0, uint64_t e1, uint64_t r0, uint64_t r1,
                           uint64_t c0, uint64_t c1)
{
    struct wst_box b;

    memset(&b, 0, sizeof(b));
    b.ndim = 3;
    b.start[0] = e0, b.stop[0] = e1;
    b.start[1] = r0, b.stop[1] = r1;
    b.start[2] = c0, b.stop[2] = c1;
    return b;
}

static void add_have(struct small *s, uint32_t sender,
                     const struct wst_tensor_desc *t, struct wst_box box,
                     int flat)
{
    struct wst_have *h = &s->haves[sender][s->n_haves[sender]++];

    memset(h, 0, sizeof(*h));
    h->tensor = *t;
    h->box = box;
    h->flat = flat;
    h->mem = WST_MEM_HOST;
}

static struct wst_box flat_box(uint64_t a, uint64_t b)
{
    struct wst_box x;

    memset(&x, 0, sizeof(x));
    x.ndim = 1;
    x.start[0] = a, x.stop[0] = b;
    return x;
}

/* A grouped want of 't' into region 0, expert ep_rank of ep_size. The
 * region grows by the whole tensor, so tests may widen the box later. */
static void add_expert_want(struct small *s, const struct wst_tensor_desc *t,
                            struct wst_box box, uint32_t ep_rank,
                            uint32_t ep_size)
{
    struct wst_want *w = &s->wants[s->in.n_wants++];

    memset(w, 0, sizeof(*w));
    w->tensor = *t;
    w->box = box;
    w->expert.grouped = 1;
    w->expert.ep_rank = ep_rank;
    w->expert.ep_size = ep_size;
    if (s->in.n_regions == 0) {
        snprintf(s->regions[0].name, WST_NAME_MAX, "w2");
        s->regions[0].mem = WST_MEM_HOST;
        s->in.n_regions = 1;
    }
    w->offset = s->regions[0].length;
    s->regions[0].length +=
        t->shape[0] * t->shape[1] * t->shape[2] * wst_dtype_size(t->dtype);
}

/* Builds, expecting 'status' and a message naming the tensor and 'needle'. */
static void expect_refusal(struct small *s, wst_status_t status,
                           const char *needle)
{
    struct wst_plan *plan = NULL;

    assert_int_equal(
        wst_plan_build(&s->in, NULL, &plan, s->err, sizeof(s->err)), status);
    assert_null(plan);
    if (strstr(s->err, EXP_NAME) == NULL || strstr(s->err, needle) == NULL)
        fail_msg("message \"%s\" lacks \"%s\" or the tensor name", s->err,
                 needle);
    printf("refused as expected: %s\n", s->err);
}

static void test_plan_moe_refuse_divisibility(void **state)
{
    struct small *s = malloc(sizeof(*s));
    struct wst_tensor_desc t = tensor3(EXP_NAME, WST_DTYPE_BF16, 10, 8, 4);

    (void)state;
    small_init(s, 1, 0);
    add_have(s, 0, &t, box3(0, 10, 0, 8, 0, 4), 0);
    /* ceil-sized chunks would give rank 1 experts [3, 6), linear [3, 5) */
    add_expert_want(s, &t, box3(3, 6, 0, 8, 0, 4), 1, 4);
    expect_refusal(s, WST_ERR_EXPERT_DIVISIBILITY, "10 experts over ep 4");

    /* divisibility comes first, even when the box also cuts a dim */
    s->wants[0].box.stop[2] = 2;
    expect_refusal(s, WST_ERR_EXPERT_DIVISIBILITY, "10 experts over ep 4");
    free(s);
}

static void test_plan_moe_refuse_sharding(void **state)
{
    struct small *s = malloc(sizeof(*s));
    struct wst_tensor_desc t = tensor3(EXP_NAME, WST_DTYPE_BF16, 16, 8, 6);

    (void)state;
    small_init(s, 1, 1);
    add_have(s, 0, &t, box3(0, 16, 0, 8, 0, 6), 0);
    /* TP slicing the intermediate dim inside each expert */
    add_expert_want(s, &t, box3(4, 8, 0, 4, 0, 6), 1, 4);
    expect_refusal(s, WST_ERR_EXPERT_SHARDING,
                   "dimension 1 ([0, 4) of [0, 8))");

    s->wants[0].box = box3(4, 8, 0, 8, 3, 6);
    expect_refusal(s, WST_ERR_EXPERT_SHARDING,
                   "dimension 2 ([3, 6) of [0, 6))");

    /* sharding is reported before placement */
    s->wants[0].box = box3(0, 4, 0, 8, 0, 5);
    expect_refusal(s, WST_ERR_EXPERT_SHARDING, "dimension 2");
    free(s);
}

static void test_plan_moe_refuse_non_linear(void **state)
{
    struct small *s = malloc(sizeof(*s));
    struct wst_tensor_desc t = tensor3(EXP_NAME, WST_DTYPE_BF16, 16, 8, 6);

    (void)state;
    small_init(s, 1, 1);
    add_have(s, 0, &t, box3(0, 16, 0, 8, 0, 6), 0);
    /* rank 1 of 4 asking for experts [0, 4): linear placement says [4, 8) */
    add_expert_want(s, &t, box3(0, 4, 0, 8, 0, 6), 1, 4);
    expect_refusal(s, WST_ERR_NON_LINEAR_PLACEMENT,
                   "ep rank 1 of 4 wants experts [0, 4), linear placement "
                   "gives it [4, 8)");

    /* round-robin's first expert of rank 1, and a short range */
    s->wants[0].box = box3(1, 2, 0, 8, 0, 6);
    expect_refusal(s, WST_ERR_NON_LINEAR_PLACEMENT, "[1, 2)");
    s->wants[0].box = box3(4, 7, 0, 8, 0, 6);
    expect_refusal(s, WST_ERR_NON_LINEAR_PLACEMENT, "[4, 7)");
    /* an empty box is not the rank's range either */
    s->wants[0].box = box3(4, 4, 0, 8, 0, 6);
    expect_refusal(s, WST_ERR_NON_LINEAR_PLACEMENT, "[4, 4)");

    /* refused before any intersection: no sender has anything */
    s->n_haves[0] = 0;
    s->wants[0].box = box3(0, 4, 0, 8, 0, 6);
    expect_refusal(s, WST_ERR_NON_LINEAR_PLACEMENT, "[0, 4)");
    /* the right range with no sender is a coverage gap instead */
    s->wants[0].box = box3(4, 8, 0, 8, 0, 6);
    assert_int_equal(wst_plan_build(&s->in, NULL, &(struct wst_plan *){NULL},
                                    s->err, sizeof(s->err)),
                     WST_ERR_COVERAGE);
    free(s);
}

/* Haves are checked as the planner indexes them, before any expert
 * refusal, as when they had a pass of their own: an invalid have is what
 * is reported, and an unterminated name is refused unread. */
static void test_plan_moe_refuse_invalid_have_first(void **state)
{
    struct small *s = malloc(sizeof(*s));
    struct wst_tensor_desc t = tensor3(EXP_NAME, WST_DTYPE_BF16, 16, 8, 6);

    (void)state;
    small_init(s, 2, 1);
    add_have(s, 0, &t, box3(0, 8, 0, 8, 0, 6), 0);
    add_have(s, 1, &t, box3(8, 16, 0, 8, 0, 6), 0);
    /* placement alone would be refused as non-linear */
    add_expert_want(s, &t, box3(0, 4, 0, 8, 0, 6), 1, 4);
    expect_refusal(s, WST_ERR_NON_LINEAR_PLACEMENT, "[0, 4)");

    s->haves[1][0].box.stop[2] = 7; /* beyond the shape */
    expect_refusal(s, WST_ERR_INVALID, "sender 1 have 0");

    s->haves[1][0].box.stop[2] = 6;
    memset(s->haves[1][0].tensor.name, 'x', WST_NAME_MAX);
    assert_int_equal(wst_plan_build(&s->in, NULL, &(struct wst_plan *){NULL},
                                    s->err, sizeof(s->err)),
                     WST_ERR_INVALID);
    assert_non_null(strstr(s->err, "sender 1 have 0"));
    free(s);
}

static void test_plan_moe_refuse_bad_descriptor(void **state)
{
    struct small *s = malloc(sizeof(*s));
    struct wst_tensor_desc t = tensor3(EXP_NAME, WST_DTYPE_BF16, 16, 8, 6);
    struct wst_plan *plan = NULL;

    (void)state;
    small_init(s, 1, 0);
    add_have(s, 0, &t, box3(0, 16, 0, 8, 0, 6), 0);
    add_expert_want(s, &t, box3(0, 4, 0, 8, 0, 6), 4, 4);
    assert_int_equal(
        wst_plan_build(&s->in, NULL, &plan, s->err, sizeof(s->err)),
        WST_ERR_INVALID);
    assert_non_null(strstr(s->err, "invalid expert descriptor"));
    assert_non_null(strstr(s->err, EXP_NAME));
    free(s);
}

/* The descriptor is part of the plan-cache key. */
static void test_plan_moe_input_key(void **state)
{
    struct small *s = malloc(sizeof(*s));
    struct wst_tensor_desc t = tensor3(EXP_NAME, WST_DTYPE_BF16, 16, 8, 6);
    uint64_t k_grouped, k_dense;

    (void)state;
    small_init(s, 1, 0);
    add_have(s, 0, &t, box3(0, 16, 0, 8, 0, 6), 0);
    add_expert_want(s, &t, box3(0, 16, 0, 8, 0, 6), 0, 1);
    k_grouped = wst_plan_input_key(&s->in);
    memset(&s->wants[0].expert, 0, sizeof(s->wants[0].expert));
    k_dense = wst_plan_input_key(&s->in);
    assert_true(k_grouped != k_dense);
    free(s);
}

/* ---- brute force: mixed EP / FSDP / flat senders ------------------------ */

static uint64_t rng_state;

static uint64_t rnd(uint64_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return n ? rng_state % n : 0;
}

/* Byte k of global element f of tensor 'salt'. */
static uint8_t pattern(uint64_t salt, uint64_t f, uint64_t k)
{
    return (uint8_t)(f * 7 + k * 131 + salt * 53 + 1);
}

static uint8_t *fill_shard(const struct wst_have *h, uint64_t salt,
                           uint64_t *len_p)
{
    uint64_t es = wst_dtype_size(h->tensor.dtype), n, k, i;
    uint64_t x[WST_MAX_DIMS];
    uint8_t *buf;

    n = wst_box_elems(&h->box);
    *len_p = n * es;
    buf = malloc(n * es + 1);
    if (h->flat) {
        for (i = 0; i < n; i++)
            for (k = 0; k < es; k++)
                buf[i * es + k] = pattern(salt, h->box.start[0] + i, k);
        return buf;
    }
    if (n == 0)
        return buf;
    memcpy(x, h->box.start, sizeof(x));
    do {
        for (k = 0; k < es; k++)
            buf[oracle_have_offset(h, x) + k] =
                pattern(salt, oracle_flat_index(&h->tensor, x), k);
    } while (oracle_box_next(&h->box, x));
    return buf;
}

/* Runs every item as a byte copy; each wanted byte must be written once,
 * with the right value, by the chosen source; nothing else is written. */
static void check_small_plan(const struct small *s, const struct wst_plan *plan)
{
    uint8_t *src[8][32], *dst, *mark;
    uint64_t src_len[8][32], len = s->regions[0].length, x[WST_MAX_DIMS];
    uint64_t b, off, k, es, salt;
    int64_t *who;
    const struct wst_plan_item *it;
    uint32_t r, h;
    size_t i, wi;

    for (r = 0; r < s->in.n_senders; r++)
        for (h = 0; h < s->n_haves[r]; h++)
            src[r][h] = fill_shard(&s->haves[r][h],
                                   s->haves[r][h].tensor.name[27] == 'd',
                                   &src_len[r][h]);
    dst = malloc(len + 1);
    mark = calloc(len + 1, 1);
    who = malloc((len + 1) * sizeof(*who));
    for (b = 0; b < len; b++)
        who[b] = -1;
    for (i = 0; i < plan->n_items; i++) {
        it = &plan->items[i];
        assert_true(it->sender < s->in.n_senders &&
                    it->have < s->n_haves[it->sender] && it->region == 0);
        assert_true(it->length > 0 &&
                    it->src_offset + it->length <=
                        src_len[it->sender][it->have] &&
                    it->dst_offset + it->length <= len);
        assert_int_equal(it->layer, wst_tensor_layer(s->wants[0].tensor.name));
        memcpy(dst + it->dst_offset, src[it->sender][it->have] + it->src_offset,
               it->length);
        for (b = it->dst_offset; b < it->dst_offset + it->length; b++) {
            assert_int_equal(who[b], -1);
            who[b] = (int64_t)i;
        }
    }
    for (wi = 0; wi < s->in.n_wants; wi++) {
        const struct wst_want *w = &s->wants[wi];

        es = wst_dtype_size(w->tensor.dtype);
        salt = w->tensor.name[27] == 'd';
        memcpy(x, w->box.start, sizeof(x));
        do {
            off = oracle_want_offset(w, x);
            for (k = 0; k < es; k++) {
                assert_int_equal(mark[off + k], 0);
                mark[off + k] = 1;
                assert_true(who[off + k] >= 0);
                it = &plan->items[who[off + k]];
                assert_int_equal(
                    dst[off + k],
                    pattern(salt, oracle_flat_index(&w->tensor, x), k));
                assert_int_equal((int64_t)it->sender * 256 + it->have,
                                 oracle_chosen_source(&s->in, wi, x));
            }
        } while (oracle_box_next(&w->box, x));
    }
    for (b = 0; b < len; b++)
        assert_true(mark[b] || who[b] == -1);
    free(dst);
    free(mark);
    free(who);
    for (r = 0; r < s->in.n_senders; r++)
        for (h = 0; h < s->n_haves[r]; h++)
            free(src[r][h]);
}

/* The brief's case: experts [0, 4) of an [8, 6, 5] tensor on sender 0 (EP),
 * experts [4, 8) FSDP-sliced on dim 1 over senders 1..3. */
static void test_plan_moe_mixed_ep_fsdp(void **state)
{
    struct small *s = malloc(sizeof(*s));
    struct wst_tensor_desc t = tensor3(EXP_NAME, WST_DTYPE_BF16, 8, 6, 5);
    struct wst_plan *plan = NULL;
    uint32_t r;
    size_t i;

    (void)state;
    small_init(s, 4, 1);
    add_have(s, 0, &t, box3(0, 4, 0, 6, 0, 5), 0);
    for (r = 1; r < 4; r++)
        add_have(s, r, &t, box3(4, 8, 2 * (r - 1), 2 * r, 0, 5), 0);
    add_expert_want(s, &t, box3(4, 8, 0, 6, 0, 5), 1, 2);
    assert_int_equal(
        wst_plan_build(&s->in, NULL, &plan, s->err, sizeof(s->err)), WST_OK);
    check_small_plan(s, plan);
    /* 4 experts x 3 senders: one 2-row run of each expert from each */
    assert_int_equal(plan->n_items, 12);
    for (i = 0; i < plan->n_items; i++) {
        assert_int_equal(plan->items[i].sender, 1 + i / 4);
        assert_int_equal(plan->items[i].length, 2 * 5 * 2);
    }
    assert_int_equal(plan->total_bytes, 4 * 6 * 5 * 2);
    wst_plan_destroy(plan);

    /* ep rank 0 of 2: all from sender 0, one run */
    s->wants[0].box = box3(0, 4, 0, 6, 0, 5);
    s->wants[0].expert.ep_rank = 0;
    assert_int_equal(
        wst_plan_build(&s->in, NULL, &plan, s->err, sizeof(s->err)), WST_OK);
    check_small_plan(s, plan);
    assert_int_equal(plan->n_items, 1);
    assert_int_equal(plan->items[0].sender, 0);
    wst_plan_destroy(plan);
    free(s);
}

/* Adds haves covering experts [e0, e1) of t: whole (EP), sliced on a random
 * dim in ceil-sized chunks (FSDP), or as flat shards of the group's flat
 * range, spread over random senders. */
static void rnd_group_haves(struct small *s, const struct wst_tensor_desc *t,
                            uint64_t e0, uint64_t e1)
{
    uint32_t mode = (uint32_t)rnd(3), n_s = s->in.n_senders;
    uint32_t parts = 1 + (uint32_t)rnd(3), p, dim = (uint32_t)rnd(3);
    uint64_t inner = t->shape[1] * t->shape[2], lo, hi, len, chunk, a, b;
    struct wst_box box = box3(e0, e1, 0, t->shape[1], 0, t->shape[2]);

    if (mode == 0) {
        add_have(s, (uint32_t)rnd(n_s), t, box, 0);
        return;
    }
    lo = mode == 1 ? box.start[dim] : e0 * inner;
    hi = mode == 1 ? box.stop[dim] : e1 * inner;
    len = hi - lo;
    chunk = (len + parts - 1) / parts;
    for (p = 0; p < parts; p++) {
        a = lo + (p * chunk < len ? p * chunk : len);
        b = a + chunk < hi ? a + chunk : hi;
        if (mode == 2) {
            add_have(s, (uint32_t)rnd(n_s), t, flat_box(a, b), 1);
            continue;
        }
        box.start[dim] = a, box.stop[dim] = b;
        add_have(s, (uint32_t)rnd(n_s), t, box, 0);
    }
}

/* Random grouped tensors and trainer layouts: senders own EP groups, FSDP
 * slices of any dim and flat shards, sometimes with a gap, sometimes with
 * extra replicas; the receiver wants its linear expert range. */
static void rnd_small(struct small *s)
{
    static const enum wst_dtype dts[] = {WST_DTYPE_U8, WST_DTYPE_BF16,
                                         WST_DTYPE_F32};
    static const char *names[] = {
        "model.layers.0.mlp.experts.gate_proj.weight",
        "model.layers.0.mlp.experts.down_proj.weight"};
    uint32_t n_t = 1 + (uint32_t)rnd(2), i, ep, ep_rank, p;
    uint64_t e, per, e0, e1, es, a, b, elems, last_bytes;
    struct wst_tensor_desc t;
    struct wst_want *w;

    small_init(s, 1 + (uint32_t)rnd(6), (uint32_t)rnd(8));
    snprintf(s->regions[0].name, WST_NAME_MAX, "w");
    s->regions[0].mem = WST_MEM_HOST;
    s->in.n_regions = 1;
    for (i = 0; i < n_t; i++) {
        e = 1 + rnd(8);
        t = tensor3(names[i], dts[rnd(3)], e, 1 + rnd(4), 1 + rnd(5));
        es = wst_dtype_size(t.dtype);
        elems = e * t.shape[1] * t.shape[2];
        /* trainer: consecutive expert groups, each laid out its own way */
        for (e0 = 0; e0 < e; e0 = e1) {
            e1 = e0 + 1 + rnd(e - e0);
            if (rnd(12) != 0)
                rnd_group_haves(s, &t, e0, e1);
        }
        for (p = (uint32_t)rnd(3); p > 0; p--) {
            a = rnd(elems + 1);
            b = a + rnd(elems - a + 1);
            add_have(s, (uint32_t)rnd(s->in.n_senders), &t, flat_box(a, b), 1);
        }
        /* receiver: a divisor of E, its linear range */
        do
            ep = 1 + (uint32_t)rnd(e);
        while (e % ep != 0);
        ep_rank = (uint32_t)rnd(ep);
        per = e / ep;
        w = &s->wants[s->in.n_wants++];
        memset(w, 0, sizeof(*w));
        w->tensor = t;
        w->box = box3(ep_rank * per, (ep_rank + 1) * per, 0, t.shape[1], 0,
                      t.shape[2]);
        w->expert.grouped = 1;
        w->expert.ep_rank = ep_rank;
        w->expert.ep_size = ep;
        last_bytes = t.shape[2] * es;
        if (rnd(2))
            w->row_pitch = last_bytes + rnd(3) * es;
        w->offset = s->regions[0].length + rnd(3) * es;
        s->regions[0].length = w->offset + wst_want_span(w);
    }
    s->regions[0].length += rnd(3);
}

static void test_plan_moe_random_bruteforce(void **state)
{
    struct small *s = malloc(sizeof(*s));
    struct wst_plan *plan, *again;
    int c, gaps = 0, plans = 0;

    (void)state;
    rng_state = 0x2545f4914f6cdd1dull;
    for (c = 0; c < 800; c++) {
        rnd_small(s);
        plan = NULL;
        if (oracle_has_gap(&s->in)) {
            assert_int_equal(
                wst_plan_build(&s->in, NULL, &plan, s->err, sizeof(s->err)),
                WST_ERR_COVERAGE);
            assert_null(plan);
            gaps++;
            continue;
        }
        if (wst_plan_build(&s->in, NULL, &plan, s->err, sizeof(s->err)) !=
            WST_OK)
            fail_msg("case %d: plan failed: %s", c, s->err);
        check_small_plan(s, plan);
        again = NULL;
        assert_int_equal(wst_plan_build(&s->in, NULL, &again, NULL, 0), WST_OK);
        assert_int_equal(again->hash, plan->hash);
        wst_plan_destroy(again);
        wst_plan_destroy(plan);
        plans++;
    }
    printf("grouped brute force: %d plans checked, %d coverage gaps\n", plans,
           gaps);
    assert_true(gaps > 20 && plans > 400);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_moe_qwen3_30b_a3b),
        cmocka_unit_test(test_plan_moe_deepseek_v3),
        cmocka_unit_test(test_plan_moe_refuse_divisibility),
        cmocka_unit_test(test_plan_moe_refuse_sharding),
        cmocka_unit_test(test_plan_moe_refuse_non_linear),
        cmocka_unit_test(test_plan_moe_refuse_bad_descriptor),
        cmocka_unit_test(test_plan_moe_refuse_invalid_have_first),
        cmocka_unit_test(test_plan_moe_input_key),
        cmocka_unit_test(test_plan_moe_mixed_ep_fsdp),
        cmocka_unit_test(test_plan_moe_random_bruteforce),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
