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

#include "dtype.h"
#include "model.h"

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

/* Adds 1 to counts[] over every element of an N-D box of tensor 't' (2-D
 * at most in these models), or over a flat range. */
static void count_box(const struct wst_tensor_desc *t, const struct wst_box *b,
                      int flat, uint8_t *counts)
{
    uint64_t i, j, cols = t->ndim > 1 ? t->shape[1] : 1;

    if (flat || t->ndim == 1) {
        for (i = b->start[0]; i < b->stop[0]; i++)
            counts[i]++;
        return;
    }
    assert_int_equal(t->ndim, 2);
    for (i = b->start[0]; i < b->stop[0]; i++)
        for (j = b->start[1]; j < b->stop[1]; j++)
            counts[i * cols + j]++;
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
    assert_int_equal(m.n_tensors, 48 * 9 + 3);
    i = tensor_index(&m, "model.layers.47.mlp.gate.weight");
    assert_int_equal(m.tensors[i].shape[0], 128);
    assert_int_equal(m.tensors[i].shape[1], 2048);
    i = tensor_index(&m, "model.layers.0.self_attn.o_proj.weight");
    assert_int_equal(m.tensors[i].shape[0], 2048);
    assert_int_equal(m.tensors[i].shape[1], 4096);
    /* per layer: 2 norms 8192 + q,o 2*16 MiB + k,v 2*2 MiB + 512 + router
     * 512 KiB; embed + lm_head 2*151936*2048*2, norm 4096 */
    assert_int_equal(wst_model_bytes(&m),
                     48ull * (8192 + 33554432 + 4194304 + 512 + 524288) +
                         2ull * 151936 * 2048 * 2 + 4096);
    wst_model_release(&m);

    assert_int_equal(wst_model_preset("qwen3-30b-a3b", 2, &m, err, sizeof(err)),
                     WST_OK);
    assert_int_equal(m.n_tensors, 2 * 9 + 3);
    wst_model_release(&m);

    assert_int_equal(wst_model_preset("huge", 0, &m, err, sizeof(err)),
                     WST_ERR_INVALID);
    assert_non_null(strstr(err, "unknown model preset \"huge\""));
}

/* ---- engine layout ------------------------------------------------------ */

/* Every checkpoint element wanted exactly once over all ranks, replicated
 * tensors exactly tp times; regions aligned, disjoint, inside the shm; no
 * two wants of a rank write the same byte; the layout survives the file
 * validator. */
static void check_engine_coverage(const char *preset, uint32_t layers,
                                  uint32_t tp)
{
    struct wst_model m;
    uint8_t **counts;
    char err[512] = "";
    size_t i, t;
    uint32_t r;
    uint64_t e;

    assert_int_equal(wst_model_preset(preset, layers, &m, err, sizeof(err)),
                     WST_OK);
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
            count_box(&m.tensors[t], &w->box, 0, counts[t]);
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
        wst_layout_release(&back);
        free(written);
        free(descs);
        wst_layout_release(&l);
    }
    for (t = 0; t < m.n_tensors; t++) {
        uint8_t want = is_replicated(&m.tensors[t]) ? (uint8_t)tp : 1;

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

static void test_model_trainer_union_exact(void **state)
{
    struct wst_model m;
    struct wst_have *h;
    uint8_t **counts;
    char err[256] = "";
    size_t n, t;
    uint32_t r, world = 3;
    uint64_t e;

    (void)state;
    assert_int_equal(wst_model_preset("tiny", 1, &m, err, sizeof(err)), WST_OK);
    counts = calloc(m.n_tensors, sizeof(*counts));
    assert_non_null(counts);
    for (t = 0; t < m.n_tensors; t++)
        counts[t] = calloc(elems_of(&m.tensors[t]), 1);
    for (r = 0; r < world; r++) {
        assert_int_equal(wst_model_trainer_shards(&m, r, world, &h, &n),
                         WST_OK);
        assert_int_equal(n, m.n_tensors);
        for (t = 0; t < n; t++) {
            assert_string_equal(h[t].tensor.name, m.tensors[t].name);
            assert_int_equal(h[t].flat, m.tensors[t].ndim == 1);
            assert_int_equal(wst_have_check(&h[t]), WST_OK);
            count_box(&m.tensors[t], &h[t].box, h[t].flat, counts[t]);
        }
        free(h);
    }
    for (t = 0; t < m.n_tensors; t++) {
        for (e = 0; e < elems_of(&m.tensors[t]); e++)
            if (counts[t][e] != 1)
                fail_msg("%s element %llu covered %u times", m.tensors[t].name,
                         (unsigned long long)e, counts[t][e]);
        free(counts[t]);
    }
    free(counts);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_tiny_preset),
        cmocka_unit_test(test_model_qwen3_preset),
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
        cmocka_unit_test(test_model_fill_speed),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
