/* model.c - synthetic models: presets, engine layouts, trainer shards, data.
 *
 * Data generator: key = mix(mix(seed ^ fnv1a(name)) + version * G), and
 * element i (global row-major flat index) is the low bytes, little-endian,
 * of mix(key + (i + 1) * G), where mix is the splitmix64 finalizer and G the
 * golden-ratio increment. Filling and verifying walk a box row by row, so
 * the name hash and key are computed once per call and the inner loop is one
 * mix per element.
 *
 * Grouped expert tensors ("model.layers.<l>.mlp.experts.<proj>.weight",
 * [E, rows, cols], proj gate_proj = 0, up_proj = 1, down_proj = 2) are the
 * same stream with the most significant byte of each element (the high byte
 * of a bf16) replaced by a tag:
 *
 *     tag = (e + 37*l + 101*proj) & 0xff      e = dim-0 index (global id)
 *
 * The low byte still changes with version and position. A replay under the
 * wrong expert id, into the wrong layer or projection changes the tag, so
 * it shows in the bytes, and on a mismatch the verifier reads the tag of
 * what it got to say where that value came from.
 *
 * The verifier checks the MoE loaders' live buffers from its own closed
 * forms (REFIT_LAYOUTS.md sections 2 and 3), generating one source row at a
 * time and comparing it where the loader must have put it; it shares no code
 * with kernels/, which it is there to check.
 */
#include "model.h"

#include "dtype.h"
#include "errbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN 0x9e3779b97f4a7c15ull
#define REGION_ALIGN 64
#define VOCAB_PAD 64 /* engine pads the vocabulary to 64 rows per TP rank */

/* ---- data --------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t data_key(const char *name, uint64_t seed, uint64_t version)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (; *name != '\0'; name++)
        h = (h ^ (unsigned char)*name) * 0x100000001b3ull;
    return mix64(mix64(seed ^ h) + version * GOLDEN);
}

/* Writes elements [index, index + count) of the stream 'key' to 'dst'. */
static void gen_run(uint64_t key, size_t esize, uint64_t index, uint64_t count,
                    unsigned char *dst)
{
    uint64_t s = key + (index + 1) * GOLDEN, k;
    size_t b;

    switch (esize) {
    case 1:
        for (k = 0; k < count; k++, s += GOLDEN)
            dst[k] = (unsigned char)mix64(s);
        break;
    case 2:
        for (k = 0; k < count; k++, s += GOLDEN, dst += 2) {
            uint64_t v = mix64(s);

            dst[0] = (unsigned char)v;
            dst[1] = (unsigned char)(v >> 8);
        }
        break;
    default:
        for (k = 0; k < count; k++, s += GOLDEN) {
            uint64_t v = mix64(s);

            for (b = 0; b < esize; b++, dst++)
                *dst = (unsigned char)(v >> (8 * b));
        }
        break;
    }
}

#define N_PROJ 3
static const char *const proj_names[N_PROJ] = {"gate_proj", "up_proj",
                                               "down_proj"};

/* The projection (0 gate, 1 up, 2 down) of a grouped expert tensor name,
 * with its layer in *layer_p; -1 for any other name. */
static int expert_proj(const char *name, uint32_t *layer_p)
{
    uint32_t l = wst_tensor_layer(name);
    const char *p;
    char want[64];
    int k;

    if (l == UINT32_MAX)
        return -1;
    p = strchr(name + strlen("model.layers."), '.');
    for (k = 0; k < N_PROJ; k++) {
        snprintf(want, sizeof(want), ".mlp.experts.%s.weight", proj_names[k]);
        if (strcmp(p, want) == 0) {
            *layer_p = l;
            return k;
        }
    }
    return -1;
}

static uint32_t tag_base(uint32_t layer, int proj)
{
    return 37u * layer + 101u * (uint32_t)proj;
}

/* As gen_run, with the most significant byte of every element set to
 * 'tag' (esize >= 2). bf16 gets its own loop: it is the hot case. */
static void gen_run_tagged(uint64_t key, size_t esize, uint64_t index,
                           uint64_t count, unsigned char tag,
                           unsigned char *dst)
{
    uint64_t s = key + (index + 1) * GOLDEN, k;

    if (esize == 2) {
        for (k = 0; k < count; k++, s += GOLDEN, dst += 2) {
            dst[0] = (unsigned char)mix64(s);
            dst[1] = tag;
        }
        return;
    }
    gen_run(key, esize, index, count, dst);
    for (k = 0; k < count; k++)
        dst[k * esize + esize - 1] = tag;
}

/* Everything that generates one tensor's elements. */
struct stream {
    uint64_t key;
    size_t esize;
    uint64_t per_expert; /* elements per dim-0 index; 0: untagged */
    uint32_t tag0;       /* tag of expert 0 */
};

static void stream_init(struct stream *s, const struct wst_tensor_desc *t,
                        uint64_t seed, uint64_t version)
{
    uint32_t layer = 0, d;
    int proj = expert_proj(t->name, &layer);

    s->key = data_key(t->name, seed, version);
    s->esize = wst_dtype_size(t->dtype);
    s->per_expert = 0;
    s->tag0 = 0;
    /* one-byte elements have no byte to spare for the tag */
    if (proj < 0 || t->ndim < 2 || s->esize < 2)
        return;
    s->per_expert = 1;
    for (d = 1; d < t->ndim; d++)
        s->per_expert *= t->shape[d];
    s->tag0 = tag_base(layer, proj);
}

/* Elements [index, index + count) of stream 's', tagged per expert. */
static void stream_gen(const struct stream *s, uint64_t index, uint64_t count,
                       unsigned char *dst)
{
    uint64_t e, n;

    if (s->per_expert == 0) {
        gen_run(s->key, s->esize, index, count, dst);
        return;
    }
    while (count > 0) {
        e = index / s->per_expert;
        n = (e + 1) * s->per_expert - index;
        if (n > count)
            n = count;
        gen_run_tagged(s->key, s->esize, index, n, (unsigned char)(e + s->tag0),
                       dst);
        index += n;
        count -= n;
        dst += n * s->esize;
    }
}

/* Row walk over an N-D box: idx holds the current outer index (dims
 * 0..ndim-2); returns 0 when past the last row. */
static int next_row(const struct wst_box *b, uint64_t *idx)
{
    uint32_t d = b->ndim - 1;

    while (d-- > 0) {
        if (++idx[d] < b->stop[d])
            return 1;
        idx[d] = b->start[d];
    }
    return 0;
}

/* Global flat index of element (idx[0..ndim-2], col) of tensor 't'. */
static uint64_t flat_index(const struct wst_tensor_desc *t, const uint64_t *idx,
                           uint64_t col)
{
    uint64_t g = 0;
    uint32_t d;

    for (d = 0; d + 1 < t->ndim; d++)
        g = g * t->shape[d] + idx[d];
    return g * t->shape[t->ndim - 1] + col;
}

static uint64_t box_elems(const struct wst_box *b)
{
    uint64_t n = 1;
    uint32_t d;

    for (d = 0; d < b->ndim; d++)
        n *= b->stop[d] - b->start[d];
    return n;
}

struct wst_shard wst_model_shard(const struct wst_have *h, const void *data)
{
    struct wst_shard sh = {
        .name = h->tensor.name,
        .data = data,
        .mem_type = WST_MEM_HOST,
        .dtype = h->tensor.dtype,
        .ndim = h->tensor.ndim,
        .shape = h->tensor.shape,
        .box_start = h->box.start,
        .box_stop = h->box.stop,
        .flat = h->flat,
    };
    return sh;
}

uint64_t wst_model_shard_bytes(const struct wst_have *h)
{
    return box_elems(&h->box) * wst_dtype_size(h->tensor.dtype);
}

