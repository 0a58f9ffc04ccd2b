/* test_trtllm_dump.c - writes dump directories that tests/tools/check_dump.py
 * checks against its own step-by-step TRTLLM BF16 reference.
 *
 *   test_trtllm_dump [--corrupt] SHAPE DIR
 *
 * SHAPE is a per-expert shape of a real model (tiny-moe, qwen3-30b-a3b,
 * deepseek-v3) or "write-api". For a model shape the program builds the
 * grouped expert tensors of two layers by hand, fills them with random
 * non-zero bf16 bit patterns, runs the built-in CPU loaders into live
 * buffers poisoned with 0xA5 (layer 0 "trtllm-bf16", layer 1 "checkpoint",
 * load_expert once per local expert, as the receiver's replay does) and
 * writes the dump with the set writer of tools/demo/dump.h. Expert counts
 * are cut down from the real models (E and ep chosen so that L is 8, 2 and
 * 1) to keep the dumps small; the per-expert shapes, which are what the
 * layout depends on, are the real ones. The EP rank is never 0, so the
 * global offset e0 is exercised too.
 *
 * "write-api" dumps a hand-built model and engine layout through
 * wst_dump_write: pitched dense wants, an f32 tensor, experts entries of
 * both loaders, a refused experts entry (skipped), a grouped want standing
 * in for an experts entry (skipped) and one with no experts entry (dumped).
 *
 * --corrupt flips one bit of one live expert of layer 0 after the loader
 * ran: the checker must then fail (exit 1), which proves it can.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dump.h"
#include "dtype.h"
#include "model.h"
#include "repack.h"

#define POISON 0xA5
#define BF16 2 /* bytes */

struct moe_shape {
    const char *name;
    uint32_t hidden, inter, n_experts, ep_size, ep_rank;
};

static const struct moe_shape shapes[] = {
    {"tiny-moe", 1024, 256, 16, 2, 1},      /* L = 8, e0 = 8 */
    {"qwen3-30b-a3b", 2048, 768, 16, 8, 5}, /* L = 2, e0 = 10 */
    {"deepseek-v3", 7168, 2048, 8, 8, 3},   /* L = 1, e0 = 3 */
};

static char err[512];

static int fail(const char *what, wst_status_t status)
{
    fprintf(stderr, "test_trtllm_dump: %s: %s (%s)\n", what, err,
            wst_status_string(status));
    return 1;
}

/* ---- random bf16 -------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Random bf16 bit patterns, never 0x0000 (a zero could hide a missing
 * write to zeroed memory) nor the poison 0xA5A5 (an unwritten element must
 * always differ). */
static void fill_bf16(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t s = seed, v = 0;
    size_t i;

    for (i = 0; i < n; i++) {
        uint16_t x;

        if (i % 4 == 0)
            v = rng_next(&s);
        x = (uint16_t)(v >> (16 * (i % 4)));
        if (x == 0 || x == (POISON << 8 | POISON))
            x = 0x3f80; /* 1.0 */
        p[2 * i] = (unsigned char)x;
        p[2 * i + 1] = (unsigned char)(x >> 8);
    }
}

/* ---- model shapes, by hand ---------------------------------------------- */

static void box3(struct wst_box *b, uint64_t e0, uint64_t e1, uint64_t r,
                 uint64_t c)
{
    memset(b, 0, sizeof(*b));
    b->ndim = 3;
    b->start[0] = e0;
    b->stop[0] = e1;
    b->stop[1] = r;
    b->stop[2] = c;
}

/* Tensor 't' named 'name', its file the bytes at 'data' (as many as its
 * shape says). */
static wst_status_t put(wst_dump_set_t *s, const char *name,
                        const struct wst_dump_tensor *tmpl, const void *data)
{
    struct wst_dump_tensor t = *tmpl;
    size_t bytes = wst_dtype_size(t.dtype);
    wst_status_t status;
    uint32_t d;

    t.name = name;
    for (d = 0; d < t.ndim; d++)
        bytes *= t.shape[d];
    status = wst_dump_set_begin(s, &t, err, sizeof(err));
    if (status == WST_OK)
        status = wst_dump_set_write(s, data, bytes, err, sizeof(err));
    if (status == WST_OK)
        status = wst_dump_set_end(s, err, sizeof(err));
    return status;
}

