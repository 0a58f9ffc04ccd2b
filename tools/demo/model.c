/* model.c - synthetic models: presets, engine layouts, trainer shards, data.
 *
 * Data generator: key = mix(mix(seed ^ fnv1a(name)) + version * G), and
 * element i (global row-major flat index) is the low bytes, little-endian,
 * of mix(key + (i + 1) * G), where mix is the splitmix64 finalizer and G the
 * golden-ratio increment. Filling and verifying walk a box row by row, so
 * the name hash and key are computed once per call and the inner loop is one
 * mix per element.
 */
#include "model.h"

#include "dtype.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN 0x9e3779b97f4a7c15ull
#define REGION_ALIGN 64
#define VOCAB_PAD 64 /* engine pads the vocabulary to 64 rows per TP rank */

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

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

uint64_t wst_model_shard_bytes(const struct wst_have *h)
{
    return box_elems(&h->box) * wst_dtype_size(h->tensor.dtype);
}

void wst_model_fill_shard(const struct wst_have *h, uint64_t seed,
                          uint64_t version, void *buf)
{
    const struct wst_box *b = &h->box;
    size_t esize = wst_dtype_size(h->tensor.dtype);
    uint64_t key = data_key(h->tensor.name, seed, version);
    uint64_t idx[WST_MAX_DIMS], row;
    unsigned char *dst = buf;
    uint32_t last = b->ndim - 1;

    if (box_elems(b) == 0)
        return;
    if (h->flat) {
        gen_run(key, esize, b->start[0], b->stop[0] - b->start[0], dst);
        return;
    }
    row = b->stop[last] - b->start[last];
    memcpy(idx, b->start, sizeof(idx));
    do {
        gen_run(key, esize, flat_index(&h->tensor, idx, b->start[last]), row,
                dst);
        dst += row * esize;
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
    uint64_t key = data_key(w->tensor.name, seed, version);
    uint32_t last = b->ndim - 1;
    uint64_t idx[WST_MAX_DIMS], row_bytes, pitch, g;
    const unsigned char *src;
    size_t k;
    char e_hex[17], g_hex[17];

    row_bytes = (b->stop[last] - b->start[last]) * esize;
    pitch = w->row_pitch != 0 ? w->row_pitch : row_bytes;
    src = shm + l->regions[w->region].offset + w->offset;
    memcpy(idx, b->start, sizeof(idx));
    do {
        g = flat_index(&w->tensor, idx, b->start[last]);
        gen_run(key, esize, g, row_bytes / esize, expect);
        if (memcmp(expect, src, row_bytes) != 0) {
            for (k = 0; memcmp(expect + k, src + k, esize) == 0; k += esize)
                ;
            hex_bytes(expect + k, esize, e_hex);
            hex_bytes(src + k, esize, g_hex);
            set_err(err, errlen,
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

wst_status_t wst_model_verify(const struct wst_layout *l, const void *shm_base,
                              uint64_t seed, uint64_t version,
                              uint64_t *bytes_checked_p, char *err,
                              size_t errlen)
{
    unsigned char *expect = NULL;
    uint64_t checked = 0, row, max_row = 1;
    size_t i;
    wst_status_t status = WST_OK;

    if (l == NULL || (shm_base == NULL && l->n_wants > 0)) {
        set_err(err, errlen, "verify: NULL argument");
        return WST_ERR_INVALID;
    }
    for (i = 0; i < l->n_wants; i++) {
        const struct wst_box *b = &l->wants[i].box;

        if (b->ndim < 1 || b->ndim > WST_MAX_DIMS ||
            l->wants[i].region >= l->n_regions) {
            set_err(err, errlen, "verify: wants[%zu] malformed", i);
            return WST_ERR_INVALID;
        }
        row = (b->stop[b->ndim - 1] - b->start[b->ndim - 1]) *
              wst_dtype_size(l->wants[i].tensor.dtype);
        if (row > max_row)
            max_row = row;
    }
    expect = malloc(max_row);
    if (expect == NULL) {
        set_err(err, errlen, "verify: out of memory");
        return WST_ERR_NO_MEMORY;
    }
    for (i = 0; i < l->n_wants && status == WST_OK; i++) {
        if (box_elems(&l->wants[i].box) == 0)
            continue;
        status = verify_want(l, &l->wants[i], shm_base, seed, version, expect,
                             &checked, err, errlen);
    }
    free(expect);
    if (bytes_checked_p != NULL)
        *bytes_checked_p = checked;
    return status;
}

/* ---- presets ------------------------------------------------------------ */

struct preset {
    const char *name;
    uint32_t hidden, inter, n_layers, vocab, heads, kv_heads, head_dim;
    uint32_t n_experts;
};

static const struct preset presets[] = {
    {"tiny", 1024, 2048, 4, 4096, 8, 4, 128, 0},
    {"qwen3-30b-a3b", 2048, 0, 48, 151936, 32, 4, 128, 128},
};

static void add_tensor(struct wst_model *m, const char *name, uint32_t ndim,
                       uint64_t d0, uint64_t d1)
{
    struct wst_tensor_desc *t = &m->tensors[m->n_tensors++];

    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->dtype = WST_DTYPE_BF16;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
}

static void add_layer(struct wst_model *m, uint32_t l)
{
    char n[WST_NAME_MAX];
    uint64_t h = m->hidden, q = (uint64_t)m->heads * m->head_dim;
    uint64_t kv = (uint64_t)m->kv_heads * m->head_dim;

#define LNAME(suffix) (snprintf(n, sizeof(n), "model.layers.%u." suffix, l), n)
    add_tensor(m, LNAME("input_layernorm.weight"), 1, h, 0);
    add_tensor(m, LNAME("post_attention_layernorm.weight"), 1, h, 0);
    add_tensor(m, LNAME("self_attn.q_proj.weight"), 2, q, h);
    add_tensor(m, LNAME("self_attn.k_proj.weight"), 2, kv, h);
    add_tensor(m, LNAME("self_attn.v_proj.weight"), 2, kv, h);
    add_tensor(m, LNAME("self_attn.o_proj.weight"), 2, h, q);
    add_tensor(m, LNAME("self_attn.q_norm.weight"), 1, m->head_dim, 0);
    add_tensor(m, LNAME("self_attn.k_norm.weight"), 1, m->head_dim, 0);
    if (m->inter != 0) {
        add_tensor(m, LNAME("mlp.gate_proj.weight"), 2, m->inter, h);
        add_tensor(m, LNAME("mlp.up_proj.weight"), 2, m->inter, h);
        add_tensor(m, LNAME("mlp.down_proj.weight"), 2, h, m->inter);
    }
    if (m->n_experts != 0)
        add_tensor(m, LNAME("mlp.gate.weight"), 2, m->n_experts, h);
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
        set_err(err, errlen,
                "model preset \"%s\": want dense:<MiB> with 1..%llu MiB and "
                "at most 100000 layers",
                name, DENSE_MAX_MIB);
        return WST_ERR_INVALID;
    }
    rows = (uint64_t)mib * (1ull << 20) / row_bytes;
    n = (uint64_t)n_layers * DENSE_PER_LAYER;
    if (rows < n) {
        set_err(err, errlen,
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
        set_err(err, errlen, "model %s: out of memory", name);
        return WST_ERR_NO_MEMORY;
    }
    for (i = 0; i < n; i++) {
        char tn[WST_NAME_MAX];

        snprintf(tn, sizeof(tn), "model.layers.%llu.dense.w%llu.weight",
                 (unsigned long long)(i / DENSE_PER_LAYER),
                 (unsigned long long)(i % DENSE_PER_LAYER));
        add_tensor(&tmp, tn, 2, rows / n + (i < rows % n ? 1 : 0), DENSE_COLS);
    }
    *m = tmp;
    return WST_OK;
}

wst_status_t wst_model_preset(const char *name, uint32_t n_layers,
                              struct wst_model *m, char *err, size_t errlen)
{
    const struct preset *p = NULL;
    struct wst_model tmp;
    size_t i;
    uint32_t l;

    if (name != NULL && m != NULL && strncmp(name, "dense:", 6) == 0)
        return dense_preset(name, n_layers, m, err, errlen);
    for (i = 0; name != NULL && i < sizeof(presets) / sizeof(presets[0]); i++)
        if (strcmp(presets[i].name, name) == 0)
            p = &presets[i];
    if (p == NULL || m == NULL) {
        set_err(err, errlen,
                "unknown model preset \"%s\" (tiny, qwen3-30b-a3b, "
                "dense:<MiB>)",
                name != NULL ? name : "(null)");
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
    tmp.n_experts = p->n_experts;
    if (tmp.n_layers > 100000) {
        set_err(err, errlen, "model %s: %u layers is too many", p->name,
                tmp.n_layers);
        return WST_ERR_INVALID;
    }
    tmp.tensors =
        malloc(((size_t)tmp.n_layers * 12 + 3) * sizeof(*tmp.tensors));
    if (tmp.tensors == NULL) {
        set_err(err, errlen, "model %s: out of memory", p->name);
        return WST_ERR_NO_MEMORY;
    }
    add_tensor(&tmp, "model.embed_tokens.weight", 2, tmp.vocab, tmp.hidden);
    for (l = 0; l < tmp.n_layers; l++)
        add_layer(&tmp, l);
    add_tensor(&tmp, "model.norm.weight", 1, tmp.hidden, 0);
    add_tensor(&tmp, "lm_head.weight", 2, tmp.vocab, tmp.hidden);
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

/* ---- engine layout ------------------------------------------------------ */

struct builder {
    const struct wst_model *m;
    struct wst_layout *l;
    uint64_t end; /* bytes used in the shm */
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
    uint32_t r = add_region(b, name, t->shape[0], cols);

    add_want(b, name, r, 0, 0, t->shape[0], 0, cols);
}

static void add_layer_layout(struct builder *b, uint32_t l, uint32_t r,
                             uint32_t tp)
{
    const struct wst_model *m = b->m;
    uint64_t h = m->hidden, hd = m->head_dim, es = b->esize;
    uint64_t qr = (uint64_t)m->heads * hd / tp, kvr, k0, ir, oc;
    char n[WST_NAME_MAX], p[64];
    uint32_t reg;

    if (tp <= m->kv_heads) {
        kvr = (uint64_t)m->kv_heads / tp * hd;
        k0 = r * kvr;
    } else {
        kvr = hd;
        k0 = (uint64_t)r * m->kv_heads / tp * hd;
    }
    snprintf(p, sizeof(p), "model.layers.%u.", l);
#define NAME(suffix) (snprintf(n, sizeof(n), "%s" suffix, p), n)
    add_whole(b, NAME("input_layernorm.weight"));
    add_whole(b, NAME("post_attention_layernorm.weight"));
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
    if (m->inter != 0) {
        ir = m->inter / tp;
        reg = add_region(b, NAME("mlp.gate_up_proj.weight"), 2 * ir, h);
        add_want(b, NAME("mlp.gate_proj.weight"), reg, 0, r * ir, (r + 1) * ir,
                 0, h);
        add_want(b, NAME("mlp.up_proj.weight"), reg, ir * h * es, r * ir,
                 (r + 1) * ir, 0, h);
        reg = add_region(b, NAME("mlp.down_proj.weight"), h, ir);
        add_want(b, n, reg, 0, 0, h, r * ir, (r + 1) * ir);
    }
    if (m->n_experts != 0)
        add_whole(b, NAME("mlp.gate.weight"));
#undef NAME
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
    } else if (tp <= m->kv_heads && m->kv_heads % tp != 0) {
        what = "kv heads";
        val = m->kv_heads;
    } else if (tp > m->kv_heads && tp % m->kv_heads != 0) {
        what = "kv heads (nor is it a multiple of them)";
        val = m->kv_heads;
    } else if (m->hidden % tp != 0) {
        what = "hidden size";
        val = m->hidden;
    } else if (m->inter % tp != 0) {
        what = "intermediate size";
        val = m->inter;
    }
    if (what == NULL)
        return WST_OK;
    set_err(err, errlen, "model %s: tp=%u does not divide %s %u", m->preset, tp,
            what, val);
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
        set_err(err, errlen, "engine layout: out of memory");
        return WST_ERR_NO_MEMORY;
    }
    b.m = m;
    b.l = &l;
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

/* The transformer presets' layout (REFIT_LAYOUTS.md section 2). */
static wst_status_t engine_layout(const struct wst_model *m, uint32_t tp_rank,
                                  uint32_t tp, struct wst_layout *out,
                                  char *err, size_t errlen)
{
    struct wst_layout l;
    struct builder b;
    size_t cap;
    uint32_t i;
    wst_status_t status;

    if (m == NULL || out == NULL || tp == 0 || tp_rank >= tp ||
        m->kv_heads == 0) {
        set_err(err, errlen, "engine layout: bad arguments (rank %u of tp %u)",
                tp_rank, tp);
        return WST_ERR_INVALID;
    }
    status = tp_check(m, tp, err, errlen);
    if (status != WST_OK)
        return status;
    cap = (size_t)m->n_layers * 12 + 3;
    memset(&l, 0, sizeof(l));
    l.rank = tp_rank;
    l.regions = calloc(cap, sizeof(*l.regions));
    l.wants = calloc(cap, sizeof(*l.wants));
    if (l.regions == NULL || l.wants == NULL) {
        wst_layout_release(&l);
        set_err(err, errlen, "engine layout: out of memory");
        return WST_ERR_NO_MEMORY;
    }
    b.m = m;
    b.l = &l;
    b.end = 0;
    b.esize = wst_dtype_size(WST_DTYPE_BF16);
    add_vocab(&b, "model.embed_tokens.weight", tp_rank, tp);
    for (i = 0; i < m->n_layers; i++)
        add_layer_layout(&b, i, tp_rank, tp);
    add_whole(&b, "model.norm.weight");
    add_vocab(&b, "lm_head.weight", tp_rank, tp);
    l.shm_bytes = (b.end + REGION_ALIGN - 1) / REGION_ALIGN * REGION_ALIGN;
    *out = l;
    return WST_OK;
}

wst_status_t wst_model_engine_layout(const struct wst_model *m,
                                     uint32_t tp_rank, uint32_t tp,
                                     struct wst_layout *out, char *err,
                                     size_t errlen)
{
    if (m != NULL && out != NULL && tp != 0 && tp_rank < tp &&
        m->dense_cols != 0)
        return dense_layout(m, tp_rank, tp, out, err, errlen);
    return engine_layout(m, tp_rank, tp, out, err, errlen);
}