void wst_model_fill_shard(const struct wst_have *h, uint64_t seed,
                          uint64_t version, void *buf)
{
    const struct wst_box *b = &h->box;
    uint64_t idx[WST_MAX_DIMS], row;
    unsigned char *dst = buf;
    uint32_t last = b->ndim - 1;
    struct stream s;

    if (box_elems(b) == 0)
        return;
    stream_init(&s, &h->tensor, seed, version);
    if (h->flat) {
        stream_gen(&s, b->start[0], b->stop[0] - b->start[0], dst);
        return;
    }
    row = b->stop[last] - b->start[last];
    memcpy(idx, b->start, sizeof(idx));
    do {
        stream_gen(&s, flat_index(&h->tensor, idx, b->start[last]), row, dst);
        dst += row * s.esize;
    } while (next_row(b, idx));
}

static void hex_bytes(const unsigned char *p, size_t n, char *out)
{
    size_t i;

    /* little-endian element: print most significant byte first */
    for (i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", p[n - 1 - i]);
}

static wst_status_t verify_want(const struct wst_layout *l,
                                const struct wst_want *w,
                                const unsigned char *shm, uint64_t seed,
                                uint64_t version, unsigned char *expect,
                                uint64_t *checked, char *err, size_t errlen)
{
    const struct wst_box *b = &w->box;
    size_t esize = wst_dtype_size(w->tensor.dtype);
    uint32_t last = b->ndim - 1;
    struct stream s;
    uint64_t idx[WST_MAX_DIMS], row_bytes, pitch, g;
    const unsigned char *src;
    size_t k;
    char e_hex[17], g_hex[17];

    stream_init(&s, &w->tensor, seed, version);
    row_bytes = (b->stop[last] - b->start[last]) * esize;
    pitch = w->row_pitch != 0 ? w->row_pitch : row_bytes;
    src = shm + l->regions[w->region].offset + w->offset;
    memcpy(idx, b->start, sizeof(idx));
    do {
        g = flat_index(&w->tensor, idx, b->start[last]);
        stream_gen(&s, g, row_bytes / esize, expect);
        if (memcmp(expect, src, row_bytes) != 0) {
            for (k = 0; memcmp(expect + k, src + k, esize) == 0; k += esize)
                ;
            hex_bytes(expect + k, esize, e_hex);
            hex_bytes(src + k, esize, g_hex);
            wst_errf(err, errlen,
                     "tensor %s element %llu (region \"%s\"): expected 0x%s "
                     "got 0x%s",
                     w->tensor.name, (unsigned long long)(g + k / esize),
                     l->regions[w->region].name, e_hex, g_hex);
            return WST_ERR_INTEGRITY;
        }
        *checked += row_bytes;
        src += pitch;
    } while (next_row(b, idx));
    return WST_OK;
}

/* ---- verifying MoE live buffers ---------------------------------------- */

enum loader_kind { LOADER_CHECKPOINT, LOADER_TRTLLM };

#define KBLOCK 64 /* trtllm-bf16: elements per K block */

/* One experts entry being checked: live[0] is w13, live[1] w2. */
struct xcheck {
    const struct wst_layout *l;
    const struct wst_layout_experts *x;
    uint64_t seed, version;
    enum loader_kind kind;
    const unsigned char *live[2];
    uint64_t h, i, n_local, start; /* H, I, L, first global expert */
    size_t es;
    struct stream s[N_PROJ];
    unsigned char *row; /* one source row: max(H, I) elements */
};

static const char *const live_names[2] = {"w13", "w2"};

/* The stream of projection 'proj' of layer 'layer' ([E, I, H] or, for down,
 * [E, H, I]), as the model's grouped expert tensor generates it. */
static void expert_stream(struct stream *s, uint32_t layer, int proj,
                          const struct wst_layout_experts *x, uint64_t seed,
                          uint64_t version)
{
    struct wst_tensor_desc t;

    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "model.layers.%u.mlp.experts.%s.weight",
             layer, proj_names[proj]);
    t.dtype = x->dtype;
    t.ndim = 3;
    t.shape[0] = x->n_experts;
    t.shape[1] = proj == 2 ? x->hidden : x->inter;
    t.shape[2] = proj == 2 ? x->inter : x->hidden;
    stream_init(s, &t, seed, version);
}

/* Says in 'out' where the element 'got' seems to come from: an expert of
 * any layer of the layout whose element at the same (row, col) equals it
 * (its tag narrows the search to a few candidates), else what its tag alone
 * can mean within this layer (the same tag fits one expert per
 * projection). */
static void x_whence(const struct xcheck *c, uint64_t r, uint64_t col,
                     const unsigned char *got, char *out, size_t outlen)
{
    unsigned tag = got[c->es - 1];
    unsigned char v[8];
    uint64_t e, rows, cols;
    struct stream s;
    size_t k;
    int p, len, n = 0;

    for (k = 0; k < c->l->n_experts; k++) {
        const struct wst_layout_experts *y = &c->l->experts[k];

        if (y->dtype != c->x->dtype)
            continue;
        for (p = 0; p < N_PROJ; p++) {
            rows = p == 2 ? y->hidden : y->inter;
            cols = p == 2 ? y->inter : y->hidden;
            if (r >= rows || col >= cols)
                continue;
            expert_stream(&s, y->layer, p, y, c->seed, c->version);
            for (e = (tag - tag_base(y->layer, p)) & 0xff; e < y->n_experts;
                 e += 256) {
                stream_gen(&s, (e * rows + r) * cols + col, 1, v);
                if (memcmp(v, got, c->es) == 0) {
                    snprintf(out, outlen,
                             "expert %llu %s of layer %u (its value at this "
                             "position)",
                             (unsigned long long)e, proj_names[p], y->layer);
                    return;
                }
            }
        }
    }
    /* no value matches: list what the tag can mean within this layer */
    len = 0;
    out[0] = '\0';
    for (p = 0; p < N_PROJ; p++) {
        e = (tag - tag_base(c->x->layer, p)) & 0xff;
        if (e < c->x->n_experts && len >= 0 && (size_t)len < outlen)
            len += snprintf(out + len, outlen - (size_t)len, "%sexpert %llu %s",
                            n++ ? " or " : "", (unsigned long long)e,
                            proj_names[p]);
    }
    if (len >= 0 && (size_t)len < outlen)
        snprintf(out + len, outlen - (size_t)len,
                 "%s of layer %u by its tag 0x%02x alone", n ? "" : "no expert",
                 c->x->layer, tag);
}

/* Reports the first differing element of 'n' expected elements against
 * live[buf] + off: local expert 'local', source row 'r' of projection
 * 'proj' from column 'c0'. */
static wst_status_t x_mismatch(const struct xcheck *c, int buf, uint64_t off,
                               const unsigned char *expect, uint64_t n,
                               uint64_t local, int proj, uint64_t r,
                               uint64_t c0, char *err, size_t errlen)
{
    const unsigned char *got = c->live[buf] + off;
    const struct wst_layout_experts *x = c->x;
    uint32_t region = buf == 0 ? x->w13_region : x->w2_region;
    uint64_t k;
    char e_hex[17], g_hex[17], whence[160];

    for (k = 0; k + 1 < n; k++)
        if (memcmp(expect + k * c->es, got + k * c->es, c->es) != 0)
            break;
    hex_bytes(expect + k * c->es, c->es, e_hex);
    hex_bytes(got + k * c->es, c->es, g_hex);
    x_whence(c, r, c0 + k, got + k * c->es, whence, sizeof(whence));
    wst_errf(err, errlen,
             "experts of layer %u (loader %s): live %s (region \"%s\") byte "
             "%llu, local expert %llu (global %llu) %s row %llu col %llu: "
             "expected 0x%s got 0x%s; got looks like %s",
             x->layer, x->loader, live_names[buf], c->l->regions[region].name,
             (unsigned long long)(off + k * c->es), (unsigned long long)local,
             (unsigned long long)(c->start + local), proj_names[proj],
             (unsigned long long)r, (unsigned long long)(c0 + k), e_hex, g_hex,
             whence);
    return WST_ERR_INTEGRITY;
}