/* Source tensor [d0, d1, d2] whole. */
static wst_status_t add_source3(wst_dump_set_t *s, const char *name,
                                uint64_t d0, uint64_t d1, uint64_t d2,
                                const void *data)
{
    struct wst_dump_tensor t;

    memset(&t, 0, sizeof(t));
    t.layout = "checkpoint";
    t.dtype = WST_DTYPE_BF16;
    t.ndim = 3;
    t.shape[0] = t.tensor_shape[0] = d0;
    t.shape[1] = t.tensor_shape[1] = d1;
    t.shape[2] = t.tensor_shape[2] = d2;
    box3(&t.box, 0, d0, d1, d2);
    return put(s, name, &t, data);
}

/* One MoE layer: sources, loader run, live w13 and w2. */
static wst_status_t moe_layer(const struct moe_shape *sh, uint32_t layer,
                              const struct wst_repack_loader *ld, int corrupt,
                              wst_dump_set_t *live, wst_dump_set_t *src)
{
    const uint64_t e = sh->n_experts, h = sh->hidden, i = sh->inter;
    const uint32_t nl = sh->n_experts / sh->ep_size;
    const uint64_t e0 = (uint64_t)sh->ep_rank * nl;
    const size_t proj = (size_t)(i * h * BF16);
    const int trtllm = strcmp(ld->name, "trtllm-bf16") == 0;
    struct wst_expert_shape shape = {nl, sh->hidden, sh->inter, WST_DTYPE_BF16};
    unsigned char *gate, *up, *down, *w13 = NULL, *w2 = NULL;
    char gn[WST_NAME_MAX], un[WST_NAME_MAX], dn[WST_NAME_MAX];
    char n13[WST_NAME_MAX], n2[WST_NAME_MAX];
    const char *s13[2] = {gn, un}, *s2[1] = {dn};
    struct wst_dump_tensor t;
    wst_status_t status;
    uint32_t k;

    snprintf(gn, sizeof(gn), "model.layers.%u.mlp.experts.gate_proj.weight",
             layer);
    snprintf(un, sizeof(un), "model.layers.%u.mlp.experts.up_proj.weight",
             layer);
    snprintf(dn, sizeof(dn), "model.layers.%u.mlp.experts.down_proj.weight",
             layer);
    snprintf(n13, sizeof(n13), "model.layers.%u.mlp.experts.w13_weight", layer);
    snprintf(n2, sizeof(n2), "model.layers.%u.mlp.experts.w2_weight", layer);
    gate = malloc(e * proj);
    up = malloc(e * proj);
    down = malloc(e * proj);
    status = ld->check(&shape, err, sizeof(err));
    if (status != WST_OK)
        goto out_free;
    w13 = malloc(ld->w13_bytes(&shape));
    w2 = malloc(ld->w2_bytes(&shape));
    if (gate == NULL || up == NULL || down == NULL || w13 == NULL ||
        w2 == NULL) {
        snprintf(err, sizeof(err), "out of memory");
        status = WST_ERR_NO_MEMORY;
        goto out_free;
    }
    fill_bf16(gate, e * i * h, 3 * layer + 1);
    fill_bf16(up, e * i * h, 3 * layer + 2);
    fill_bf16(down, e * h * i, 3 * layer + 3);
    memset(w13, POISON, ld->w13_bytes(&shape));
    memset(w2, POISON, ld->w2_bytes(&shape));
    for (k = 0; k < nl; k++) {
        status = ld->load_expert(ld, &shape, k, gate + (e0 + k) * proj,
                                 up + (e0 + k) * proj, down + (e0 + k) * proj,
                                 w13, w2);
        if (status != WST_OK) {
            snprintf(err, sizeof(err), "%s: load_expert %u", ld->name, k);
            goto out_free;
        }
    }
    if (corrupt) /* last local expert, a byte in its second half */
        w13[(size_t)(nl - 1) * 2 * proj + proj + 4097] ^= 0x01;

    status = add_source3(src, gn, e, i, h, gate);
    if (status == WST_OK)
        status = add_source3(src, un, e, i, h, up);
    if (status == WST_OK)
        status = add_source3(src, dn, e, h, i, down);
    if (status != WST_OK)
        goto out_free;

    memset(&t, 0, sizeof(t));
    t.layout = ld->name;
    t.dtype = WST_DTYPE_BF16;
    t.ndim = trtllm ? 4 : 3;
    t.shape[0] = nl;
    t.shape[1] = trtllm ? h / 64 : 2 * i;
    t.shape[2] = trtllm ? 2 * i : h;
    t.shape[3] = trtllm ? 64 : 0;
    t.sources = s13;
    t.n_sources = 2;
    box3(&t.box, e0, e0 + nl, i, h);
    t.tensor_shape[0] = e;
    t.tensor_shape[1] = i;
    t.tensor_shape[2] = h;
    status = put(live, n13, &t, w13);
    if (status != WST_OK)
        goto out_free;
    t.shape[1] = trtllm ? i / 64 : h;
    t.shape[2] = trtllm ? h : i;
    t.sources = s2;
    t.n_sources = 1;
    box3(&t.box, e0, e0 + nl, h, i);
    t.tensor_shape[1] = h;
    t.tensor_shape[2] = i;
    status = put(live, n2, &t, w2);

out_free:
    free(w2);
    free(w13);
    free(down);
    free(up);
    free(gate);
    return status;
}

