/* test_model.c - synthetic models (tools/demo/model.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dtype.h"
#include "model.h"
#include "repack.h"
#include "layout_assert.h"

/* ---- helpers ------------------------------------------------------------ */

static uint64_t elems_of(const struct wst_tensor_desc *t)
{
    uint64_t n = 1;
    uint32_t d;

    for (d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

static size_t tensor_index(const struct wst_model *m, const char *name)
{
    size_t i;

    for (i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return i;
    fail_msg("tensor %s not in the model", name);
    return 0;
}

static const struct wst_layout_region *region_named(const struct wst_layout *l,
                                                    const char *name)
{
    size_t i;

    for (i = 0; i < l->n_regions; i++)
        if (strcmp(l->regions[i].name, name) == 0)
            return &l->regions[i];
    fail_msg("region %s not in the layout", name);
    return NULL;
}

static const struct wst_want *want_of(const struct wst_layout *l,
                                      const char *tensor)
{
    size_t i;

    for (i = 0; i < l->n_wants; i++)
        if (strcmp(l->wants[i].tensor.name, tensor) == 0)
            return &l->wants[i];
    fail_msg("no want for %s", tensor);
    return NULL;
}

/* Adds 1 to counts[] over every element of an N-D box of tensor 't', or
 * over a flat range. */
static void count_box(const struct wst_tensor_desc *t, const struct wst_box *b,
                      int flat, uint8_t *counts)
{
    uint64_t i, g, idx[WST_MAX_DIMS];
    uint32_t d;

    if (flat || t->ndim == 1) {
        for (i = b->start[0]; i < b->stop[0]; i++)
            counts[i]++;
        return;
    }
    assert_int_equal(b->ndim, t->ndim);
    if (wst_box_elems(b) == 0)
        return;
    memcpy(idx, b->start, sizeof(idx));
    for (;;) {
        for (g = 0, d = 0; d < t->ndim; d++)
            g = g * t->shape[d] + idx[d];
        counts[g]++;
        for (d = t->ndim; d-- > 0;) {
            if (++idx[d] < b->stop[d])
                break;
            idx[d] = b->start[d];
        }
        if (d == UINT32_MAX)
            return;
    }
}

/* Grouped expert tensors travel to the engine through the experts entries,
 * never through wants. */
static int is_grouped_expert(const struct wst_tensor_desc *t)
{
    return strstr(t->name, ".mlp.experts.") != NULL;
}

static const struct wst_layout_experts *experts_of(const struct wst_layout *l,
                                                   uint32_t layer)
{
    size_t i;

    for (i = 0; i < l->n_experts; i++)
        if (l->experts[i].layer == layer)
            return &l->experts[i];
    fail_msg("no experts entry for layer %u", layer);
    return NULL;
}

/* The layout file carries what the model produced, experts included. */
static void check_file_roundtrip(struct wst_layout *l)
{
    struct wst_layout back;
    char path[128], err[512] = "";
    size_t i;

    snprintf(path, sizeof(path), "/tmp/test_model_moe.%ld.json",
             (long)getpid());
    snprintf(l->shm, sizeof(l->shm), "/wstream-test-moe");
    assert_int_equal(wst_layout_save(path, l, err, sizeof(err)), WST_OK);
    assert_int_equal(wst_layout_load(path, &back, err, sizeof(err)), WST_OK);
    remove(path);
    assert_int_equal(back.n_regions, l->n_regions);
    assert_int_equal(back.n_experts, l->n_experts);
    for (i = 0; i < l->n_experts; i++)
        assert_experts_equal(&back.experts[i], &l->experts[i]);
    wst_layout_release(&back);
    l->shm[0] = '\0';
}

/* Whole-tensor fill of 't' (malloc'd; the caller frees it). */
static unsigned char *fill_whole(const struct wst_tensor_desc *t, uint64_t seed,
                                 uint64_t version)
{
    struct wst_have whole;
    unsigned char *full;

    memset(&whole, 0, sizeof(whole));
    whole.tensor = *t;
    whole.box.ndim = t->ndim;
    memcpy(whole.box.stop, t->shape, sizeof(t->shape));
    whole.mem = WST_MEM_HOST;
    full = malloc(elems_of(t) * wst_dtype_size(t->dtype));
    assert_non_null(full);
    wst_model_fill_shard(&whole, seed, version, full);
    return full;
}

static int is_replicated(const struct wst_tensor_desc *t)
{
    size_t n = strlen(t->name);
    static const char router[] = "mlp.gate.weight";

    return t->ndim == 1 ||
           (n >= sizeof(router) - 1 &&
            strcmp(t->name + n - (sizeof(router) - 1), router) == 0);
}

/* Simulates the transfer: writes each want's box from a whole-tensor fill
 * into the shm, honouring offset and row_pitch. Independent of the planner. */
static void simulate_copies(const struct wst_layout *l, unsigned char *shm,
                            uint64_t seed, uint64_t version)
{
    size_t i;

    for (i = 0; i < l->n_wants; i++) {
        const struct wst_want *w = &l->wants[i];
        const struct wst_tensor_desc *t = &w->tensor;
        size_t es = wst_dtype_size(t->dtype);
        struct wst_have whole;
        unsigned char *full, *dst;
        uint64_t cols = t->ndim > 1 ? t->shape[1] : t->shape[0];
        uint64_t r, r0 = t->ndim > 1 ? w->box.start[0] : 0;
        uint64_t r1 = t->ndim > 1 ? w->box.stop[0] : 1;
        uint64_t c0 = w->box.start[t->ndim - 1], c1 = w->box.stop[t->ndim - 1];
        uint64_t pitch = w->row_pitch ? w->row_pitch : (c1 - c0) * es;

        memset(&whole, 0, sizeof(whole));
        whole.tensor = *t;
        whole.box.ndim = t->ndim;
        memcpy(whole.box.stop, t->shape, sizeof(t->shape));
        whole.mem = WST_MEM_HOST;
        full = malloc(elems_of(t) * es);
        assert_non_null(full);
        wst_model_fill_shard(&whole, seed, version, full);
        dst = shm + l->regions[w->region].offset + w->offset;
        for (r = r0; r < r1; r++, dst += pitch)
            memcpy(dst, full + (r * cols + c0) * es, (c1 - c0) * es);
        free(full);
    }
}

/* ---- presets ------------------------------------------------------------ */

static void test_model_tiny_preset(void **state)
{
    struct wst_model m;
    char err[256] = "";
    size_t i;

    (void)state;
    assert_int_equal(wst_model_preset("tiny", 0, &m, err, sizeof(err)), WST_OK);
    assert_string_equal(m.preset, "tiny");
    assert_int_equal(m.n_layers, 4);
    /* 11 tensors per layer, plus embed_tokens, norm and lm_head */
    assert_int_equal(m.n_tensors, 47);
    /* per layer: norms 2*2048 + q,o 2*2 MiB + k,v 2*1 MiB + q/k_norm 2*256
     * + gate,up,down 3*4 MiB = 18878976; embed + lm_head 2*8 MiB, norm 2048 */
    assert_int_equal(wst_model_bytes(&m), 4ull * 18878976 + 16777216 + 2048);
    assert_string_equal(m.tensors[0].name, "model.embed_tokens.weight");
    assert_string_equal(m.tensors[46].name, "lm_head.weight");
    i = tensor_index(&m, "model.layers.3.self_attn.k_proj.weight");
    assert_int_equal(m.tensors[i].shape[0], 512);
    assert_int_equal(m.tensors[i].shape[1], 1024);
    i = tensor_index(&m, "model.layers.0.mlp.down_proj.weight");
    assert_int_equal(m.tensors[i].shape[0], 1024);
    assert_int_equal(m.tensors[i].shape[1], 2048);
    i = tensor_index(&m, "model.layers.2.self_attn.q_norm.weight");
    assert_int_equal(m.tensors[i].ndim, 1);
    assert_int_equal(m.tensors[i].shape[0], 128);
    for (i = 0; i < m.n_tensors; i++) {
        assert_int_equal(m.tensors[i].dtype, WST_DTYPE_BF16);
        assert_int_equal(wst_tensor_desc_check(&m.tensors[i], NULL, NULL),
                         WST_OK);
    }
    wst_model_release(&m);
    assert_null(m.tensors);
}

static void test_model_qwen3_preset(void **state)
{
    struct wst_model m;
    char err[256] = "";
    size_t i;

    (void)state;
    assert_int_equal(wst_model_preset("qwen3-30b-a3b", 0, &m, err, sizeof(err)),
                     WST_OK);
    assert_int_equal(m.n_layers, 48);
    assert_int_equal(m.moe_inter, 768);
    assert_int_equal(m.n_tensors, 48 * 12 + 3);
    i = tensor_index(&m, "model.layers.47.mlp.gate.weight");
    assert_int_equal(m.tensors[i].shape[0], 128);
    assert_int_equal(m.tensors[i].shape[1], 2048);
    i = tensor_index(&m, "model.layers.0.self_attn.o_proj.weight");
    assert_int_equal(m.tensors[i].shape[0], 2048);
    assert_int_equal(m.tensors[i].shape[1], 4096);
    i = tensor_index(&m, "model.layers.47.mlp.experts.up_proj.weight");
    assert_int_equal(m.tensors[i].ndim, 3);
    assert_int_equal(m.tensors[i].shape[0], 128);
    assert_int_equal(m.tensors[i].shape[1], 768);
    assert_int_equal(m.tensors[i].shape[2], 2048);
    /* per layer: 2 norms 8192 + q,o 2*16 MiB + k,v 2*2 MiB + 512 + router
     * 512 KiB + experts 3*128*768*2048*2; embed + lm_head 2*151936*2048*2,
     * norm 4096 */
    assert_int_equal(wst_model_bytes(&m),
                     48ull * (8192 + 33554432 + 4194304 + 512 + 524288 +
                              3ull * 128 * 768 * 2048 * 2) +
                         2ull * 151936 * 2048 * 2 + 4096);
    wst_model_release(&m);

    assert_int_equal(wst_model_preset("qwen3-30b-a3b", 2, &m, err, sizeof(err)),
                     WST_OK);
    assert_int_equal(m.n_tensors, 2 * 12 + 3);
    wst_model_release(&m);

    assert_int_equal(wst_model_preset("huge", 0, &m, err, sizeof(err)),
                     WST_ERR_INVALID);
    assert_non_null(strstr(err, "unknown model preset \"huge\""));
    assert_non_null(strstr(err, "tiny-moe"));
}

/* Elements of have 'h' (its box, or its flat range). */
static uint64_t have_elems(const struct wst_have *h)
{
    uint64_t n = 1;
    uint32_t d;

    for (d = 0; d < h->box.ndim; d++)
        n *= h->box.stop[d] - h->box.start[d];
    return n;
}

static void test_model_deepseek_v3_narrow(void **state)
{
    struct wst_model m;
    struct wst_layout l;
    struct wst_have *haves;
    char err[256] = "";
    size_t i, n, k;
    uint64_t per_rank[2] = {0, 0}, elems, tensor_elems;
    uint32_t r, d;

    (void)state;
    assert_int_equal(
        wst_model_preset("deepseek-v3-narrow", 0, &m, err, sizeof(err)),
        WST_OK);
    /* DeepSeek-V3's counts (tests/unit/test_plan_moe.c): embed, norm,
     * lm_head; 3 dense layers of 12; 58 MoE layers of 17 */
    assert_int_equal(m.n_layers, 61);
    assert_int_equal(m.n_tensors, 3 + 3 * 12 + 58 * 17);
    i = tensor_index(&m, "model.layers.60.mlp.experts.down_proj.weight");
    assert_int_equal(m.tensors[i].shape[0], 256);
    assert_int_equal(m.tensors[i].shape[1], 64);
    assert_int_equal(m.tensors[i].shape[2], 16);
    i = tensor_index(&m, "model.layers.3.mlp.gate.e_score_correction_bias");
    assert_int_equal(m.tensors[i].dtype, WST_DTYPE_F32);
    i = tensor_index(&m, "model.layers.2.mlp.down_proj.weight");
    assert_int_equal(m.tensors[i].shape[1], 384);
    i = tensor_index(&m, "model.layers.7.self_attn.q_b_proj.weight");
    assert_int_equal(m.tensors[i].shape[0], 128 * 12);
    assert_int_equal(m.tensors[i].shape[1], 48);
    i = tensor_index(&m, "model.layers.7.self_attn.kv_a_proj_with_mqa.weight");
    assert_int_equal(m.tensors[i].shape[0], 36);
    for (k = 0; k < m.n_tensors; k++)
        assert_null(strstr(m.tensors[k].name, "k_proj"));

    /* engine TP 16 / EP 16: 16 local experts, heads split 8 a rank */
    assert_int_equal(wst_model_engine_layout(&m, 5, 16, &l, err, sizeof(err)),
                     WST_OK);
    assert_int_equal(l.n_experts, 58);
    assert_int_equal(l.experts[0].layer, 3);
    assert_int_equal(l.experts[0].ep_rank, 5);
    assert_int_equal(l.experts[0].ep_size, 16);
    for (k = 0; k < l.n_wants; k++) {
        if (strcmp(l.wants[k].tensor.name,
                   "model.layers.7.self_attn.kv_b_proj.weight") == 0) {
            assert_int_equal(l.wants[k].box.start[0], 5 * 8 * 16);
            assert_int_equal(l.wants[k].box.stop[0], 6 * 8 * 16);
        }
        if (strcmp(l.wants[k].tensor.name,
                   "model.layers.7.self_attn.o_proj.weight") == 0) {
            assert_int_equal(l.wants[k].box.start[1], 5 * 64);
            assert_int_equal(l.wants[k].box.stop[1], 6 * 64);
        }
    }
    wst_layout_release(&l);
    /* 128 heads: tp 3 divides nothing */
    assert_int_equal(wst_model_engine_layout(&m, 0, 3, &l, err, sizeof(err)),
                     WST_ERR_UNSUPPORTED_LAYOUT);

    /* Megatron TP 2 over 4 ranks: each half of a split tensor is held by
     * 2 ranks, a whole one by all 4, the experts once, by EP */
    assert_int_equal(wst_model_trainer_shards_tp(&m, 0, 4, 3, &haves, &n),
                     WST_ERR_INVALID);
    for (i = 0; i < m.n_tensors; i++) {
        const struct wst_tensor_desc *t = &m.tensors[i];
        int expert = strstr(t->name, ".mlp.experts.") != NULL;
        int whole = 1;

        tensor_elems = 1;
        for (d = 0; d < t->ndim; d++)
            tensor_elems *= t->shape[d];
        elems = 0;
        for (r = 0; r < 4; r++) {
            assert_int_equal(
                wst_model_trainer_shards_tp(&m, r, 4, 2, &haves, &n), WST_OK);
            assert_int_equal(n, m.n_tensors);
            assert_string_equal(haves[i].tensor.name, t->name);
            elems += have_elems(&haves[i]);
            whole = whole && have_elems(&haves[i]) == tensor_elems;
            if (r < 2)
                per_rank[r] = have_elems(&haves[i]);
            else if (!expert)
                /* rank r + 2 is rank r's data-parallel replica */
                assert_int_equal(have_elems(&haves[i]), per_rank[r - 2]);
            free(haves);
        }
        assert_int_equal(elems, expert  ? tensor_elems
                                : whole ? 4 * tensor_elems
                                        : 2 * tensor_elems);
    }
    assert_int_equal(wst_model_trainer_shards_tp(&m, 1, 4, 2, &haves, &n),
                     WST_OK);
    i = tensor_index(&m, "model.layers.9.self_attn.o_proj.weight");
    assert_int_equal(haves[i].box.start[1], 512); /* row-parallel: dim 1 */
    assert_int_equal(haves[i].box.stop[1], 1024);
    assert_int_equal(haves[i].box.stop[0], 64);
    i = tensor_index(&m, "model.layers.9.self_attn.q_a_proj.weight");
    assert_int_equal(haves[i].box.start[0], 0); /* replicated */
    assert_int_equal(haves[i].box.stop[0], 48);
    free(haves);
    wst_model_release(&m);

    /* --experts: 64 routed experts a layer; not for a dense preset */
    assert_int_equal(wst_model_preset_experts("deepseek-v3-narrow", 5, 64, &m,
                                              err, sizeof(err)),
                     WST_OK);
    i = tensor_index(&m, "model.layers.4.mlp.experts.gate_proj.weight");
    assert_int_equal(m.tensors[i].shape[0], 64);
    wst_model_release(&m);
    assert_int_equal(
        wst_model_preset_experts("tiny", 0, 8, &m, err, sizeof(err)),
        WST_ERR_INVALID);
}

static void test_model_tiny_moe_preset(void **state)
{
    static const char *const layer0[] = {
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.v_proj.weight",
        "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.self_attn.q_norm.weight",
        "model.layers.0.self_attn.k_norm.weight",
        "model.layers.0.mlp.gate.weight",
        "model.layers.0.mlp.experts.gate_proj.weight",
        "model.layers.0.mlp.experts.up_proj.weight",
        "model.layers.0.mlp.experts.down_proj.weight",
    };
    struct wst_model m;
    char err[256] = "";
    size_t i;

    (void)state;
    assert_int_equal(wst_model_preset("tiny-moe", 0, &m, err, sizeof(err)),
                     WST_OK);
    assert_string_equal(m.preset, "tiny-moe");
    assert_int_equal(m.hidden, 1024);
    assert_int_equal(m.inter, 0);
    assert_int_equal(m.moe_inter, 256);
    assert_int_equal(m.n_experts, 16);
    assert_int_equal(m.n_layers, 4);
    assert_int_equal(m.vocab, 4096);
    assert_int_equal(m.heads, 8);
    assert_int_equal(m.kv_heads, 4);
    /* 12 tensors per layer (no dense MLP), plus embed, norm and lm_head */
    assert_int_equal(m.n_tensors, 4 * 12 + 3);
    for (i = 0; i < 12; i++)
        assert_string_equal(m.tensors[1 + i].name, layer0[i]);
    assert_string_equal(m.tensors[13].name,
                        "model.layers.1.input_layernorm.weight");
    assert_string_equal(m.tensors[4 * 12 + 2].name, "lm_head.weight");
    i = tensor_index(&m, "model.layers.3.mlp.gate.weight");
    assert_int_equal(m.tensors[i].ndim, 2);
    assert_int_equal(m.tensors[i].shape[0], 16);
    assert_int_equal(m.tensors[i].shape[1], 1024);
    i = tensor_index(&m, "model.layers.3.mlp.experts.gate_proj.weight");
    assert_int_equal(m.tensors[i].ndim, 3);
    assert_int_equal(m.tensors[i].shape[0], 16);
    assert_int_equal(m.tensors[i].shape[1], 256);
    assert_int_equal(m.tensors[i].shape[2], 1024);
    i = tensor_index(&m, "model.layers.1.mlp.experts.down_proj.weight");
    assert_int_equal(m.tensors[i].shape[0], 16);
    assert_int_equal(m.tensors[i].shape[1], 1024);
    assert_int_equal(m.tensors[i].shape[2], 256);
    for (i = 0; i < m.n_tensors; i++) {
        assert_null(strstr(m.tensors[i].name, "gate_up"));
        assert_null(strstr(m.tensors[i].name, "mlp.gate_proj"));
        assert_int_equal(m.tensors[i].dtype, WST_DTYPE_BF16);
        assert_int_equal(wst_tensor_desc_check(&m.tensors[i], NULL, NULL),
                         WST_OK);
    }
    /* per layer: norms 4096 + q,o 2*2 MiB + k,v 2*1 MiB + 512 + router 32 KiB
     * + experts 3*16*256*1024*2; embed + lm_head 2*8 MiB, norm 2048 */
    assert_int_equal(wst_model_bytes(&m),
                     4ull * (4096 + 4194304 + 2097152 + 512 + 32768 +
                             3ull * 16 * 256 * 1024 * 2) +
                         16777216 + 2048);
    wst_model_release(&m);
}

/* ---- engine layout ------------------------------------------------------ */

/* Every checkpoint element wanted exactly once over all ranks, replicated
 * tensors exactly tp times; regions aligned, disjoint, inside the shm; no
 * two wants of a rank write the same byte; the layout survives the file
 * validator. Routed experts: one experts entry per MoE layer and rank, no
 * wants, and the ranks' expert ranges cover every expert exactly once. */
static void check_engine_coverage(const char *preset, uint32_t layers,
                                  uint32_t tp)
{
    struct wst_model m;
    uint8_t **counts, *ecounts;
    char err[512] = "";
    size_t i, t;
    uint32_t r;
    uint64_t e;

    assert_int_equal(wst_model_preset(preset, layers, &m, err, sizeof(err)),
                     WST_OK);
    ecounts = calloc((size_t)m.n_layers * (m.n_experts + 1), 1);
    assert_non_null(ecounts);
    counts = calloc(m.n_tensors, sizeof(*counts));
    assert_non_null(counts);
    for (t = 0; t < m.n_tensors; t++) {
        counts[t] = calloc(elems_of(&m.tensors[t]), 1);
        assert_non_null(counts[t]);
    }
    for (r = 0; r < tp; r++) {
        struct wst_layout l, back;
        struct wst_region_desc *descs;
        uint8_t *written;
        size_t len;

        assert_int_equal(
            wst_model_engine_layout(&m, r, tp, &l, err, sizeof(err)), WST_OK);
        assert_int_equal(l.rank, r);
        assert_string_equal(l.shm, "");
        written = calloc(l.shm_bytes, 1);
        descs = calloc(l.n_regions, sizeof(*descs));
        assert_non_null(written);
        assert_non_null(descs);
        for (i = 0; i < l.n_regions; i++) {
            assert_int_equal(l.regions[i].offset % 64, 0);
            assert_true(l.regions[i].offset + l.regions[i].bytes <=
                        l.shm_bytes);
            if (i > 0)
                assert_true(l.regions[i].offset >=
                            l.regions[i - 1].offset + l.regions[i - 1].bytes);
            descs[i].length = l.regions[i].bytes;
            descs[i].mem = WST_MEM_HOST;
        }
        for (i = 0; i < l.n_wants; i++) {
            const struct wst_want *w = &l.wants[i];
            uint64_t span = wst_want_span(w);
            uint64_t base = l.regions[w->region].offset + w->offset;

            assert_int_equal(wst_want_check(w, descs, l.n_regions), WST_OK);
            assert_int_equal(w->row_pitch, 0);
            /* dense wants: the span is exactly the box bytes */
            assert_int_equal(span, wst_box_elems(&w->box) * 2);
            for (e = base; e < base + span; e++) {
                assert_int_equal(written[e], 0);
                written[e] = 1;
            }
            t = tensor_index(&m, w->tensor.name);
            assert_memory_equal(&w->tensor, &m.tensors[t], sizeof(w->tensor));
            assert_false(is_grouped_expert(&w->tensor));
            count_box(&m.tensors[t], &w->box, 0, counts[t]);
        }
        assert_int_equal(l.n_experts, m.moe_inter != 0 ? m.n_layers : 0);
        for (i = 0; i < l.n_experts; i++) {
            const struct wst_layout_experts *x = &l.experts[i];
            uint64_t n_local = m.n_experts / tp;

            assert_int_equal(x->layer, i);
            assert_int_equal(x->ep_rank, r);
            assert_int_equal(x->ep_size, tp);
            assert_int_equal(l.regions[x->w13_region].bytes,
                             n_local * 2 * m.moe_inter * m.hidden * 2);
            assert_int_equal(l.regions[x->w2_region].bytes,
                             n_local * m.hidden * m.moe_inter * 2);
            for (e = r * n_local; e < (r + 1) * n_local; e++)
                ecounts[i * m.n_experts + e]++;
        }
        /* the file validator accepts what the model produced */
        snprintf(l.shm, sizeof(l.shm), "/wstream-test-r%u", r);
        {
            char path[256];
            FILE *f;

            snprintf(path, sizeof(path), "/tmp/test_model.%ld.json",
                     (long)r + 1000L * (long)tp);
            assert_int_equal(wst_layout_save(path, &l, err, sizeof(err)),
                             WST_OK);
            assert_int_equal(wst_layout_load(path, &back, err, sizeof(err)),
                             WST_OK);
            f = fopen(path, "r");
            assert_non_null(f);
            fseek(f, 0, SEEK_END);
            len = (size_t)ftell(f);
            fclose(f);
            assert_true(len > 0);
            remove(path);
        }
        assert_int_equal(back.n_wants, l.n_wants);
        assert_int_equal(back.shm_bytes, l.shm_bytes);
        assert_memory_equal(back.wants, l.wants, l.n_wants * sizeof(*l.wants));
        assert_int_equal(back.n_experts, l.n_experts);
        for (i = 0; i < l.n_experts; i++)
            assert_experts_equal(&back.experts[i], &l.experts[i]);
        wst_layout_release(&back);
        free(written);
        free(descs);
        wst_layout_release(&l);
    }
    for (e = 0; e < (uint64_t)m.n_layers * m.n_experts && m.moe_inter != 0; e++)
        if (ecounts[e] != 1)
            fail_msg("tp=%u layer %llu expert %llu held %u times", tp,
                     (unsigned long long)(e / m.n_experts),
                     (unsigned long long)(e % m.n_experts), ecounts[e]);
    free(ecounts);
    for (t = 0; t < m.n_tensors; t++) {
        uint8_t want = is_replicated(&m.tensors[t]) ? (uint8_t)tp : 1;

        if (is_grouped_expert(&m.tensors[t]))
            want = 0;

        /* tp > kv_heads: each kv head lives on tp/kv_heads ranks */
        if (tp > m.kv_heads && (strstr(m.tensors[t].name, "k_proj") ||
                                strstr(m.tensors[t].name, "v_proj")))
            want = (uint8_t)(tp / m.kv_heads);
        uint64_t n = elems_of(&m.tensors[t]);

        for (e = 0; e < n; e++) {
            if (counts[t][e] != want)
                fail_msg("tp=%u %s element %llu covered %u times, want %u", tp,
                         m.tensors[t].name, (unsigned long long)e, counts[t][e],
                         want);
        }
        free(counts[t]);
    }
    free(counts);
    wst_model_release(&m);
}

static void test_model_dense_preset(void **state)
{
    struct wst_model m;
    char err[256] = "";
    size_t i;
    uint64_t rows = 0;

    (void)state;
    /* 3 MiB = 384 rows of 4096 bf16, over 5 layers x 2 tensors: 38 rows
     * each, the first 4 tensors one more */
    assert_int_equal(wst_model_preset("dense:3", 5, &m, err, sizeof(err)),
                     WST_OK);
    assert_string_equal(m.preset, "dense:3");
    assert_int_equal(m.n_layers, 5);
    assert_int_equal(m.n_tensors, 10);
    assert_int_equal(wst_model_bytes(&m), 3ull << 20);
    assert_string_equal(m.tensors[0].name, "model.layers.0.dense.w0.weight");
    assert_string_equal(m.tensors[9].name, "model.layers.4.dense.w1.weight");
    assert_int_equal(m.tensors[3].shape[0], 39);
    assert_int_equal(m.tensors[4].shape[0], 38);
    for (i = 0; i < m.n_tensors; i++) {
        assert_int_equal(m.tensors[i].ndim, 2);
        assert_int_equal(m.tensors[i].shape[1], 4096);
        assert_int_equal(m.tensors[i].dtype, WST_DTYPE_BF16);
        assert_int_equal(wst_tensor_desc_check(&m.tensors[i], NULL, NULL),
                         WST_OK);
        rows += m.tensors[i].shape[0];
    }
    assert_int_equal(rows, 384);
    wst_model_release(&m);

    /* default: 4 layers; 1 GiB exactly */
    assert_int_equal(wst_model_preset("dense:1024", 0, &m, err, sizeof(err)),
                     WST_OK);
    assert_int_equal(m.n_tensors, 8);
    assert_int_equal(wst_model_bytes(&m), 1ull << 30);
    wst_model_release(&m);

    assert_int_equal(wst_model_preset("dense:0", 0, &m, err, sizeof(err)),
                     WST_ERR_INVALID);
    assert_int_equal(wst_model_preset("dense:12x", 0, &m, err, sizeof(err)),
                     WST_ERR_INVALID);
    assert_int_equal(wst_model_preset("dense:", 0, &m, err, sizeof(err)),
                     WST_ERR_INVALID);
    assert_non_null(strstr(err, "dense:<MiB>"));
}

static void test_model_dense_engine_coverage(void **state)
{
    (void)state;
    check_engine_coverage("dense:1", 1, 1);
    check_engine_coverage("dense:1", 3, 3); /* 128 rows / 6: uneven */
}

static void test_model_engine_coverage_tp1(void **state)
{
    (void)state;
    check_engine_coverage("tiny", 2, 1);
}

static void test_model_engine_coverage_tp2(void **state)
{
    (void)state;
    check_engine_coverage("tiny", 2, 2);
}

static void test_model_engine_coverage_tp4(void **state)
{
    (void)state;
    check_engine_coverage("tiny", 2, 4);
}

static void test_model_engine_coverage_tp8_kv_replicated(void **state)
{
    (void)state;
    check_engine_coverage("tiny", 1, 8);
}

static void test_model_engine_qkv_region(void **state)
{
    struct wst_model m;
    struct wst_layout l;
    const struct wst_layout_region *qkv;
    const struct wst_want *k, *v, *q;
    char err[256] = "";

    (void)state;
    assert_int_equal(wst_model_preset("tiny", 1, &m, err, sizeof(err)), WST_OK);
    assert_int_equal(wst_model_engine_layout(&m, 1, 2, &l, err, sizeof(err)),
                     WST_OK);
    qkv = region_named(&l, "model.layers.0.self_attn.qkv_proj.weight");
    /* 4 q heads and 2 kv heads of 128 rows per rank */
    assert_int_equal(qkv->bytes, (512 + 2 * 256) * 1024 * 2);
    q = want_of(&l, "model.layers.0.self_attn.q_proj.weight");
    k = want_of(&l, "model.layers.0.self_attn.k_proj.weight");
    v = want_of(&l, "model.layers.0.self_attn.v_proj.weight");
    assert_int_equal(q->box.start[0], 512);
    assert_int_equal(q->box.stop[0], 1024);
    assert_int_equal(q->offset, 0);
    assert_int_equal(k->box.start[0], 256);
    assert_int_equal(k->box.stop[0], 512);
    assert_int_equal(k->offset, 512 * 1024 * 2);
    assert_int_equal(v->offset, (512 + 256) * 1024 * 2);
    assert_int_equal(
        region_named(&l, "model.layers.0.mlp.gate_up_proj.weight")->bytes,
        2 * 1024 * 1024 * 2);
    q = want_of(&l, "model.layers.0.mlp.up_proj.weight");
    assert_int_equal(q->offset, 1024 * 1024 * 2);
    assert_int_equal(q->box.start[0], 1024);
    q = want_of(&l, "model.layers.0.self_attn.o_proj.weight");
    assert_int_equal(q->box.start[0], 0);
    assert_int_equal(q->box.stop[0], 1024);
    assert_int_equal(q->box.start[1], 512);
    assert_int_equal(q->box.stop[1], 1024);
    q = want_of(&l, "model.layers.0.mlp.down_proj.weight");
    assert_int_equal(q->box.start[1], 1024);
    assert_int_equal(q->box.stop[1], 2048);
    wst_layout_release(&l);
    wst_model_release(&m);
}

static void test_model_engine_kv_replication(void **state)
{
    struct wst_model m;
    struct wst_layout l;
    char err[256] = "";
    uint32_t r;

    (void)state;
    assert_int_equal(wst_model_preset("tiny", 1, &m, err, sizeof(err)), WST_OK);
    for (r = 0; r < 8; r++) {
        const struct wst_want *k, *v;

        assert_int_equal(
            wst_model_engine_layout(&m, r, 8, &l, err, sizeof(err)), WST_OK);
        k = want_of(&l, "model.layers.0.self_attn.k_proj.weight");
        v = want_of(&l, "model.layers.0.self_attn.v_proj.weight");
        /* kv head r/2 on ranks 2h and 2h+1 */
        assert_int_equal(k->box.start[0], (r / 2) * 128);
        assert_int_equal(k->box.stop[0], (r / 2) * 128 + 128);
        assert_int_equal(v->box.start[0], (r / 2) * 128);
        assert_int_equal(k->offset, 128 * 1024 * 2);
        assert_int_equal(v->offset, 256 * 1024 * 2);
        assert_int_equal(
            region_named(&l, "model.layers.0.self_attn.qkv_proj.weight")->bytes,
            (128 + 2 * 128) * 1024 * 2);
        wst_layout_release(&l);
    }
    wst_model_release(&m);
}

static void test_model_engine_vocab_padding(void **state)
{
    struct wst_model m;
    struct wst_layout l;
    const struct wst_want *w;
    char err[256] = "";
    uint64_t total = 0;
    uint32_t r;

    (void)state;
    assert_int_equal(wst_model_preset("qwen3-30b-a3b", 1, &m, err, sizeof(err)),
                     WST_OK);
    for (r = 0; r < 8; r++) {
        assert_int_equal(
            wst_model_engine_layout(&m, r, 8, &l, err, sizeof(err)), WST_OK);
        /* 151936 rows padded to 152064 (multiple of 512): 19008 per rank */
        assert_int_equal(region_named(&l, "model.embed_tokens.weight")->bytes,
                         19008ull * 2048 * 2);
        assert_int_equal(region_named(&l, "lm_head.weight")->bytes,
                         19008ull * 2048 * 2);
        w = want_of(&l, "lm_head.weight");
        assert_int_equal(w->box.start[0], r * 19008);
        assert_int_equal(w->box.stop[0], r < 7 ? (r + 1) * 19008 : 151936);
        total += w->box.stop[0] - w->box.start[0];
        if (r == 7)
            assert_int_equal(w->box.stop[0] - w->box.start[0], 18880);
        w = want_of(&l, "model.layers.0.mlp.gate.weight");
        assert_int_equal(w->box.stop[0], 128);
        assert_int_equal(w->box.stop[1], 2048);
        assert_int_equal(
            region_named(&l, "model.layers.0.self_attn.qkv_proj.weight")->bytes,
            (512 + 128 + 128) * 2048 * 2);
        wst_layout_release(&l);
    }
    assert_int_equal(total, 151936);
    wst_model_release(&m);
}

static void test_model_engine_refuses_bad_tp(void **state)
{
    struct wst_model m;
    struct wst_layout l;
    char err[256] = "";

    (void)state;
    assert_int_equal(wst_model_preset("tiny", 1, &m, err, sizeof(err)), WST_OK);
    memset(&l, 0, sizeof(l));
    assert_int_equal(wst_model_engine_layout(&m, 0, 3, &l, err, sizeof(err)),
                     WST_ERR_UNSUPPORTED_LAYOUT);
    assert_non_null(strstr(err, "tp=3 does not divide query heads 8"));
    assert_null(l.regions);
    assert_int_equal(wst_model_engine_layout(&m, 0, 16, &l, err, sizeof(err)),
                     WST_ERR_UNSUPPORTED_LAYOUT);
    assert_non_null(strstr(err, "tp=16"));
    assert_int_equal(wst_model_engine_layout(&m, 2, 2, &l, err, sizeof(err)),
                     WST_ERR_INVALID);
    m.kv_heads = 3; /* tp 2 neither divides nor is a multiple of 3 */
    assert_int_equal(wst_model_engine_layout(&m, 0, 2, &l, err, sizeof(err)),
                     WST_ERR_UNSUPPORTED_LAYOUT);
    assert_non_null(strstr(err, "kv heads"));
    m.kv_heads = 4;
    m.inter = 2050;
    assert_int_equal(wst_model_engine_layout(&m, 0, 4, &l, err, sizeof(err)),
                     WST_ERR_UNSUPPORTED_LAYOUT);
    assert_non_null(strstr(err, "intermediate size 2050"));
    wst_model_release(&m);
}

/* ---- trainer shards ----------------------------------------------------- */

static void test_model_trainer_uneven_split(void **state)
{
    struct wst_tensor_desc t[2];
    struct wst_model m;
    struct wst_have *h;
    size_t n;
    uint32_t r;
    static const uint64_t rows[4][2] = {{0, 2}, {2, 4}, {4, 5}, {5, 5}};

    (void)state;
    memset(&m, 0, sizeof(m));
    memset(t, 0, sizeof(t));
    snprintf(t[0].name, WST_NAME_MAX, "w");
    t[0].dtype = WST_DTYPE_F32;
    t[0].ndim = 2;
    t[0].shape[0] = 5;
    t[0].shape[1] = 3;
    snprintf(t[1].name, WST_NAME_MAX, "norm");
    t[1].dtype = WST_DTYPE_BF16;
    t[1].ndim = 1;
    t[1].shape[0] = 5;
    m.n_tensors = 2;
    m.tensors = t;
    for (r = 0; r < 4; r++) {
        assert_int_equal(wst_model_trainer_shards(&m, r, 4, &h, &n), WST_OK);
        assert_int_equal(n, 2);
        assert_int_equal(h[0].flat, 0);
        assert_int_equal(h[0].box.ndim, 2);
        assert_int_equal(h[0].box.start[0], rows[r][0]);
        assert_int_equal(h[0].box.stop[0], rows[r][1]);
        assert_int_equal(h[0].box.start[1], 0);
        assert_int_equal(h[0].box.stop[1], 3);
        assert_int_equal(wst_model_shard_bytes(&h[0]),
                         (rows[r][1] - rows[r][0]) * 3 * 4);
        assert_int_equal(h[1].flat, 1);
        assert_int_equal(h[1].box.ndim, 1);
        assert_int_equal(h[1].box.start[0], rows[r][0]);
        assert_int_equal(h[1].box.stop[0], rows[r][1]);
        assert_int_equal(wst_have_check(&h[0]), WST_OK);
        assert_int_equal(wst_have_check(&h[1]), WST_OK);
        free(h);
    }
    assert_int_equal(wst_model_trainer_shards(&m, 4, 4, &h, &n),
                     WST_ERR_INVALID);
}

/* The union of every rank's trainer shards covers each element of every
 * tensor exactly once; with 'check_haves', each shard is also a valid
 * have entry of its tensor (flat for 1-D tensors). */
static void check_trainer_union(struct wst_model *m, uint32_t world,
                                int check_haves)
{
    uint8_t **counts = calloc(m->n_tensors, sizeof(*counts));
    struct wst_have *h;
    size_t n, t;
    uint64_t e;

    assert_non_null(counts);
    for (t = 0; t < m->n_tensors; t++) {
        counts[t] = calloc(elems_of(&m->tensors[t]), 1);
        assert_non_null(counts[t]);
    }
    for (uint32_t r = 0; r < world; r++) {
        assert_int_equal(wst_model_trainer_shards(m, r, world, &h, &n), WST_OK);
        assert_int_equal(n, m->n_tensors);
        for (t = 0; t < n; t++) {
            if (check_haves) {
                assert_string_equal(h[t].tensor.name, m->tensors[t].name);
                assert_int_equal(h[t].flat, m->tensors[t].ndim == 1);
                assert_int_equal(wst_have_check(&h[t]), WST_OK);
            }
            count_box(&m->tensors[t], &h[t].box, h[t].flat, counts[t]);
        }
        free(h);
    }
    for (t = 0; t < m->n_tensors; t++) {
        for (e = 0; e < elems_of(&m->tensors[t]); e++)
            if (counts[t][e] != 1)
                fail_msg("%s element %llu covered %u times", m->tensors[t].name,
                         (unsigned long long)e, counts[t][e]);
        free(counts[t]);
    }
    free(counts);
}

static void test_model_trainer_union_exact(void **state)
{
    struct wst_model m;
    char err[256] = "";

    (void)state;
    assert_int_equal(wst_model_preset("tiny", 1, &m, err, sizeof(err)), WST_OK);
    check_trainer_union(&m, 3, 1);
    wst_model_release(&m);
}

/* ---- data --------------------------------------------------------------- */

/* A shard's fill equals the matching slice of a whole-tensor fill, for a
 * dim-0 box and for a flat range; data depends on seed, version and name. */
static void test_model_fill_shard_matches_whole(void **state)
{
    struct wst_model m;
    struct wst_have *h, whole;
    unsigned char *full, *part;
    char err[256] = "";
    size_t n, t;
    uint64_t bytes;

    (void)state;
    assert_int_equal(wst_model_preset("tiny", 1, &m, err, sizeof(err)), WST_OK);
    assert_int_equal(wst_model_trainer_shards(&m, 1, 3, &h, &n), WST_OK);
    for (t = 0; t < n; t++) {
        const struct wst_tensor_desc *d = &m.tensors[t];
        uint64_t row = d->ndim > 1 ? d->shape[1] * 2 : 2;

        memset(&whole, 0, sizeof(whole));
        whole.tensor = *d;
        whole.box.ndim = d->ndim;
        memcpy(whole.box.stop, d->shape, sizeof(d->shape));
        full = malloc(elems_of(d) * 2);
        bytes = wst_model_shard_bytes(&h[t]);
        part = malloc(bytes ? bytes : 1);
        assert_non_null(full);
        assert_non_null(part);
        wst_model_fill_shard(&whole, 42, 7, full);
        wst_model_fill_shard(&h[t], 42, 7, part);
        assert_memory_equal(part, full + h[t].box.start[0] * row, bytes);
        free(part);
        free(full);
    }
    free(h);
    wst_model_release(&m);
}

static void test_model_fill_then_verify(void **state)
{
    struct wst_model m;
    struct wst_layout l;
    unsigned char *shm;
    const struct wst_layout_region *qkv;
    char err[512] = "";
    uint64_t checked = 0, expect = 0, pos;
    size_t i;

    (void)state;
    assert_int_equal(wst_model_preset("tiny", 1, &m, err, sizeof(err)), WST_OK);
    assert_int_equal(wst_model_engine_layout(&m, 1, 2, &l, err, sizeof(err)),
                     WST_OK);
    shm = calloc(l.shm_bytes, 1);
    assert_non_null(shm);
    simulate_copies(&l, shm, 99, 3);
    for (i = 0; i < l.n_wants; i++)
        expect += wst_box_elems(&l.wants[i].box) * 2;
    assert_int_equal(
        wst_model_verify(&l, shm, 99, 3, &checked, err, sizeof(err)), WST_OK);
    assert_int_equal(checked, expect);

    /* one flipped byte in the k rows of the fused qkv region */
    qkv = region_named(&l, "model.layers.0.self_attn.qkv_proj.weight");
    pos = qkv->offset + 512 * 1024 * 2 + 2 * 1024 * 2 + 2 * 5 + 1;
    shm[pos] ^= 0x10;
    assert_int_equal(wst_model_verify(&l, shm, 99, 3, NULL, err, sizeof(err)),
                     WST_ERR_INTEGRITY);
    if (strstr(err, "tensor model.layers.0.self_attn.k_proj.weight element "
                    "264197 ") == NULL)
        fail_msg("unexpected message: %s", err);
    shm[pos] ^= 0x10;
    assert_int_equal(wst_model_verify(&l, shm, 99, 3, NULL, err, sizeof(err)),
                     WST_OK);

    /* another version (or seed) of the same weights does not verify */
    assert_int_equal(wst_model_verify(&l, shm, 99, 4, NULL, err, sizeof(err)),
                     WST_ERR_INTEGRITY);
    assert_non_null(strstr(err, "expected 0x"));
    assert_int_equal(wst_model_verify(&l, shm, 98, 3, NULL, err, sizeof(err)),
                     WST_ERR_INTEGRITY);
    free(shm);
    wst_layout_release(&l);
    wst_model_release(&m);
}

/* Verify honours row_pitch and region offsets of a hand-made layout. */
static void test_model_verify_row_pitch(void **state)
{
    struct wst_layout_region reg[2];
    struct wst_want w;
    struct wst_layout l;
    unsigned char shm[512];
    char err[256] = "";
    uint64_t checked = 0;

    (void)state;
    memset(reg, 0, sizeof(reg));
    memset(&w, 0, sizeof(w));
    memset(&l, 0, sizeof(l));
    memset(shm, 0xee, sizeof(shm));
    snprintf(reg[0].name, WST_NAME_MAX, "pad");
    reg[0].bytes = 64;
    snprintf(reg[1].name, WST_NAME_MAX, "r");
    reg[1].offset = 64;
    reg[1].bytes = 256;
    snprintf(w.tensor.name, WST_NAME_MAX, "t");
    w.tensor.dtype = WST_DTYPE_F32;
    w.tensor.ndim = 2;
    w.tensor.shape[0] = 4;
    w.tensor.shape[1] = 8;
    w.box.ndim = 2;
    w.box.start[0] = 1;
    w.box.stop[0] = 3;
    w.box.start[1] = 2;
    w.box.stop[1] = 6;
    w.region = 1;
    w.offset = 8;
    w.row_pitch = 32;
    l.n_regions = 2;
    l.regions = reg;
    l.n_wants = 1;
    l.wants = &w;
    l.shm_bytes = sizeof(shm);
    simulate_copies(&l, shm, 1, 1);
    assert_int_equal(
        wst_model_verify(&l, shm, 1, 1, &checked, err, sizeof(err)), WST_OK);
    assert_int_equal(checked, 2 * 4 * 4);
    /* the gap between rows is not wanted: scribbling there is fine */
    shm[64 + 8 + 16] ^= 1;
    assert_int_equal(wst_model_verify(&l, shm, 1, 1, NULL, err, sizeof(err)),
                     WST_OK);
    /* the second row's last element is */
    shm[64 + 8 + 32 + 12] ^= 1;
    assert_int_equal(wst_model_verify(&l, shm, 1, 1, NULL, err, sizeof(err)),
                     WST_ERR_INTEGRITY);
    assert_non_null(strstr(err, "tensor t element 21 "));
}

/* ---- MoE ---------------------------------------------------------------- */

static void test_model_engine_coverage_moe(void **state)
{
    (void)state;
    check_engine_coverage("tiny-moe", 2, 1);
    check_engine_coverage("tiny-moe", 2, 2);
    /* tp 8 > kv heads 4, and no dense inter for tp to divide */
    check_engine_coverage("tiny-moe", 1, 8);
}

/* The two regions and the one entry of each MoE layer at tp=2, for both
 * loaders: same sizes, the loader's name, no wants for expert tensors. */
static void test_model_engine_moe_layout(void **state)
{
    static const char *const loaders[] = {NULL, "checkpoint", "trtllm-bf16"};
    struct wst_moe_options opt;
    struct wst_model m;
    struct wst_layout l;
    const struct wst_layout_experts *x;
    const struct wst_layout_region *w13, *w2, *router;
    char err[256] = "";
    size_t k, i;
    uint32_t r;

    (void)state;
    assert_int_equal(wst_model_preset("tiny-moe", 2, &m, err, sizeof(err)),
                     WST_OK);
    for (k = 0; k < 3; k++) {
        for (r = 0; r < 2; r++) {
            memset(&opt, 0, sizeof(opt));
            opt.loader = loaders[k];
            assert_int_equal(wst_model_engine_layout_moe(&m, r, 2, &opt, &l,
                                                         err, sizeof(err)),
                             WST_OK);
            assert_int_equal(l.n_experts, 2);
            x = experts_of(&l, 1);
            w13 = region_named(&l, "model.layers.1.mlp.experts.w13_weight");
            w2 = region_named(&l, "model.layers.1.mlp.experts.w2_weight");
            router = region_named(&l, "model.layers.1.mlp.gate.weight");
            /* L = 8 experts: w13 [8, 512, 1024], w2 [8, 1024, 256] bf16 */
            assert_int_equal(w13->bytes, 8ull * 512 * 1024 * 2);
            assert_int_equal(w2->bytes, 8ull * 1024 * 256 * 2);
            assert_true(w13->offset > router->offset);
            assert_true(w2->offset >= w13->offset + w13->bytes);
            assert_ptr_equal(&l.regions[x->w13_region], w13);
            assert_ptr_equal(&l.regions[x->w2_region], w2);
            assert_int_equal(x->w13_offset, 0);
            assert_int_equal(x->w2_offset, 0);
            assert_string_equal(x->loader,
                                loaders[k] ? loaders[k] : "checkpoint");
            assert_int_equal(x->dtype, WST_DTYPE_BF16);
            assert_int_equal(x->n_experts, 16);
            assert_int_equal(x->ep_rank, r);
            assert_int_equal(x->ep_size, 2);
            assert_int_equal(x->hidden, 1024);
            assert_int_equal(x->inter, 256);
            assert_null(x->expert_ids);
            assert_int_equal(x->n_expert_ids, 0);
            assert_int_equal(x->inter_tp_size, 0);
            /* the router stays a replicated want; no dense MLP regions */
            assert_int_equal(
                want_of(&l, "model.layers.1.mlp.gate.weight")->box.stop[0], 16);
            for (i = 0; i < l.n_wants; i++)
                assert_false(is_grouped_expert(&l.wants[i].tensor));
            for (i = 0; i < l.n_regions; i++)
                assert_null(strstr(l.regions[i].name, "gate_up_proj"));
            wst_layout_release(&l);
        }
    }
    /* the default entry point is the checkpoint loader */
    assert_int_equal(wst_model_engine_layout(&m, 0, 2, &l, err, sizeof(err)),
                     WST_OK);
    assert_string_equal(experts_of(&l, 0)->loader, "checkpoint");
    wst_layout_release(&l);
    wst_model_release(&m);
}

/* Layouts the receiver refuses are still produced, described faithfully. */
static void test_model_engine_moe_refused_shapes(void **state)
{
    struct wst_moe_options opt;
    struct wst_model m;
    struct wst_layout l;
    const struct wst_layout_experts *x;
    char err[256] = "";
    uint32_t k;

    (void)state;
    assert_int_equal(wst_model_preset("tiny-moe", 1, &m, err, sizeof(err)),
                     WST_OK);

    memset(&opt, 0, sizeof(opt));
    opt.round_robin = 1;
    assert_int_equal(
        wst_model_engine_layout_moe(&m, 1, 4, &opt, &l, err, sizeof(err)),
        WST_OK);
    x = experts_of(&l, 0);
    assert_int_equal(x->ep_rank, 1);
    assert_int_equal(x->ep_size, 4);
    assert_int_equal(x->n_expert_ids, 4);
    assert_non_null(x->expert_ids);
    for (k = 0; k < 4; k++)
        assert_int_equal(x->expert_ids[k], 1 + 4 * k);
    assert_int_equal(l.regions[x->w13_region].bytes, 4ull * 512 * 1024 * 2);
    check_file_roundtrip(&l);
    wst_layout_release(&l);

    memset(&opt, 0, sizeof(opt));
    opt.shard_inter = 1;
    assert_int_equal(
        wst_model_engine_layout_moe(&m, 3, 4, &opt, &l, err, sizeof(err)),
        WST_OK);
    x = experts_of(&l, 0);
    assert_int_equal(x->ep_rank, 0);
    assert_int_equal(x->ep_size, 1);
    assert_int_equal(x->inter_tp_rank, 3);
    assert_int_equal(x->inter_tp_size, 4);
    assert_int_equal(x->inter, 256);
    assert_null(x->expert_ids);
    /* all 16 experts, each of I/4 = 64 rows of gate and up */
    assert_int_equal(l.regions[x->w13_region].bytes, 16ull * 128 * 1024 * 2);
    assert_int_equal(l.regions[x->w2_region].bytes, 16ull * 1024 * 64 * 2);
    check_file_roundtrip(&l);
    wst_layout_release(&l);

    /* E = 10 over tp 4: the entry says so, regions hold ceil(10/4) = 3 */
    m.n_experts = 10;
    assert_int_equal(wst_model_engine_layout(&m, 3, 4, &l, err, sizeof(err)),
                     WST_OK);
    x = experts_of(&l, 0);
    assert_int_equal(x->n_experts, 10);
    assert_int_equal(x->ep_rank, 3);
    assert_int_equal(x->ep_size, 4);
    assert_int_equal(l.regions[x->w13_region].bytes, 3ull * 512 * 1024 * 2);
    assert_int_equal(l.regions[x->w2_region].bytes, 3ull * 1024 * 256 * 2);
    wst_layout_release(&l);
    /* round-robin ids stay below E: rank 3 holds 3 and 7 */
    memset(&opt, 0, sizeof(opt));
    opt.round_robin = 1;
    assert_int_equal(
        wst_model_engine_layout_moe(&m, 3, 4, &opt, &l, err, sizeof(err)),
        WST_OK);
    x = experts_of(&l, 0);
    assert_int_equal(x->n_expert_ids, 2);
    assert_int_equal(x->expert_ids[1], 7);
    wst_layout_release(&l);
    m.n_experts = 16;

    /* bad options change nothing */
    memset(&l, 0, sizeof(l));
    memset(&opt, 0, sizeof(opt));
    opt.loader = "mystery";
    assert_int_equal(
        wst_model_engine_layout_moe(&m, 0, 2, &opt, &l, err, sizeof(err)),
        WST_ERR_INVALID);
    assert_non_null(strstr(err, "mystery"));
    opt.loader = NULL;
    opt.round_robin = opt.shard_inter = 1;
    assert_int_equal(
        wst_model_engine_layout_moe(&m, 0, 2, &opt, &l, err, sizeof(err)),
        WST_ERR_INVALID);
    assert_null(l.regions);
    assert_null(l.experts);
    /* inter == 0 is no dense MLP, not something tp must divide; heads
     * still are */
    assert_int_equal(wst_model_engine_layout(&m, 0, 8, &l, err, sizeof(err)),
                     WST_OK);
    wst_layout_release(&l);
    assert_int_equal(wst_model_engine_layout(&m, 0, 3, &l, err, sizeof(err)),
                     WST_ERR_UNSUPPORTED_LAYOUT);
    wst_model_release(&m);
}

/* Trainer EP: grouped tensors split on the expert dim, the rest whole. */
static void test_model_trainer_expert_shards(void **state)
{
    struct wst_model m;
    struct wst_have *h;
    char err[256] = "";
    size_t n, t;
    uint32_t r;

    (void)state;
    assert_int_equal(wst_model_preset("tiny-moe", 1, &m, err, sizeof(err)),
                     WST_OK);
    for (r = 0; r < 4; r++) {
        assert_int_equal(wst_model_trainer_shards(&m, r, 4, &h, &n), WST_OK);
        t = tensor_index(&m, "model.layers.0.mlp.experts.down_proj.weight");
        assert_int_equal(h[t].flat, 0);
        assert_int_equal(h[t].box.ndim, 3);
        assert_int_equal(h[t].box.start[0], 4 * r);
        assert_int_equal(h[t].box.stop[0], 4 * r + 4);
        assert_int_equal(h[t].box.start[1], 0);
        assert_int_equal(h[t].box.stop[1], 1024);
        assert_int_equal(h[t].box.start[2], 0);
        assert_int_equal(h[t].box.stop[2], 256);
        assert_int_equal(wst_model_shard_bytes(&h[t]), 4ull * 1024 * 256 * 2);
        assert_int_equal(wst_have_check(&h[t]), WST_OK);
        t = tensor_index(&m, "model.layers.0.mlp.experts.gate_proj.weight");
        assert_int_equal(h[t].box.stop[1], 256);
        assert_int_equal(h[t].box.stop[2], 1024);
        free(h);
    }
    /* uneven: 16 experts over 5 ranks is 4, 4, 4, 4, 0; over 3 is 6, 6, 4;
     * either way the union is exact */
    assert_int_equal(wst_model_trainer_shards(&m, 4, 5, &h, &n), WST_OK);
    t = tensor_index(&m, "model.layers.0.mlp.experts.up_proj.weight");
    assert_int_equal(wst_model_shard_bytes(&h[t]), 0);
    free(h);
    check_trainer_union(&m, 3, 0);
    check_trainer_union(&m, 5, 0);
    wst_model_release(&m);
}

/* 3-D boxes fill as dense row-major boxes and flat shards of 3-D tensors
 * as flat ranges (across expert boundaries), both matching a whole fill. */
static void test_model_fill_shard_3d(void **state)
{
    struct wst_model m;
    struct wst_have h;
    const struct wst_tensor_desc *t;
    unsigned char *full, *part, *p;
    char err[256] = "";
    uint64_t e, r, per = 256 * 1024;

    (void)state;
    assert_int_equal(wst_model_preset("tiny-moe", 1, &m, err, sizeof(err)),
                     WST_OK);
    t = &m.tensors[tensor_index(&m,
                                "model.layers.0.mlp.experts.gate_proj.weight")];
    full = fill_whole(t, 5, 2);
    memset(&h, 0, sizeof(h));
    h.tensor = *t;
    h.mem = WST_MEM_HOST;
    h.box.ndim = 3;
    h.box.start[0] = 3;
    h.box.stop[0] = 6;
    h.box.start[1] = 10;
    h.box.stop[1] = 20;
    h.box.start[2] = 100;
    h.box.stop[2] = 164;
    assert_int_equal(wst_model_shard_bytes(&h), 3 * 10 * 64 * 2);
    part = malloc(wst_model_shard_bytes(&h));
    assert_non_null(part);
    wst_model_fill_shard(&h, 5, 2, part);
    p = part;
    for (e = 3; e < 6; e++)
        for (r = 10; r < 20; r++, p += 64 * 2)
            assert_memory_equal(p, full + ((e * 256 + r) * 1024 + 100) * 2,
                                64 * 2);
    free(part);

    /* flat: the last 1000 elements of expert 2 and the first 24 of 3 */
    memset(&h.box, 0, sizeof(h.box));
    h.flat = 1;
    h.box.ndim = 1;
    h.box.start[0] = 3 * per - 1000;
    h.box.stop[0] = 3 * per + 24;
    part = malloc(wst_model_shard_bytes(&h));
    assert_non_null(part);
    wst_model_fill_shard(&h, 5, 2, part);
    assert_memory_equal(part, full + (3 * per - 1000) * 2, 1024 * 2);
    free(part);
    free(full);
    wst_model_release(&m);
}

/* The high byte of every grouped expert element is (e + 37*l + 101*proj)
 * & 0xff; low bytes still follow the generator (they change with the
 * version); dense tensors carry no tag. */
static void test_model_expert_tag(void **state)
{
    static const char *const projs[3] = {"gate_proj", "up_proj", "down_proj"};
    struct wst_model m;
    const struct wst_tensor_desc *t;
    unsigned char *v1, *v2;
    char err[256] = "", name[WST_NAME_MAX];
    uint64_t k, n, per, same = 0, tagged = 0;
    uint32_t l;
    int p;

    (void)state;
    assert_int_equal(wst_model_preset("tiny-moe", 3, &m, err, sizeof(err)),
                     WST_OK);
    for (l = 0; l < 3; l += 2) {
        for (p = 0; p < 3; p++) {
            snprintf(name, sizeof(name),
                     "model.layers.%u.mlp.experts.%s.weight", l, projs[p]);
            t = &m.tensors[tensor_index(&m, name)];
            n = elems_of(t);
            per = n / 16;
            v1 = fill_whole(t, 11, 1);
            v2 = fill_whole(t, 11, 2);
            for (k = 0; k < n; k++) {
                unsigned tag = (unsigned)((k / per + 37 * l + 101 * p) & 0xff);

                if (v1[2 * k + 1] != tag || v2[2 * k + 1] != tag)
                    fail_msg("%s element %llu: high byte 0x%02x, want 0x%02x",
                             name, (unsigned long long)k, v1[2 * k + 1], tag);
                same += v1[2 * k] == v2[2 * k];
            }
            free(v1);
            free(v2);
        }
    }
    /* versions differ in about 255 of 256 low bytes */
    assert_true(same < 6 * 16 * 256 * 1024 / 128);
    /* the router is a dense tensor: its high bytes are not one value */
    t = &m.tensors[tensor_index(&m, "model.layers.0.mlp.gate.weight")];
    v1 = fill_whole(t, 11, 1);
    for (k = 1; k < elems_of(t); k++)
        tagged += v1[2 * k + 1] == v1[1];
    assert_true(tagged < elems_of(t) / 16);
    free(v1);
    wst_model_release(&m);
}

/* The live buffers of a layout's experts entries, written the way each
 * loader must write them; the sources are whole-tensor fills. */
static void write_experts(const struct wst_layout *l, const struct wst_model *m,
                          unsigned char *shm, uint64_t seed, uint64_t version,
                          int use_trtllm_kernel)
{
    const struct wst_repack_loader *trt = wst_repack_loader_trtllm_bf16();
    static const char *const projs[3] = {"gate_proj", "up_proj", "down_proj"};
    unsigned char *src[3];
    char name[WST_NAME_MAX];
    size_t k;
    int p;

    for (k = 0; k < l->n_experts; k++) {
        const struct wst_layout_experts *x = &l->experts[k];
        uint64_t h = x->hidden, i = x->inter, L = x->n_experts / x->ep_size;
        uint64_t e, g, r, c, proj = i * h;
        uint16_t *w13 = (uint16_t *)(shm + l->regions[x->w13_region].offset +
                                     x->w13_offset);
        uint16_t *w2 =
            (uint16_t *)(shm + l->regions[x->w2_region].offset + x->w2_offset);
        const uint16_t *gate, *up, *down;

        for (p = 0; p < 3; p++) {
            snprintf(name, sizeof(name),
                     "model.layers.%u.mlp.experts.%s.weight", x->layer,
                     projs[p]);
            src[p] =
                fill_whole(&m->tensors[tensor_index(m, name)], seed, version);
        }
        for (e = 0; e < L; e++) {
            g = x->ep_rank * L + e;
            gate = (const uint16_t *)src[0] + g * proj;
            up = (const uint16_t *)src[1] + g * proj;
            down = (const uint16_t *)src[2] + g * proj;
            if (use_trtllm_kernel) {
                struct wst_expert_shape shape = {(uint32_t)L, x->hidden,
                                                 x->inter, x->dtype};

                assert_int_equal(trt->load_expert(trt, &shape, (uint32_t)e,
                                                  gate, up, down, w13, w2),
                                 WST_OK);
                continue;
            }
            /* checkpoint: w13[e] = [gate; up], w2[e] = down */
            for (r = 0; r < i; r++)
                for (c = 0; c < h; c++) {
                    w13[(e * 2 * i + r) * h + c] = gate[r * h + c];
                    w13[(e * 2 * i + i + r) * h + c] = up[r * h + c];
                }
            for (r = 0; r < h; r++)
                for (c = 0; c < i; c++)
                    w2[(e * h + r) * i + c] = down[r * i + c];
        }
        for (p = 0; p < 3; p++)
            free(src[p]);
    }
}

static uint64_t wanted_bytes(const struct wst_layout *l)
{
    uint64_t n = 0;
    size_t i;

    for (i = 0; i < l->n_wants; i++)
        n += wst_box_elems(&l->wants[i].box) * 2;
    return n;
}

static void expect_err(const char *err, const char *part)
{
    if (strstr(err, part) == NULL)
        fail_msg("message lacks \"%s\": %s", part, err);
}

/* Rank 0 of 2, checkpoint loader: a good refit verifies; one flipped byte,
 * one expert replayed under another's slot and one layer's down_proj in
 * another layer all fail, each named. */
static void test_model_verify_experts_checkpoint(void **state)
{
    struct wst_model m;
    struct wst_layout l;
    const struct wst_layout_experts *x0, *x1;
    unsigned char *shm, *w13, *w2, *w2_1;
    char err[1024] = "";
    uint64_t checked = 0, slot = 512ull * 1024 * 2, pos;

    (void)state;
    assert_int_equal(wst_model_preset("tiny-moe", 2, &m, err, sizeof(err)),
                     WST_OK);
    assert_int_equal(wst_model_engine_layout(&m, 0, 2, &l, err, sizeof(err)),
                     WST_OK);
    shm = calloc(l.shm_bytes, 1);
    assert_non_null(shm);
    simulate_copies(&l, shm, 7, 3);
    write_experts(&l, &m, shm, 7, 3, 0);
    assert_int_equal(
        wst_model_verify(&l, shm, 7, 3, &checked, err, sizeof(err)), WST_OK);
    /* 2 layers of 8 local experts of 3 [256, 1024] projections */
    assert_int_equal(checked, wanted_bytes(&l) + 2ull * 8 * 3 * 256 * 1024 * 2);
    /* another version of the experts (same wants) does not verify */
    write_experts(&l, &m, shm, 7, 4, 0);
    assert_int_equal(wst_model_verify(&l, shm, 7, 3, NULL, err, sizeof(err)),
                     WST_ERR_INTEGRITY);
    expect_err(err, "local expert 0 (global 0) gate_proj row 0 col 0");
    expect_err(err, "expert 0 gate_proj of layer 0 by its tag");
    write_experts(&l, &m, shm, 7, 3, 0);

    x0 = experts_of(&l, 0);
    x1 = experts_of(&l, 1);
    w13 = shm + l.regions[x0->w13_region].offset;
    w2 = shm + l.regions[x0->w2_region].offset;
    w2_1 = shm + l.regions[x1->w2_region].offset;

    /* a flipped low byte: local expert 1, up row 3, col 7 */
    pos = slot + ((256 + 3) * 1024 + 7) * 2;
    w13[pos] ^= 0x01;
    assert_int_equal(wst_model_verify(&l, shm, 7, 3, NULL, err, sizeof(err)),
                     WST_ERR_INTEGRITY);
    expect_err(err, "experts of layer 0 (loader checkpoint): live w13 "
                    "(region \"model.layers.0.mlp.experts.w13_weight\")");
    expect_err(err, "local expert 1 (global 1) up_proj row 3 col 7");
    expect_err(err, "expert 1 up_proj of layer 0 by its tag");
    w13[pos] ^= 0x01;
    assert_int_equal(wst_model_verify(&l, shm, 7, 3, NULL, err, sizeof(err)),
                     WST_OK);

    /* expert 1 replayed into expert 0's slot */
    memcpy(w13, w13 + slot, slot);
    assert_int_equal(wst_model_verify(&l, shm, 7, 3, NULL, err, sizeof(err)),
                     WST_ERR_INTEGRITY);
    expect_err(err, "local expert 0 (global 0) gate_proj row 0 col 0");
    expect_err(err, "got looks like expert 1 gate_proj of layer 0 (its value "
                    "at this position)");
    write_experts(&l, &m, shm, 7, 3, 0);

    /* layer 1's down_proj of expert 5 replayed into layer 0 */
    memcpy(w2 + 5 * slot / 2, w2_1 + 5 * slot / 2, slot / 2);
    assert_int_equal(wst_model_verify(&l, shm, 7, 3, NULL, err, sizeof(err)),
                     WST_ERR_INTEGRITY);
    expect_err(err, "live w2");
    expect_err(err, "local expert 5 (global 5) down_proj row 0 col 0");
    expect_err(err, "expert 5 down_proj of layer 1 (its value");
    free(shm);
    wst_layout_release(&l);
    wst_model_release(&m);
}

/* Rank 1 of 2 (global experts 8..15), trtllm-bf16: the kernels' CPU loader
 * and the verifier's own closed form agree; the checkpoint layout of the
 * same bytes, or one corrupted byte, does not pass. */
static void test_model_verify_experts_trtllm(void **state)
{
    struct wst_moe_options opt = {"trtllm-bf16", 0, 0};
    struct wst_model m;
    struct wst_layout l;
    const struct wst_layout_experts *x;
    unsigned char *shm, *w2;
    char err[1024] = "";
    uint64_t checked = 0;

    (void)state;
    assert_int_equal(wst_model_preset("tiny-moe", 2, &m, err, sizeof(err)),
                     WST_OK);
    assert_int_equal(
        wst_model_engine_layout_moe(&m, 1, 2, &opt, &l, err, sizeof(err)),
        WST_OK);
    shm = calloc(l.shm_bytes, 1);
    assert_non_null(shm);
    simulate_copies(&l, shm, 9, 1);
    write_experts(&l, &m, shm, 9, 1, 1);
    assert_int_equal(
        wst_model_verify(&l, shm, 9, 1, &checked, err, sizeof(err)), WST_OK);
    assert_int_equal(checked, wanted_bytes(&l) + 2ull * 8 * 3 * 256 * 1024 * 2);

    /* one byte of W2 [8, 4, 1024, 64]: expert 2, kb 1, n 5, j 3 holds
     * down[sigma(5) = 20][64 + 3] of global expert 10 */
    x = experts_of(&l, 1);
    w2 = shm + l.regions[x->w2_region].offset;
    w2[(((2 * 4 + 1) * 1024 + 5) * 64 + 3) * 2 + 1] ^= 0x80;
    assert_int_equal(wst_model_verify(&l, shm, 9, 1, NULL, err, sizeof(err)),
                     WST_ERR_INTEGRITY);
    expect_err(err, "experts of layer 1 (loader trtllm-bf16): live w2");
    expect_err(err, "local expert 2 (global 10) down_proj row 20 col 67");
    w2[(((2 * 4 + 1) * 1024 + 5) * 64 + 3) * 2 + 1] ^= 0x80;
    assert_int_equal(wst_model_verify(&l, shm, 9, 1, NULL, err, sizeof(err)),
                     WST_OK);

    /* the checkpoint layout is not the trtllm one */
    write_experts(&l, &m, shm, 9, 1, 0);
    assert_int_equal(wst_model_verify(&l, shm, 9, 1, NULL, err, sizeof(err)),
                     WST_ERR_INTEGRITY);
    expect_err(err, "local expert 0 (global 8)");
    free(shm);
    wst_layout_release(&l);
    wst_model_release(&m);
}

/* Entries the receiver refuses are never written, so never checked; an
 * unknown loader or an entry running past its region is an error. */
static void test_model_verify_experts_skips_and_refuses(void **state)
{
    struct wst_moe_options opt;
    struct wst_model m;
    struct wst_layout l;
    unsigned char *shm;
    char err[512] = "";
    uint64_t checked = 0;
    int k;

    (void)state;
    assert_int_equal(wst_model_preset("tiny-moe", 1, &m, err, sizeof(err)),
                     WST_OK);
    for (k = 0; k < 2; k++) {
        memset(&opt, 0, sizeof(opt));
        opt.round_robin = k == 0;
        opt.shard_inter = k == 1;
        assert_int_equal(
            wst_model_engine_layout_moe(&m, 0, 2, &opt, &l, err, sizeof(err)),
            WST_OK);
        shm = calloc(l.shm_bytes, 1);
        assert_non_null(shm);
        simulate_copies(&l, shm, 1, 1);
        assert_int_equal(
            wst_model_verify(&l, shm, 1, 1, &checked, err, sizeof(err)),
            WST_OK);
        assert_int_equal(checked, wanted_bytes(&l));
        free(shm);
        wst_layout_release(&l);
    }

    assert_int_equal(wst_model_engine_layout(&m, 0, 2, &l, err, sizeof(err)),
                     WST_OK);
    shm = calloc(l.shm_bytes, 1);
    assert_non_null(shm);
    simulate_copies(&l, shm, 1, 1);
    write_experts(&l, &m, shm, 1, 1, 0);
    /* a linear expert_ids map is what the receiver accepts: checked */
    l.experts[0].expert_ids = malloc(8 * sizeof(uint32_t));
    assert_non_null(l.experts[0].expert_ids);
    l.experts[0].n_expert_ids = 8;
    for (k = 0; k < 8; k++)
        l.experts[0].expert_ids[k] = (uint32_t)k;
    assert_int_equal(
        wst_model_verify(&l, shm, 1, 1, &checked, err, sizeof(err)), WST_OK);
    assert_int_equal(checked, wanted_bytes(&l) + 8ull * 3 * 256 * 1024 * 2);
    snprintf(l.experts[0].loader, sizeof(l.experts[0].loader), "custom");
    assert_int_equal(wst_model_verify(&l, shm, 1, 1, NULL, err, sizeof(err)),
                     WST_ERR_INVALID);
    expect_err(err, "loader \"custom\"");
    snprintf(l.experts[0].loader, sizeof(l.experts[0].loader), "checkpoint");
    l.experts[0].w2_offset = 64;
    assert_int_equal(wst_model_verify(&l, shm, 1, 1, NULL, err, sizeof(err)),
                     WST_ERR_INVALID);
    expect_err(err, "runs past its region");
    free(shm);
    wst_layout_release(&l);
    wst_model_release(&m);
}

/* Not a benchmark, a floor: fill must run at well over 100 MB/s. */
static void test_model_fill_speed(void **state)
{
    struct wst_have h;
    unsigned char *buf;
    struct timespec a, b;
    double s;
    uint64_t bytes;

    (void)state;
    if (getenv("WST_SKIP_SPEED") != NULL)
        skip();
    memset(&h, 0, sizeof(h));
    snprintf(h.tensor.name, WST_NAME_MAX, "big");
    h.tensor.dtype = WST_DTYPE_BF16;
    h.tensor.ndim = 2;
    h.tensor.shape[0] = 4096;
    h.tensor.shape[1] = 8192;
    h.box.ndim = 2;
    h.box.stop[0] = 4096;
    h.box.stop[1] = 8192;
    bytes = wst_model_shard_bytes(&h);
    buf = malloc(bytes);
    assert_non_null(buf);
    wst_model_fill_shard(&h, 1, 0, buf); /* fault the pages in */
    clock_gettime(CLOCK_MONOTONIC, &a);
    wst_model_fill_shard(&h, 1, 1, buf);
    clock_gettime(CLOCK_MONOTONIC, &b);
    s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    print_message("fill: %.0f MB/s\n", (double)bytes / s / 1e6);
    assert_true((double)bytes / s > 100e6);
    free(buf);
}

/* Not a benchmark, a floor: the experts verifier must run at well over
 * 100 MB/s for both loaders. */
static void test_model_verify_experts_speed(void **state)
{
    struct wst_moe_options opt;
    struct wst_model m;
    struct wst_layout l;
    struct timespec a, b;
    unsigned char *shm;
    char err[512] = "";
    uint64_t checked;
    double s;
    int k;

    (void)state;
    if (getenv("WST_SKIP_SPEED") != NULL)
        skip();
    assert_int_equal(wst_model_preset("tiny-moe", 4, &m, err, sizeof(err)),
                     WST_OK);
    for (k = 0; k < 2; k++) {
        memset(&opt, 0, sizeof(opt));
        opt.loader = k ? "trtllm-bf16" : "checkpoint";
        assert_int_equal(
            wst_model_engine_layout_moe(&m, 0, 1, &opt, &l, err, sizeof(err)),
            WST_OK);
        shm = calloc(l.shm_bytes, 1);
        assert_non_null(shm);
        simulate_copies(&l, shm, 3, 3);
        write_experts(&l, &m, shm, 3, 3, k);
        clock_gettime(CLOCK_MONOTONIC, &a);
        assert_int_equal(
            wst_model_verify(&l, shm, 3, 3, &checked, err, sizeof(err)),
            WST_OK);
        clock_gettime(CLOCK_MONOTONIC, &b);
        s = (double)(b.tv_sec - a.tv_sec) +
            (double)(b.tv_nsec - a.tv_nsec) / 1e9;
        print_message("verify (%s): %.0f MB/s\n", opt.loader,
                      (double)checked / s / 1e6);
        assert_true((double)checked / s > 100e6);
        free(shm);
        wst_layout_release(&l);
    }
    wst_model_release(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_tiny_preset),
        cmocka_unit_test(test_model_qwen3_preset),
        cmocka_unit_test(test_model_deepseek_v3_narrow),
        cmocka_unit_test(test_model_tiny_moe_preset),
        cmocka_unit_test(test_model_dense_preset),
        cmocka_unit_test(test_model_dense_engine_coverage),
        cmocka_unit_test(test_model_engine_coverage_tp1),
        cmocka_unit_test(test_model_engine_coverage_tp2),
        cmocka_unit_test(test_model_engine_coverage_tp4),
        cmocka_unit_test(test_model_engine_coverage_tp8_kv_replicated),
        cmocka_unit_test(test_model_engine_qkv_region),
        cmocka_unit_test(test_model_engine_kv_replication),
        cmocka_unit_test(test_model_engine_vocab_padding),
        cmocka_unit_test(test_model_engine_refuses_bad_tp),
        cmocka_unit_test(test_model_trainer_uneven_split),
        cmocka_unit_test(test_model_trainer_union_exact),
        cmocka_unit_test(test_model_fill_shard_matches_whole),
        cmocka_unit_test(test_model_fill_then_verify),
        cmocka_unit_test(test_model_verify_row_pitch),
        cmocka_unit_test(test_model_engine_coverage_moe),
        cmocka_unit_test(test_model_engine_moe_layout),
        cmocka_unit_test(test_model_engine_moe_refused_shapes),
        cmocka_unit_test(test_model_trainer_expert_shards),
        cmocka_unit_test(test_model_fill_shard_3d),
        cmocka_unit_test(test_model_expert_tag),
        cmocka_unit_test(test_model_verify_experts_checkpoint),
        cmocka_unit_test(test_model_verify_experts_trtllm),
        cmocka_unit_test(test_model_verify_experts_skips_and_refuses),
        cmocka_unit_test(test_model_fill_speed),
        cmocka_unit_test(test_model_verify_experts_speed),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