/* "checkpoint": w13[e] = [gate_g; up_g] ([2I, H]), w2[e] = down_g ([H, I]). */
static wst_status_t x_checkpoint(struct xcheck *c, uint64_t e, char *err,
                                 size_t errlen)
{
    uint64_t g = c->start + e, h = c->h, i = c->i, r, off;
    size_t es = c->es;
    int p;

    for (p = 0; p < 2; p++) {
        for (r = 0; r < i; r++) {
            stream_gen(&c->s[p], (g * i + r) * h, h, c->row);
            off = ((e * 2 + (uint64_t)p) * i + r) * h * es;
            if (memcmp(c->row, c->live[0] + off, h * es) != 0)
                return x_mismatch(c, 0, off, c->row, h, e, p, r, 0, err,
                                  errlen);
        }
    }
    for (r = 0; r < h; r++) {
        stream_gen(&c->s[2], (g * h + r) * i, i, c->row);
        off = (e * h + r) * i * es;
        if (memcmp(c->row, c->live[1] + off, i * es) != 0)
            return x_mismatch(c, 1, off, c->row, i, e, 2, r, 0, err, errlen);
    }
    return WST_OK;
}

/* REFIT_LAYOUTS.md section 3: output row n of a shuffled, interleaved
 * matrix holds source row sigma(n). */
static uint64_t trtllm_sigma(uint64_t n)
{
    return 32 * (n / 32) + 4 * (n % 8) + (n % 32) / 8;
}

/* "trtllm-bf16": W13 [L, H/64, 2I, 64] with row n = (sigma(n) odd ? gate :
 * up)[sigma(n) >> 1], W2 [L, I/64, H, 64] with row n = down[sigma(n)]. Each
 * source row is generated once and compared block by block where it must
 * have landed. */
static wst_status_t x_trtllm(struct xcheck *c, uint64_t e, char *err,
                             size_t errlen)
{
    uint64_t g = c->start + e, h = c->h, i = c->i, m = 2 * i;
    uint64_t n, q, r, kb, nkb, off;
    size_t blk = KBLOCK * c->es;
    int p;

    nkb = h / KBLOCK;
    for (n = 0; n < m; n++) {
        q = trtllm_sigma(n);
        p = (q & 1) ? 0 : 1; /* interleaved [up; gate]: odd rows are gate */
        r = q >> 1;
        stream_gen(&c->s[p], (g * i + r) * h, h, c->row);
        for (kb = 0; kb < nkb; kb++) {
            off = ((e * nkb + kb) * m + n) * blk;
            if (memcmp(c->row + kb * blk, c->live[0] + off, blk) != 0)
                return x_mismatch(c, 0, off, c->row + kb * blk, KBLOCK, e, p, r,
                                  kb * KBLOCK, err, errlen);
        }
    }
    nkb = i / KBLOCK;
    for (n = 0; n < h; n++) {
        q = trtllm_sigma(n);
        stream_gen(&c->s[2], (g * h + q) * i, i, c->row);
        for (kb = 0; kb < nkb; kb++) {
            off = ((e * nkb + kb) * h + n) * blk;
            if (memcmp(c->row + kb * blk, c->live[1] + off, blk) != 0)
                return x_mismatch(c, 1, off, c->row + kb * blk, KBLOCK, e, 2, q,
                                  kb * KBLOCK, err, errlen);
        }
    }
    return WST_OK;
}

/* Nonzero when the receiver never writes entry 'x' because it refuses it
 * at plan time: sharded inside the experts, E not divisible by ep, or an
 * expert map that is not linear placement. */
static int x_refused(const struct wst_layout_experts *x)
{
    uint64_t n_local, k;

    if (x->inter_tp_size > 1 || x->n_experts % x->ep_size != 0)
        return 1;
    if (x->expert_ids == NULL)
        return 0;
    n_local = x->n_experts / x->ep_size;
    if (x->n_expert_ids != n_local)
        return 1;
    for (k = 0; k < n_local; k++)
        if (x->expert_ids[k] != x->ep_rank * n_local + k)
            return 1;
    return 0;
}

/* live[buf] = shm + region offset + 'offset', 'bytes' long, if it fits. */
static int x_live(struct xcheck *c, int buf, const unsigned char *shm,
                  uint32_t region, uint64_t offset, uint64_t bytes)
{
    const struct wst_layout_region *rg;

    if (region >= c->l->n_regions)
        return 0;
    rg = &c->l->regions[region];
    if (offset > rg->bytes || bytes > rg->bytes - offset)
        return 0;
    c->live[buf] = shm + rg->offset + offset;
    return 1;
}

/* Validates entry 'k' and fills *c for it. */
static wst_status_t x_setup(struct xcheck *c, const struct wst_layout *l,
                            size_t k, const unsigned char *shm, char *err,
                            size_t errlen)
{
    const struct wst_layout_experts *x = &l->experts[k];
    uint64_t w13 = 0;
    int p;

    c->l = l;
    c->x = x;
    c->es = wst_dtype_size(x->dtype);
    c->h = x->hidden;
    c->i = x->inter;
    c->n_local = x->n_experts / x->ep_size;
    c->start = x->ep_rank * c->n_local;
    if (strcmp(x->loader, "checkpoint") == 0) {
        c->kind = LOADER_CHECKPOINT;
    } else if (strcmp(x->loader, "trtllm-bf16") == 0) {
        c->kind = LOADER_TRTLLM;
    } else {
        wst_errf(err, errlen,
                 "verify: experts[%zu] (layer %u): loader \"%.63s\" unknown "
                 "to the verifier",
                 k, x->layer, x->loader);
        return WST_ERR_INVALID;
    }
    if (c->kind == LOADER_TRTLLM &&
        (x->dtype != WST_DTYPE_BF16 || c->h % KBLOCK != 0 ||
         c->i % KBLOCK != 0)) {
        wst_errf(err, errlen,
                 "verify: experts[%zu] (layer %u): trtllm-bf16 needs bf16 and "
                 "H, I multiples of %d (H=%u I=%u)",
                 k, x->layer, KBLOCK, x->hidden, x->inter);
        return WST_ERR_INVALID;
    }
    /* w13 = L*2I*H elements is the larger buffer, w2 half of it; a layout
     * from a file may hold anything, so the product must not wrap */
    if (__builtin_mul_overflow(c->n_local, 2 * c->i, &w13) ||
        __builtin_mul_overflow(w13, c->h, &w13) ||
        __builtin_mul_overflow(w13, (uint64_t)c->es, &w13) ||
        !x_live(c, 0, shm, x->w13_region, x->w13_offset, w13) ||
        !x_live(c, 1, shm, x->w2_region, x->w2_offset, w13 / 2)) {
        wst_errf(err, errlen,
                 "verify: experts[%zu] (layer %u): w13 or w2 runs past its "
                 "region",
                 k, x->layer);
        return WST_ERR_INVALID;
    }
    for (p = 0; p < N_PROJ; p++)
        expert_stream(&c->s[p], x->layer, p, x, c->seed, c->version);
    return WST_OK;
}