/* A dense tensor cut on both dims, as TP sharding on dim 1 of a row range
 * would; the live copy is the box, packed. */
static wst_status_t dense_tensor(wst_dump_set_t *live, wst_dump_set_t *src)
{
    enum { ROWS = 64, COLS = 512, R0 = 16, R1 = 48, C0 = 128, C1 = 384 };
    static const char name[] = "model.layers.0.self_attn.o_proj.weight";
    static unsigned char whole[ROWS * COLS * BF16];
    static unsigned char box[(R1 - R0) * (C1 - C0) * BF16];
    const char *sources[1] = {name};
    struct wst_dump_tensor t;
    wst_status_t status;
    int r;

    fill_bf16(whole, ROWS * COLS, 99);
    for (r = R0; r < R1; r++)
        memcpy(box + (size_t)(r - R0) * (C1 - C0) * BF16,
               whole + ((size_t)r * COLS + C0) * BF16, (C1 - C0) * BF16);
    memset(&t, 0, sizeof(t));
    t.layout = "checkpoint";
    t.dtype = WST_DTYPE_BF16;
    t.ndim = 2;
    t.shape[0] = t.tensor_shape[0] = ROWS;
    t.shape[1] = t.tensor_shape[1] = COLS;
    t.box.ndim = 2;
    t.box.stop[0] = ROWS;
    t.box.stop[1] = COLS;
    status = put(src, name, &t, whole);
    if (status != WST_OK)
        return status;
    t.shape[0] = R1 - R0;
    t.shape[1] = C1 - C0;
    t.box.start[0] = R0;
    t.box.stop[0] = R1;
    t.box.start[1] = C0;
    t.box.stop[1] = C1;
    t.sources = sources;
    t.n_sources = 1;
    return put(live, name, &t, box);
}

static int run_shape(const struct moe_shape *sh, const char *dir, int corrupt)
{
    wst_dump_set_t *live = NULL, *src = NULL;
    wst_status_t status;

    status = wst_dump_set_create(dir, "live", &live, err, sizeof(err));
    if (status == WST_OK)
        status = wst_dump_set_create(dir, "source", &src, err, sizeof(err));
    if (status == WST_OK)
        status = dense_tensor(live, src);
    if (status == WST_OK)
        status = moe_layer(sh, 0, wst_repack_loader_trtllm_bf16(), corrupt,
                           live, src);
    if (status == WST_OK)
        status = moe_layer(sh, 1, wst_repack_loader_checkpoint(), 0, live, src);
    if (status == WST_OK)
        status = wst_dump_set_commit(src, err, sizeof(err));
    if (status == WST_OK)
        status = wst_dump_set_commit(live, err, sizeof(err));
    wst_dump_set_destroy(src);
    wst_dump_set_destroy(live);
    if (status != WST_OK)
        return fail(sh->name, status);
    printf("test_trtllm_dump: %s (H=%u I=%u E=%u ep %u of %u)%s -> %s\n",
           sh->name, sh->hidden, sh->inter, sh->n_experts, sh->ep_rank,
           sh->ep_size, corrupt ? ", one live bit flipped," : "", dir);
    return 0;
}

/* ---- wst_dump_write on a hand-built model and layout -------------------- */

#define API_SEED 7
#define API_VERSION 3