/* Checks every experts entry the receiver would write. */
static wst_status_t verify_experts(const struct wst_layout *l,
                                   const unsigned char *shm, uint64_t seed,
                                   uint64_t version, uint64_t *checked,
                                   char *err, size_t errlen)
{
    struct xcheck c;
    wst_status_t status = WST_OK;
    uint64_t e;
    size_t k;

    for (k = 0; k < l->n_experts && status == WST_OK; k++) {
        const struct wst_layout_experts *x = &l->experts[k];

        if (wst_dtype_size(x->dtype) == 0 || x->n_experts == 0 ||
            x->ep_size == 0 || x->ep_rank >= x->ep_size || x->hidden == 0 ||
            x->inter == 0) {
            wst_errf(err, errlen, "verify: experts[%zu] malformed", k);
            return WST_ERR_INVALID;
        }
        if (x_refused(x))
            continue;
        memset(&c, 0, sizeof(c));
        c.seed = seed;
        c.version = version;
        status = x_setup(&c, l, k, shm, err, errlen);
        if (status != WST_OK)
            break;
        c.row = malloc((c.h > c.i ? c.h : c.i) * c.es);
        if (c.row == NULL) {
            wst_errf(err, errlen, "verify: out of memory");
            return WST_ERR_NO_MEMORY;
        }
        for (e = 0; e < c.n_local && status == WST_OK; e++) {
            status = c.kind == LOADER_CHECKPOINT
                         ? x_checkpoint(&c, e, err, errlen)
                         : x_trtllm(&c, e, err, errlen);
            if (status == WST_OK)
                *checked += 3 * c.i * c.h * c.es;
        }
        free(c.row);
    }
    return status;
}

wst_status_t wst_model_verify(const struct wst_layout *l, const void *shm_base,
                              uint64_t seed, uint64_t version,
                              uint64_t *bytes_checked_p, char *err,
                              size_t errlen)
{
    unsigned char *expect = NULL;
    uint64_t checked = 0, row, max_row = 1;
    size_t i;
    wst_status_t status = WST_OK;

    if (l == NULL ||
        (shm_base == NULL && (l->n_wants > 0 || l->n_experts > 0))) {
        wst_errf(err, errlen, "verify: NULL argument");
        return WST_ERR_INVALID;
    }
    for (i = 0; i < l->n_wants; i++) {
        const struct wst_box *b = &l->wants[i].box;

        if (b->ndim < 1 || b->ndim > WST_MAX_DIMS ||
            l->wants[i].region >= l->n_regions) {
            wst_errf(err, errlen, "verify: wants[%zu] malformed", i);
            return WST_ERR_INVALID;
        }
        row = (b->stop[b->ndim - 1] - b->start[b->ndim - 1]) *
              wst_dtype_size(l->wants[i].tensor.dtype);
        if (row > max_row)
            max_row = row;
    }
    expect = malloc(max_row);
    if (expect == NULL) {
        wst_errf(err, errlen, "verify: out of memory");
        return WST_ERR_NO_MEMORY;
    }
    for (i = 0; i < l->n_wants && status == WST_OK; i++) {
        if (box_elems(&l->wants[i].box) == 0)
            continue;
        status = verify_want(l, &l->wants[i], shm_base, seed, version, expect,
                             &checked, err, errlen);
    }
    free(expect);
    if (status == WST_OK)
        status =
            verify_experts(l, shm_base, seed, version, &checked, err, errlen);
    if (bytes_checked_p != NULL)
        *bytes_checked_p = checked;
    return status;
}

/* ---- presets ------------------------------------------------------------ */

struct preset {
    const char *name;
    uint32_t hidden, inter, n_layers, vocab, heads, kv_heads, head_dim;
    uint32_t n_experts, moe_inter;
    /* MLA (kv_lora != 0), dense first layers and the shared expert */
    uint32_t q_lora, kv_lora, qk_nope, qk_rope, v_head;
    uint32_t dense_layers, shared_inter;
};

static const struct preset presets[] = {
    {"tiny", 1024, 2048, 4, 4096, 8, 4, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"tiny-moe", 1024, 0, 4, 4096, 8, 4, 128, 16, 256, 0, 0, 0, 0, 0, 0, 0},
    {"qwen3-30b-a3b", 2048, 0, 48, 151936, 32, 4, 128, 128, 768, 0, 0, 0, 0, 0,
     0, 0},
    /* model.h says what each width stands for */
    {"deepseek-v3-narrow", 64, 384, 61, 2020, 128, 0, 0, 256, 16, 48, 32, 8, 4,
     8, 3, 16},
};

/* Most tensors a layer can have: 9 MLA attention and norm tensors (8 for
 * the others), 3 dense MLP tensors, the router and its bias, 3 shared
 * expert tensors and 3 grouped expert tensors. */
#define TENSORS_PER_LAYER 19
#define GLOBAL_TENSORS 3 /* embed_tokens, norm, lm_head */

/* Appends a bf16 tensor of 'ndim' (1..3) dims; unused dims are ignored. */
static void add_tensor(struct wst_model *m, const char *name, uint32_t ndim,
                       uint64_t d0, uint64_t d1, uint64_t d2)
{
    struct wst_tensor_desc *t = &m->tensors[m->n_tensors++];

    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->dtype = WST_DTYPE_BF16;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 0;
    t->shape[2] = ndim > 2 ? d2 : 0;
}

/* Whether layer l of m has routed experts (and no dense MLP). */
static int moe_layer(const struct wst_model *m, uint32_t l)
{
    return m->n_experts != 0 && l >= m->dense_layers;
}

static void add_layer(struct wst_model *m, uint32_t l)
{
    char n[WST_NAME_MAX];
    uint64_t h = m->hidden, q = (uint64_t)m->heads * m->head_dim;
    uint64_t kv = (uint64_t)m->kv_heads * m->head_dim;
    uint64_t heads = m->heads;
    int moe = moe_layer(m, l);

#define LNAME(suffix) (snprintf(n, sizeof(n), "model.layers.%u." suffix, l), n)
    add_tensor(m, LNAME("input_layernorm.weight"), 1, h, 0, 0);
    add_tensor(m, LNAME("post_attention_layernorm.weight"), 1, h, 0, 0);
    if (m->kv_lora != 0) {
        add_tensor(m, LNAME("self_attn.q_a_proj.weight"), 2, m->q_lora, h, 0);
        add_tensor(m, LNAME("self_attn.q_a_layernorm.weight"), 1, m->q_lora, 0,
                   0);
        add_tensor(m, LNAME("self_attn.q_b_proj.weight"), 2,
                   heads * (m->qk_nope + m->qk_rope), m->q_lora, 0);
        add_tensor(m, LNAME("self_attn.kv_a_proj_with_mqa.weight"), 2,
                   m->kv_lora + m->qk_rope, h, 0);
        add_tensor(m, LNAME("self_attn.kv_a_layernorm.weight"), 1, m->kv_lora,
                   0, 0);
        add_tensor(m, LNAME("self_attn.kv_b_proj.weight"), 2,
                   heads * (m->qk_nope + m->v_head), m->kv_lora, 0);
        add_tensor(m, LNAME("self_attn.o_proj.weight"), 2, h, heads * m->v_head,
                   0);
    } else {
        add_tensor(m, LNAME("self_attn.q_proj.weight"), 2, q, h, 0);
        add_tensor(m, LNAME("self_attn.k_proj.weight"), 2, kv, h, 0);
        add_tensor(m, LNAME("self_attn.v_proj.weight"), 2, kv, h, 0);
        add_tensor(m, LNAME("self_attn.o_proj.weight"), 2, h, q, 0);
        add_tensor(m, LNAME("self_attn.q_norm.weight"), 1, m->head_dim, 0, 0);
        add_tensor(m, LNAME("self_attn.k_norm.weight"), 1, m->head_dim, 0, 0);
    }
    if (m->inter != 0 && !moe) {
        add_tensor(m, LNAME("mlp.gate_proj.weight"), 2, m->inter, h, 0);
        add_tensor(m, LNAME("mlp.up_proj.weight"), 2, m->inter, h, 0);
        add_tensor(m, LNAME("mlp.down_proj.weight"), 2, h, m->inter, 0);
    }
    if (moe)
        add_tensor(m, LNAME("mlp.gate.weight"), 2, m->n_experts, h, 0);
    if (moe && m->kv_lora != 0) {
        add_tensor(m, LNAME("mlp.gate.e_score_correction_bias"), 1,
                   m->n_experts, 0, 0);
        m->tensors[m->n_tensors - 1].dtype = WST_DTYPE_F32;
    }
    if (moe && m->shared_inter != 0) {
        add_tensor(m, LNAME("mlp.shared_experts.gate_proj.weight"), 2,
                   m->shared_inter, h, 0);
        add_tensor(m, LNAME("mlp.shared_experts.up_proj.weight"), 2,
                   m->shared_inter, h, 0);
        add_tensor(m, LNAME("mlp.shared_experts.down_proj.weight"), 2, h,
                   m->shared_inter, 0);
    }
    if (moe && m->moe_inter != 0) {
        add_tensor(m, LNAME("mlp.experts.gate_proj.weight"), 3, m->n_experts,
                   m->moe_inter, h);
        add_tensor(m, LNAME("mlp.experts.up_proj.weight"), 3, m->n_experts,
                   m->moe_inter, h);
        add_tensor(m, LNAME("mlp.experts.down_proj.weight"), 3, m->n_experts, h,
                   m->moe_inter);
    }
#undef LNAME
}

#define DENSE_COLS 4096
#define DENSE_PER_LAYER 2
#define DENSE_MAX_MIB (1ull << 20) /* 1 TiB */

/* "dense:<MiB>": DENSE_PER_LAYER [rows, DENSE_COLS] bf16 tensors per layer,
 * exactly MiB mebibytes in all. */
static wst_status_t dense_preset(const char *name, uint32_t n_layers,
                                 struct wst_model *m, char *err, size_t errlen)
{
    const char *arg = name + strlen("dense:");
    char *end = NULL;
    unsigned long long mib = strtoull(arg, &end, 10);
    uint64_t row_bytes = DENSE_COLS * wst_dtype_size(WST_DTYPE_BF16);
    uint64_t rows, n, i;
    struct wst_model tmp;

    if (n_layers == 0)
        n_layers = 4;
    if (*arg < '0' || *arg > '9' || *end != '\0' || mib == 0 ||
        mib > DENSE_MAX_MIB || n_layers > 100000) {
        wst_errf(err, errlen,
                 "model preset \"%s\": want dense:<MiB> with 1..%llu MiB and "
                 "at most 100000 layers",
                 name, DENSE_MAX_MIB);
        return WST_ERR_INVALID;
    }
    rows = (uint64_t)mib * (1ull << 20) / row_bytes;
    n = (uint64_t)n_layers * DENSE_PER_LAYER;
    if (rows < n) {
        wst_errf(err, errlen,
                 "model preset \"%s\": %llu MiB is too small for %u "
                 "layers",
                 name, mib, n_layers);
        return WST_ERR_INVALID;
    }
    memset(&tmp, 0, sizeof(tmp));
    snprintf(tmp.preset, sizeof(tmp.preset), "%s", name);
    tmp.hidden = DENSE_COLS;
    tmp.n_layers = n_layers;
    tmp.dense_cols = DENSE_COLS;
    tmp.tensors = malloc(n * sizeof(*tmp.tensors));
    if (tmp.tensors == NULL) {
        wst_errf(err, errlen, "model %s: out of memory", name);
        return WST_ERR_NO_MEMORY;
    }
    for (i = 0; i < n; i++) {
        char tn[WST_NAME_MAX];

        snprintf(tn, sizeof(tn), "model.layers.%llu.dense.w%llu.weight",
                 (unsigned long long)(i / DENSE_PER_LAYER),
                 (unsigned long long)(i % DENSE_PER_LAYER));
        add_tensor(&tmp, tn, 2, rows / n + (i < rows % n ? 1 : 0), DENSE_COLS,
                   0);
    }
    *m = tmp;
    return WST_OK;
}

wst_status_t wst_model_preset(const char *name, uint32_t n_layers,
                              struct wst_model *m, char *err, size_t errlen)
{
    return wst_model_preset_experts(name, n_layers, 0, m, err, errlen);
}

wst_status_t wst_model_preset_experts(const char *name, uint32_t n_layers,
                                      uint32_t n_experts, struct wst_model *m,
                                      char *err, size_t errlen)
{
    const struct preset *p = NULL;
    struct wst_model tmp;
    size_t i;
    uint32_t l;

    if (name != NULL && m != NULL && strncmp(name, "dense:", 6) == 0 &&
        n_experts == 0)
        return dense_preset(name, n_layers, m, err, errlen);
    for (i = 0; name != NULL && i < sizeof(presets) / sizeof(presets[0]); i++)
        if (strcmp(presets[i].name, name) == 0)
            p = &presets[i];
    if (p == NULL || m == NULL) {
        wst_errf(err, errlen,
                 "unknown model preset \"%s\" (tiny, tiny-moe, "
                 "qwen3-30b-a3b, deepseek-v3-narrow, dense:<MiB>)",
                 name != NULL ? name : "(null)");
        return WST_ERR_INVALID;
    }
    if (n_experts != 0 &&
        (p->n_experts == 0 || p->moe_inter == 0 || n_experts > 65536)) {
        wst_errf(err, errlen,
                 "model %s: cannot have %u routed experts (a MoE preset "
                 "takes 1..65536)",
                 p->name, n_experts);
        return WST_ERR_INVALID;
    }
    memset(&tmp, 0, sizeof(tmp));
    snprintf(tmp.preset, sizeof(tmp.preset), "%s", p->name);
    tmp.hidden = p->hidden;
    tmp.inter = p->inter;
    tmp.n_layers = n_layers != 0 ? n_layers : p->n_layers;
    tmp.vocab = p->vocab;
    tmp.heads = p->heads;
    tmp.kv_heads = p->kv_heads;
    tmp.head_dim = p->head_dim;
    tmp.n_experts = n_experts != 0 ? n_experts : p->n_experts;
    tmp.moe_inter = p->moe_inter;
    tmp.q_lora = p->q_lora;
    tmp.kv_lora = p->kv_lora;
    tmp.qk_nope = p->qk_nope;
    tmp.qk_rope = p->qk_rope;
    tmp.v_head = p->v_head;
    tmp.dense_layers = p->dense_layers;
    tmp.shared_inter = p->shared_inter;
    if (tmp.n_layers > 100000) {
        wst_errf(err, errlen, "model %s: %u layers is too many", p->name,
                 tmp.n_layers);
        return WST_ERR_INVALID;
    }
    tmp.tensors =
        malloc(((size_t)tmp.n_layers * TENSORS_PER_LAYER + GLOBAL_TENSORS) *
               sizeof(*tmp.tensors));
    if (tmp.tensors == NULL) {
        wst_errf(err, errlen, "model %s: out of memory", p->name);
        return WST_ERR_NO_MEMORY;
    }
    add_tensor(&tmp, "model.embed_tokens.weight", 2, tmp.vocab, tmp.hidden, 0);
    for (l = 0; l < tmp.n_layers; l++)
        add_layer(&tmp, l);
    add_tensor(&tmp, "model.norm.weight", 1, tmp.hidden, 0, 0);
    add_tensor(&tmp, "lm_head.weight", 2, tmp.vocab, tmp.hidden, 0);
    *m = tmp;
    return WST_OK;
}

void wst_model_release(struct wst_model *m)
{
    if (m == NULL)
        return;
    free(m->tensors);
    memset(m, 0, sizeof(*m));
}

uint64_t wst_model_bytes(const struct wst_model *m)
{
    uint64_t total = 0, bytes;
    size_t i;

    for (i = 0; i < m->n_tensors; i++) {
        if (wst_tensor_desc_check(&m->tensors[i], NULL, &bytes) == WST_OK)
            total += bytes;
    }
    return total;
}

/* ---- trainer shards ----------------------------------------------------- */