enum {
    T_OPROJ,
    T_NORM,
    T_BIAS,
    T_L0_GATE, /* experts of layers 0..2: gate, up, down */
    T_L3_DOWN = T_L0_GATE + 9,
    T_COUNT
};

static void desc(struct wst_tensor_desc *t, const char *name,
                 enum wst_dtype dtype, uint32_t ndim, uint64_t d0, uint64_t d1,
                 uint64_t d2)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->dtype = dtype;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->shape[2] = d2;
}

static uint32_t region(struct wst_layout *l, const char *name, uint64_t bytes)
{
    struct wst_layout_region *r = &l->regions[l->n_regions];
    uint64_t end = 0;

    if (l->n_regions > 0)
        end = l->regions[l->n_regions - 1].offset +
              l->regions[l->n_regions - 1].bytes;
    snprintf(r->name, sizeof(r->name), "%s", name);
    r->offset = (end + 63) / 64 * 64;
    r->bytes = bytes;
    l->shm_bytes = r->offset + bytes;
    return (uint32_t)l->n_regions++;
}

static struct wst_want *want(struct wst_layout *l,
                             const struct wst_tensor_desc *t, uint32_t reg)
{
    struct wst_want *w = &l->wants[l->n_wants++];
    uint32_t d;

    memset(w, 0, sizeof(*w));
    w->tensor = *t;
    w->box.ndim = t->ndim;
    for (d = 0; d < t->ndim; d++)
        w->box.stop[d] = t->shape[d];
    w->region = reg;
    return w;
}

/* Experts of 'layer' (tensors at T_L0_GATE + 3*layer) through 'loader'. */
static struct wst_layout_experts *experts(struct wst_layout *l,
                                          const struct wst_tensor_desc *gate,
                                          uint32_t layer, const char *loader)
{
    struct wst_layout_experts *x = &l->experts[l->n_experts++];
    uint64_t i = gate->shape[1], h = gate->shape[2], e = gate->shape[0];
    char n[64];

    memset(x, 0, sizeof(*x));
    x->layer = layer;
    snprintf(x->loader, sizeof(x->loader), "%s", loader);
    x->dtype = WST_DTYPE_BF16;
    x->n_experts = (uint32_t)e;
    x->ep_rank = 1;
    x->ep_size = 2;
    x->hidden = (uint32_t)h;
    x->inter = (uint32_t)i;
    snprintf(n, sizeof(n), "layers.%u.w13", layer);
    x->w13_region = region(l, n, e / 2 * 2 * i * h * BF16);
    snprintf(n, sizeof(n), "layers.%u.w2", layer);
    x->w2_region = region(l, n, e / 2 * h * i * BF16);
    return x;
}

/* What the receiver would have written: dense wants copied in (honouring
 * row_pitch), experts through their loader. */