/* [start, stop) of part 'rank' of 'len' split in ceil-sized chunks. */
static void ceil_chunk(uint64_t len, uint32_t rank, uint32_t world,
                       uint64_t *start, uint64_t *stop)
{
    uint64_t chunk = (len + world - 1) / world;
    uint64_t s = chunk * rank, e = s + chunk;

    *start = s < len ? s : len;
    *stop = e < len ? e : len;
}

wst_status_t wst_model_trainer_shards(const struct wst_model *m, uint32_t rank,
                                      uint32_t world, struct wst_have **haves_p,
                                      size_t *n_p)
{
    struct wst_have *haves;
    size_t i;
    uint32_t d;

    if (m == NULL || haves_p == NULL || n_p == NULL || world == 0 ||
        rank >= world)
        return WST_ERR_INVALID;
    haves = calloc(m->n_tensors ? m->n_tensors : 1, sizeof(*haves));
    if (haves == NULL)
        return WST_ERR_NO_MEMORY;
    for (i = 0; i < m->n_tensors; i++) {
        struct wst_have *h = &haves[i];
        const struct wst_tensor_desc *t = &m->tensors[i];

        h->tensor = *t;
        h->mem = WST_MEM_HOST;
        h->box.ndim = t->ndim;
        h->flat = t->ndim == 1;
        for (d = 0; d < t->ndim; d++)
            h->box.stop[d] = t->shape[d];
        ceil_chunk(t->shape[0], rank, world, &h->box.start[0], &h->box.stop[0]);
    }
    *haves_p = haves;
    *n_p = m->n_tensors;
    return WST_OK;
}

/* How a Megatron-style trainer splits a tensor over its TP ranks: 0 on
 * dim 0 (column-parallel), 1 on dim 1 (row-parallel), -1 not at all. */
static int megatron_split(const struct wst_model *m,
                          const struct wst_tensor_desc *t)
{
    static const char *const column[] = {
        ".q_proj.weight",   ".k_proj.weight",    ".v_proj.weight",
        ".q_b_proj.weight", ".kv_b_proj.weight", ".gate_proj.weight",
        ".up_proj.weight"};
    static const char *const row[] = {".o_proj.weight", ".down_proj.weight"};
    size_t len = strlen(t->name), k, n;

    if (m->dense_cols != 0 ||
        strcmp(t->name, "model.embed_tokens.weight") == 0 ||
        strcmp(t->name, "lm_head.weight") == 0)
        return 0;
    if (t->ndim != 2)
        return -1;
    for (k = 0; k < sizeof(column) / sizeof(column[0]); k++) {
        n = strlen(column[k]);
        if (len > n && strcmp(t->name + len - n, column[k]) == 0)
            return 0;
    }
    for (k = 0; k < sizeof(row) / sizeof(row[0]); k++) {
        n = strlen(row[k]);
        if (len > n && strcmp(t->name + len - n, row[k]) == 0)
            return 1;
    }
    return -1;
}

wst_status_t wst_model_trainer_shards_tp(const struct wst_model *m,
                                         uint32_t rank, uint32_t world,
                                         uint32_t tp, struct wst_have **haves_p,
                                         size_t *n_p)
{
    struct wst_have *haves;
    uint32_t layer;
    size_t i;
    int dim;
    wst_status_t status;

    if (tp == 0)
        return wst_model_trainer_shards(m, rank, world, haves_p, n_p);
    if (world % tp != 0)
        return WST_ERR_INVALID;
    status = wst_model_trainer_shards(m, rank, world, &haves, n_p);
    if (status != WST_OK)
        return status;
    for (i = 0; i < *n_p; i++) {
        struct wst_have *h = &haves[i];
        const struct wst_tensor_desc *t = &m->tensors[i];

        if (expert_proj(t->name, &layer) >= 0)
            continue; /* EP over every rank, as the FSDP split has it */
        h->flat = 0;
        h->box.start[0] = 0;
        h->box.stop[0] = t->shape[0];
        dim = megatron_split(m, t);
        if (dim >= 0)
            ceil_chunk(t->shape[dim], rank % tp, tp, &h->box.start[dim],
                       &h->box.stop[dim]);
    }
    *haves_p = haves;
    return WST_OK;
}

/* ---- engine layout ------------------------------------------------------ */

struct builder {
    const struct wst_model *m;
    struct wst_layout *l;
    const struct wst_moe_options *opt; /* never NULL */
    uint64_t end;                      /* bytes used in the shm */
    size_t esize;
};

static const struct wst_tensor_desc *find_tensor(const struct wst_model *m,
                                                 const char *name)
{
    size_t i;

    for (i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return &m->tensors[i];
    return NULL;
}

static uint32_t add_region(struct builder *b, const char *name, uint64_t rows,
                           uint64_t cols)
{
    struct wst_layout_region *r = &b->l->regions[b->l->n_regions];

    snprintf(r->name, sizeof(r->name), "%s", name);
    r->offset = (b->end + REGION_ALIGN - 1) / REGION_ALIGN * REGION_ALIGN;
    r->bytes = rows * (cols != 0 ? cols : 1) * b->esize;
    b->end = r->offset + r->bytes;
    return (uint32_t)b->l->n_regions++;
}

/* Wants rows [r0, r1) x cols [c0, c1) of tensor 'name' (cols ignored for
 * 1-D tensors) at 'offset' into 'region'. Empty boxes are skipped. */
static void add_want(struct builder *b, const char *name, uint32_t region,
                     uint64_t offset, uint64_t r0, uint64_t r1, uint64_t c0,
                     uint64_t c1)
{
    const struct wst_tensor_desc *t = find_tensor(b->m, name);
    struct wst_want *w;

    if (t == NULL || r0 >= r1)
        return;
    w = &b->l->wants[b->l->n_wants++];
    memset(w, 0, sizeof(*w));
    w->tensor = *t;
    w->box.ndim = t->ndim;
    w->box.start[0] = r0;
    w->box.stop[0] = r1;
    w->box.start[1] = t->ndim > 1 ? c0 : 0;
    w->box.stop[1] = t->ndim > 1 ? c1 : 0;
    w->region = region;
    w->offset = offset;
}

/* One region holding the whole tensor, wanted whole (replicated). */
static void add_whole(struct builder *b, const char *name)
{
    const struct wst_tensor_desc *t = find_tensor(b->m, name);
    uint64_t cols = t->ndim > 1 ? t->shape[1] : 0;
    size_t esize = b->esize;
    uint32_t r;

    /* sized by its own dtype (the fp32 router bias among bf16) */
    b->esize = wst_dtype_size(t->dtype);
    r = add_region(b, name, t->shape[0], cols);
    b->esize = esize;
    add_want(b, name, r, 0, 0, t->shape[0], 0, cols);
}

/* One MoE layer's routed experts: regions w13 and w2 and the experts entry
 * pointing at them (wst_model_engine_layout_moe says what each option
 * does). No wants: the receiver stages the grouped tensors itself. */
static wst_status_t add_experts(struct builder *b, uint32_t layer, uint32_t r,
                                uint32_t tp)
{
    const struct wst_model *m = b->m;
    const struct wst_moe_options *o = b->opt;
    struct wst_layout_experts *x = &b->l->experts[b->l->n_experts];
    uint64_t e = m->n_experts, h = m->hidden, n_local, inter;
    char n[WST_NAME_MAX];
    uint32_t k;

    memset(x, 0, sizeof(*x));
    x->layer = layer;
    snprintf(x->loader, sizeof(x->loader), "%s",
             o->loader != NULL ? o->loader : "checkpoint");
    x->dtype = WST_DTYPE_BF16;
    x->n_experts = m->n_experts;
    x->hidden = m->hidden;
    x->inter = m->moe_inter;
    if (o->shard_inter) {
        x->ep_rank = 0;
        x->ep_size = 1;
        x->inter_tp_rank = r;
        x->inter_tp_size = tp;
        n_local = e;
        inter = (m->moe_inter + tp - 1) / tp;
    } else {
        x->ep_rank = r;
        x->ep_size = tp;
        /* ceil: E % tp != 0 is the receiver's refusal to make, not ours */
        n_local = (e + tp - 1) / tp;
        inter = m->moe_inter;
    }
    if (o->round_robin) {
        x->n_expert_ids = e > r ? (uint32_t)((e - r + tp - 1) / tp) : 0;
        x->expert_ids = malloc((x->n_expert_ids ? x->n_expert_ids : 1) *
                               sizeof(*x->expert_ids));
        if (x->expert_ids == NULL)
            return WST_ERR_NO_MEMORY;
        for (k = 0; k < x->n_expert_ids; k++)
            x->expert_ids[k] = r + k * tp;
    }
    snprintf(n, sizeof(n), "model.layers.%u.mlp.experts.w13_weight", layer);
    x->w13_region = add_region(b, n, n_local * 2 * inter, h);
    snprintf(n, sizeof(n), "model.layers.%u.mlp.experts.w2_weight", layer);
    x->w2_region = add_region(b, n, n_local * h, inter);
    b->l->n_experts++;
    return WST_OK;
}

/* A column-parallel pair fused in one region (gate and up of an MLP):
 * rank r's rows [r*ir, (r+1)*ir) of each, ir = inter/tp, back to back;
 * then the row-parallel down_proj's columns. 'prefix' ends in '.'. */
static void add_tp_mlp(struct builder *b, const char *prefix, uint64_t inter,
                       uint32_t r, uint32_t tp)
{
    uint64_t h = b->m->hidden, ir = inter / tp, es = b->esize;
    char n[WST_NAME_MAX];
    uint32_t reg;

#define PNAME(suffix) (snprintf(n, sizeof(n), "%s" suffix, prefix), n)
    reg = add_region(b, PNAME("gate_up_proj.weight"), 2 * ir, h);
    add_want(b, PNAME("gate_proj.weight"), reg, 0, r * ir, (r + 1) * ir, 0, h);
    add_want(b, PNAME("up_proj.weight"), reg, ir * h * es, r * ir, (r + 1) * ir,
             0, h);
    reg = add_region(b, PNAME("down_proj.weight"), h, ir);
    add_want(b, n, reg, 0, 0, h, r * ir, (r + 1) * ir);
#undef PNAME
}

/* Rows [r*rows/tp, (r+1)*rows/tp) of a column-parallel tensor in a region
 * of its own. */
static void add_rows(struct builder *b, const char *name, uint32_t r,
                     uint32_t tp)
{
    const struct wst_tensor_desc *t = find_tensor(b->m, name);
    uint64_t rows = t->shape[0] / tp, cols = t->shape[1];
    uint32_t reg = add_region(b, name, rows, cols);

    add_want(b, name, reg, 0, r * rows, (r + 1) * rows, 0, cols);
}

/* MLA attention as SGLang's DeepSeek-V3 holds it under TP: the low-rank
 * projections and their norms replicated, q_b_proj and kv_b_proj split by
 * heads (dim 0), o_proj by heads on dim 1. */
static void add_mla_layout(struct builder *b, const char *p, uint32_t r,
                           uint32_t tp)
{
    const struct wst_model *m = b->m;
    uint64_t h = m->hidden, oc = (uint64_t)m->heads * m->v_head / tp;
    char n[WST_NAME_MAX];
    uint32_t reg;

#define NAME(suffix) (snprintf(n, sizeof(n), "%s" suffix, p), n)
    add_whole(b, NAME("self_attn.q_a_proj.weight"));
    add_whole(b, NAME("self_attn.q_a_layernorm.weight"));
    add_rows(b, NAME("self_attn.q_b_proj.weight"), r, tp);
    add_whole(b, NAME("self_attn.kv_a_proj_with_mqa.weight"));
    add_whole(b, NAME("self_attn.kv_a_layernorm.weight"));
    add_rows(b, NAME("self_attn.kv_b_proj.weight"), r, tp);
    reg = add_region(b, NAME("self_attn.o_proj.weight"), h, oc);
    add_want(b, n, reg, 0, 0, h, r * oc, (r + 1) * oc);
#undef NAME
}

static void add_gqa_layout(struct builder *b, const char *p, uint32_t r,
                           uint32_t tp)
{
    const struct wst_model *m = b->m;
    uint64_t h = m->hidden, hd = m->head_dim, es = b->esize;
    uint64_t qr = (uint64_t)m->heads * hd / tp, kvr, k0, oc;
    char n[WST_NAME_MAX];
    uint32_t reg;

    if (tp <= m->kv_heads) {
        kvr = (uint64_t)m->kv_heads / tp * hd;
        k0 = r * kvr;
    } else {
        kvr = hd;
        k0 = (uint64_t)r * m->kv_heads / tp * hd;
    }
#define NAME(suffix) (snprintf(n, sizeof(n), "%s" suffix, p), n)
    reg = add_region(b, NAME("self_attn.qkv_proj.weight"), qr + 2 * kvr, h);
    add_want(b, NAME("self_attn.q_proj.weight"), reg, 0, r * qr, (r + 1) * qr,
             0, h);
    add_want(b, NAME("self_attn.k_proj.weight"), reg, qr * h * es, k0, k0 + kvr,
             0, h);
    add_want(b, NAME("self_attn.v_proj.weight"), reg, (qr + kvr) * h * es, k0,
             k0 + kvr, 0, h);
    oc = (uint64_t)m->heads * hd / tp;
    reg = add_region(b, NAME("self_attn.o_proj.weight"), h, oc);
    add_want(b, n, reg, 0, 0, h, r * oc, (r + 1) * oc);
    add_whole(b, NAME("self_attn.q_norm.weight"));
    add_whole(b, NAME("self_attn.k_norm.weight"));
#undef NAME
}

static wst_status_t add_layer_layout(struct builder *b, uint32_t l, uint32_t r,
                                     uint32_t tp)
{
    const struct wst_model *m = b->m;
    int moe = moe_layer(m, l);
    char n[WST_NAME_MAX], p[64];

    snprintf(p, sizeof(p), "model.layers.%u.", l);
#define NAME(suffix) (snprintf(n, sizeof(n), "%s" suffix, p), n)
    add_whole(b, NAME("input_layernorm.weight"));
    add_whole(b, NAME("post_attention_layernorm.weight"));
    if (m->kv_lora != 0)
        add_mla_layout(b, p, r, tp);
    else
        add_gqa_layout(b, p, r, tp);
    if (m->inter != 0 && !moe)
        add_tp_mlp(b, NAME("mlp."), m->inter, r, tp);
    if (moe)
        add_whole(b, NAME("mlp.gate.weight"));
    if (moe && m->kv_lora != 0)
        add_whole(b, NAME("mlp.gate.e_score_correction_bias"));
    if (moe && m->shared_inter != 0) {
        /* TP-split where the ranks divide it, as the engine would;
         * replicated otherwise (more ranks than its rows) */
        if (m->shared_inter % tp == 0) {
            add_tp_mlp(b, NAME("mlp.shared_experts."), m->shared_inter, r, tp);
        } else {
            add_whole(b, NAME("mlp.shared_experts.gate_proj.weight"));
            add_whole(b, NAME("mlp.shared_experts.up_proj.weight"));
            add_whole(b, NAME("mlp.shared_experts.down_proj.weight"));
        }
    }
#undef NAME
    if (moe && m->moe_inter != 0)
        return add_experts(b, l, r, tp);
    return WST_OK;
}

/* Embedding-like tensor: rows padded to a multiple of VOCAB_PAD * tp, split
 * on dim 0; only the real rows are wanted. */
static void add_vocab(struct builder *b, const char *name, uint32_t r,
                      uint32_t tp)
{
    uint64_t v = b->m->vocab, h = b->m->hidden, pad = (uint64_t)VOCAB_PAD * tp;
    uint64_t rows = (v + pad - 1) / pad * pad / tp;
    uint64_t r0 = r * rows, r1 = r0 + rows;
    uint32_t reg = add_region(b, name, rows, h);

    add_want(b, name, reg, 0, r0 < v ? r0 : v, r1 < v ? r1 : v, 0, h);
}

static wst_status_t tp_check(const struct wst_model *m, uint32_t tp, char *err,
                             size_t errlen)
{
    const char *what = NULL;
    uint32_t val = 0;

    if (m->heads % tp != 0) {
        what = "query heads";
        val = m->heads;
    } else if (m->kv_lora == 0 && tp <= m->kv_heads && m->kv_heads % tp != 0) {
        what = "kv heads";
        val = m->kv_heads;
    } else if (m->kv_lora == 0 && tp > m->kv_heads && tp % m->kv_heads != 0) {
        what = "kv heads (nor is it a multiple of them)";
        val = m->kv_heads;
    } else if (m->hidden % tp != 0) {
        what = "hidden size";
        val = m->hidden;
    } else if (m->inter != 0 && m->inter % tp != 0) {
        what = "intermediate size";
        val = m->inter;
    }
    if (what == NULL)
        return WST_OK;
    wst_errf(err, errlen, "model %s: tp=%u does not divide %s %u", m->preset,
             tp, what, val);
    return WST_ERR_UNSUPPORTED_LAYOUT;
}

/* Dense synthetic model: rank r's ceil chunk of every tensor's rows, one
 * region per tensor. */
static wst_status_t dense_layout(const struct wst_model *m, uint32_t tp_rank,
                                 uint32_t tp, struct wst_layout *out, char *err,
                                 size_t errlen)
{
    struct wst_layout l;
    struct builder b;
    size_t i;

    memset(&l, 0, sizeof(l));
    l.rank = tp_rank;
    l.regions = calloc(m->n_tensors ? m->n_tensors : 1, sizeof(*l.regions));
    l.wants = calloc(m->n_tensors ? m->n_tensors : 1, sizeof(*l.wants));
    if (l.regions == NULL || l.wants == NULL) {
        wst_layout_release(&l);
        wst_errf(err, errlen, "engine layout: out of memory");
        return WST_ERR_NO_MEMORY;
    }
    b.m = m;
    b.l = &l;
    b.opt = NULL;
    b.end = 0;
    b.esize = wst_dtype_size(WST_DTYPE_BF16);
    for (i = 0; i < m->n_tensors; i++) {
        const struct wst_tensor_desc *t = &m->tensors[i];
        uint64_t r0, r1;
        uint32_t reg;

        ceil_chunk(t->shape[0], tp_rank, tp, &r0, &r1);
        reg = add_region(&b, t->name, r1 - r0, t->shape[1]);
        add_want(&b, t->name, reg, 0, r0, r1, 0, t->shape[1]);
    }
    l.shm_bytes = (b.end + REGION_ALIGN - 1) / REGION_ALIGN * REGION_ALIGN;
    *out = l;
    return WST_OK;
}

static wst_status_t moe_options_check(const struct wst_moe_options *o,
                                      char *err, size_t errlen)
{
    if (o->loader != NULL && strcmp(o->loader, "checkpoint") != 0 &&
        strcmp(o->loader, "trtllm-bf16") != 0) {
        wst_errf(err, errlen,
                 "engine layout: unknown expert loader \"%s\" (checkpoint, "
                 "trtllm-bf16)",
                 o->loader);
        return WST_ERR_INVALID;
    }
    if (o->round_robin && o->shard_inter) {
        wst_errf(err, errlen,
                 "engine layout: round_robin and shard_inter exclude each "
                 "other");
        return WST_ERR_INVALID;
    }
    return WST_OK;
}

/* Most regions and wants a layer can have: 15 regions (2 norms, 7 MLA
 * tensors, router, its bias, shared gate_up and down, experts w13 and
 * w2); 14 wants (2 norms, 7 MLA, router, bias, 3 shared). */
#define LAYOUT_PER_LAYER 16
#define LAYOUT_GLOBAL 3 /* embed_tokens, norm, lm_head */

/* The transformer presets' layout (REFIT_LAYOUTS.md section 2). */
static wst_status_t engine_layout(const struct wst_model *m, uint32_t tp_rank,
                                  uint32_t tp,
                                  const struct wst_moe_options *opt,
                                  struct wst_layout *out, char *err,
                                  size_t errlen)
{
    struct wst_layout l;
    struct builder b;
    size_t cap;
    uint32_t i;
    int moe = m->n_experts != 0 && m->moe_inter != 0 && m->n_layers != 0;
    wst_status_t status;

    status = tp_check(m, tp, err, errlen);
    if (status != WST_OK)
        return status;
    cap = (size_t)m->n_layers * LAYOUT_PER_LAYER + LAYOUT_GLOBAL;
    memset(&l, 0, sizeof(l));
    l.rank = tp_rank;
    l.regions = calloc(cap, sizeof(*l.regions));
    l.wants = calloc(cap, sizeof(*l.wants));
    if (moe)
        l.experts = calloc(m->n_layers, sizeof(*l.experts));
    if (l.regions == NULL || l.wants == NULL || (moe && l.experts == NULL))
        goto err_drop_layout;
    b.m = m;
    b.l = &l;
    b.opt = opt;
    b.end = 0;
    b.esize = wst_dtype_size(WST_DTYPE_BF16);
    add_vocab(&b, "model.embed_tokens.weight", tp_rank, tp);
    for (i = 0; i < m->n_layers && status == WST_OK; i++)
        status = add_layer_layout(&b, i, tp_rank, tp);
    if (status != WST_OK)
        goto err_drop_layout;
    add_whole(&b, "model.norm.weight");
    add_vocab(&b, "lm_head.weight", tp_rank, tp);
    l.shm_bytes = (b.end + REGION_ALIGN - 1) / REGION_ALIGN * REGION_ALIGN;
    *out = l;
    return WST_OK;

err_drop_layout:
    wst_layout_release(&l); /* frees the experts' expert_ids too */
    wst_errf(err, errlen, "engine layout: out of memory");
    return WST_ERR_NO_MEMORY;
}

wst_status_t wst_model_engine_layout_moe(const struct wst_model *m,
                                         uint32_t tp_rank, uint32_t tp,
                                         const struct wst_moe_options *opt,
                                         struct wst_layout *out, char *err,
                                         size_t errlen)
{
    static const struct wst_moe_options defaults;
    wst_status_t status;

    if (m == NULL || out == NULL || tp == 0 || tp_rank >= tp) {
        wst_errf(err, errlen, "engine layout: bad arguments (rank %u of tp %u)",
                 tp_rank, tp);
        return WST_ERR_INVALID;
    }
    if (m->dense_cols != 0)
        return dense_layout(m, tp_rank, tp, out, err, errlen);
    if (m->kv_heads == 0 && m->kv_lora == 0) {
        wst_errf(err, errlen, "engine layout: model %s has no kv heads",
                 m->preset);
        return WST_ERR_INVALID;
    }
    if (opt == NULL)
        opt = &defaults;
    status = moe_options_check(opt, err, errlen);
    if (status != WST_OK)
        return status;
    return engine_layout(m, tp_rank, tp, opt, out, err, errlen);
}

wst_status_t wst_model_engine_layout(const struct wst_model *m,
                                     uint32_t tp_rank, uint32_t tp,
                                     struct wst_layout *out, char *err,
                                     size_t errlen)
{
    return wst_model_engine_layout_moe(m, tp_rank, tp, NULL, out, err, errlen);
}