static wst_status_t fill_live(const struct wst_layout *l,
                              const struct wst_tensor_desc *tensors,
                              unsigned char *live)
{
    struct wst_loader_registry reg;
    wst_status_t status = WST_OK;
    size_t k;

    for (k = 0; k < l->n_wants; k++) {
        const struct wst_want *w = &l->wants[k];
        struct wst_have h = {.tensor = w->tensor, .box = w->box};
        uint64_t rows, row_bytes, r;
        unsigned char *buf, *dst;

        if (w->expert.grouped && wst_tensor_layer(w->tensor.name) == 0)
            continue; /* staging: the experts entry of layer 0 is live */
        row_bytes =
            (w->box.stop[w->box.ndim - 1] - w->box.start[w->box.ndim - 1]) *
            wst_dtype_size(w->tensor.dtype);
        rows = wst_model_shard_bytes(&h) / row_bytes;
        buf = malloc(wst_model_shard_bytes(&h));
        if (buf == NULL)
            return WST_ERR_NO_MEMORY;
        wst_model_fill_shard(&h, API_SEED, API_VERSION, buf);
        dst = live + l->regions[w->region].offset + w->offset;
        for (r = 0; r < rows; r++)
            memcpy(dst + r * (w->row_pitch ? w->row_pitch : row_bytes),
                   buf + r * row_bytes, row_bytes);
        free(buf);
    }
    wst_loader_registry_init(&reg);
    for (k = 0; k < l->n_experts && status == WST_OK; k++) {
        const struct wst_layout_experts *x = &l->experts[k];
        const struct wst_repack_loader *ld =
            wst_loader_registry_find(&reg, x->loader);
        struct wst_expert_shape shape = {x->n_experts / x->ep_size, x->hidden,
                                         x->inter, x->dtype};
        unsigned char *p[3];
        size_t proj = (size_t)x->hidden * x->inter * BF16;
        uint32_t e, j;

        if (x->expert_ids != NULL)
            continue;
        for (j = 0; j < 3; j++) {
            struct wst_have h = {.tensor =
                                     tensors[T_L0_GATE + 3 * x->layer + j]};

            h.box.ndim = 3;
            h.box.start[0] = (uint64_t)x->ep_rank * shape.n_local;
            h.box.stop[0] = h.box.start[0] + shape.n_local;
            h.box.stop[1] = h.tensor.shape[1];
            h.box.stop[2] = h.tensor.shape[2];
            p[j] = malloc(wst_model_shard_bytes(&h));
            if (p[j] != NULL)
                wst_model_fill_shard(&h, API_SEED, API_VERSION, p[j]);
        }
        for (e = 0;
             e < shape.n_local && p[0] && p[1] && p[2] && status == WST_OK; e++)
            status = ld->load_expert(
                ld, &shape, e, p[0] + e * proj, p[1] + e * proj,
                p[2] + e * proj,
                live + l->regions[x->w13_region].offset + x->w13_offset,
                live + l->regions[x->w2_region].offset + x->w2_offset);
        if (!(p[0] && p[1] && p[2]))
            status = WST_ERR_NO_MEMORY;
        for (j = 0; j < 3; j++)
            free(p[j]);
    }
    return status;
}

static int index_has(const char *dir, const char *needle)
{
    char path[4096], *text;
    FILE *f;
    long n;
    int found = 0;

    snprintf(path, sizeof(path), "%s/live/index.json", dir);
    f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    text = calloc((size_t)n + 1, 1);
    if (text != NULL && fread(text, 1, (size_t)n, f) == (size_t)n)
        found = strstr(text, needle) != NULL;
    free(text);
    fclose(f);
    return found;
}

static int run_write_api(const char *dir)
{
    static const char *proj[3] = {"gate_proj", "up_proj", "down_proj"};
    static const uint32_t ids[2] = {2, 3};
    static struct wst_tensor_desc tensors[T_COUNT];
    static struct wst_layout_region regions[16];
    static struct wst_want wants[8];
    static struct wst_layout_experts xs[4];
    struct wst_layout l;
    struct wst_model m;
    struct wst_want *w;
    struct wst_layout_experts *x;
    unsigned char *live;
    char n[WST_NAME_MAX], refused[4096];
    uint32_t k, j;
    wst_status_t status;

    desc(&tensors[T_OPROJ], "model.layers.0.self_attn.o_proj.weight",
         WST_DTYPE_BF16, 2, 256, 512, 0);
    desc(&tensors[T_NORM], "model.layers.0.input_layernorm.weight",
         WST_DTYPE_BF16, 1, 1024, 0, 0);
    desc(&tensors[T_BIAS], "model.layers.0.mlp.gate.e_score_correction_bias",
         WST_DTYPE_F32, 1, 16, 0, 0);
    for (k = 0; k < 3; k++) { /* layer 0 as tiny-moe, 1 and 2 smaller */
        uint64_t e = k == 0 ? 16 : 4, h = k == 0 ? 1024 : 512;
        uint64_t i = k == 0 ? 256 : 128;

        for (j = 0; j < 3; j++) {
            snprintf(n, sizeof(n), "model.layers.%u.mlp.experts.%s.weight", k,
                     proj[j]);
            desc(&tensors[T_L0_GATE + 3 * k + j], n, WST_DTYPE_BF16, 3, e,
                 j < 2 ? i : h, j < 2 ? h : i);
        }
    }
    desc(&tensors[T_L3_DOWN], "model.layers.3.mlp.experts.down_proj.weight",
         WST_DTYPE_BF16, 3, 4, 256, 128);
    memset(&m, 0, sizeof(m));
    snprintf(m.preset, sizeof(m.preset), "write-api");
    m.n_tensors = T_COUNT;
    m.tensors = tensors;

    memset(&l, 0, sizeof(l));
    l.regions = regions;
    l.wants = wants;
    l.experts = xs;
    /* o_proj's rows live in a region twice as wide: a real row pitch, and
     * the box starts 128 columns in. */
    w = want(&l, &tensors[T_OPROJ], region(&l, "o_proj", 256 * 512 * BF16));
    w->box.start[1] = 128;
    w->box.stop[1] = 384;
    w->offset = 128 * BF16;
    w->row_pitch = 512 * BF16;
    want(&l, &tensors[T_NORM], region(&l, "norm", 1024 * BF16));
    want(&l, &tensors[T_BIAS], region(&l, "bias", 16 * 4));
    /* Layer 0's gate as a grouped want into staging: never live, so it
     * must not be dumped (its region stays poisoned). */
    w = want(&l, &tensors[T_L0_GATE],
             region(&l, "staging", 8 * 256 * 1024 * BF16));
    w->box.start[0] = 8;
    w->expert = (struct wst_want_expert){1, 1, 2};
    /* Layer 3 has no experts entry: its grouped want is live as it is. */
    w = want(&l, &tensors[T_L3_DOWN],
             region(&l, "l3.down", 2 * 256 * 128 * BF16));
    w->box.start[0] = 2;
    w->expert = (struct wst_want_expert){1, 1, 2};
    experts(&l, &tensors[T_L0_GATE], 0, "trtllm-bf16");
    experts(&l, &tensors[T_L0_GATE + 3], 1, "checkpoint");
    x = experts(&l, &tensors[T_L0_GATE + 6], 2, "checkpoint");
    x->expert_ids = (uint32_t *)ids; /* refused by the receiver: skipped */
    x->n_expert_ids = 2;

    live = malloc(l.shm_bytes);
    if (live == NULL)
        return fail("write-api", WST_ERR_NO_MEMORY);
    memset(live, POISON, l.shm_bytes);
    status = fill_live(&l, tensors, live);
    if (status != WST_OK) {
        snprintf(err, sizeof(err), "filling the live buffer");
        free(live);
        return fail("write-api", status);
    }
    status = wst_dump_write(dir, &m, &l, live, API_SEED, API_VERSION, err,
                            sizeof(err));
    if (status != WST_OK) {
        free(live);
        return fail("wst_dump_write", status);
    }
    if (index_has(dir, "model.layers.2.mlp.experts.w13_weight") != 0 ||
        index_has(dir, "model.layers.3.mlp.experts.down_proj.weight") != 1) {
        fprintf(stderr,
                "test_trtllm_dump: %s/live/index.json: the refused "
                "experts entry is in it, or layer 3's grouped want "
                "is not\n",
                dir);
        free(live);
        return 1;
    }
    /* A loader the checker cannot know: refused before any file. */
    snprintf(xs[1].loader, sizeof(xs[1].loader), "custom");
    snprintf(refused, sizeof(refused), "%s/refused", dir);
    status = wst_dump_write(refused, &m, &l, live, API_SEED, API_VERSION, err,
                            sizeof(err));
    free(live);
    if (status != WST_ERR_UNSUPPORTED_LAYOUT || access(refused, F_OK) == 0) {
        fprintf(stderr,
                "test_trtllm_dump: loader \"custom\": got %s, want "
                "%s and no %s\n",
                wst_status_string(status),
                wst_status_string(WST_ERR_UNSUPPORTED_LAYOUT), refused);
        return 1;
    }
    printf("test_trtllm_dump: write-api -> %s\n", dir);
    return 0;
}

int main(int argc, char **argv)
{
    int corrupt = 0, a = 1;
    size_t k;

    if (a < argc && strcmp(argv[a], "--corrupt") == 0) {
        corrupt = 1;
        a++;
    }
    if (argc - a != 2) {
        fprintf(stderr, "usage: test_trtllm_dump [--corrupt] "
                        "tiny-moe|qwen3-30b-a3b|deepseek-v3|write-api DIR\n");
        return 2;
    }
    if (strcmp(argv[a], "write-api") == 0 && !corrupt)
        return run_write_api(argv[a + 1]);
    for (k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
        if (strcmp(argv[a], shapes[k].name) == 0)
            return run_shape(&shapes[k], argv[a + 1], corrupt);
    fprintf(stderr, "test_trtllm_dump: unknown shape \"%s\"\n", argv[a]);
    return 2;
}
