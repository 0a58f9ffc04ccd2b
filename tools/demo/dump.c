/* dump.c - dump directories for tests/tools/check_dump.py (format in dump.h).
 *
 * A set streams each tensor to its own file as it comes (source tensors
 * are generated in slabs of rows, so a model larger than memory can still
 * be dumped) and keeps the index entries in a json-c array until commit,
 * which writes index.json last and atomically: a set whose writer died
 * half way has no index, or an older one, never one naming partial files.
 */
#include "dump.h"

#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "atomic_file.h"
#include "dtype.h"
#include "errbuf.h"
#include "repack.h"

#define SLAB_BYTES ((uint64_t)64 << 20) /* source generation buffer */

struct wst_dump_set {
    char dir[PATH_MAX];
    json_object *tensors; /* array of ended entries */
    size_t count;         /* files begun, names them 0000.bin, ... */
    FILE *fp;             /* the open tensor's file, or NULL */
    char path[PATH_MAX];  /* its path */
    json_object *entry;   /* its index entry, added at end */
    uint64_t bytes;       /* its size from the shape */
    uint64_t written;
};

/* ---- sets ----------------------------------------------------------------*/

/* mkdir -p: every prefix of 'path' that is missing is created. */
static wst_status_t make_dirs(const char *path, char *err, size_t errlen)
{
    char buf[PATH_MAX];
    struct stat st;
    size_t n = strlen(path), i;

    if (n == 0 || n >= sizeof(buf)) {
        wst_errf(err, errlen, "dump: bad directory \"%s\"", path);
        return WST_ERR_INVALID;
    }
    memcpy(buf, path, n + 1);
    for (i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0 &&
            (errno != EEXIST || stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))) {
            wst_errf(err, errlen, "dump: cannot create directory %s: %s", buf,
                     strerror(errno != EEXIST ? errno : ENOTDIR));
            return WST_ERR_IO;
        }
        buf[i] = path[i];
    }
    return WST_OK;
}

wst_status_t wst_dump_set_create(const char *dir, const char *which,
                                 wst_dump_set_t **set_p, char *err,
                                 size_t errlen)
{
    struct wst_dump_set *s;
    wst_status_t status;
    int n;

    if (dir == NULL || which == NULL || set_p == NULL) {
        wst_errf(err, errlen, "dump: NULL argument");
        return WST_ERR_INVALID;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        wst_errf(err, errlen, "dump: out of memory");
        return WST_ERR_NO_MEMORY;
    }
    n = snprintf(s->dir, sizeof(s->dir), "%s/%s", dir, which);
    if (n < 0 || (size_t)n >= sizeof(s->dir)) {
        wst_errf(err, errlen, "dump: path too long: %s/%s", dir, which);
        status = WST_ERR_INVALID;
        goto err_free;
    }
    status = make_dirs(s->dir, err, errlen);
    if (status != WST_OK)
        goto err_free;
    s->tensors = json_object_new_array();
    if (s->tensors == NULL) {
        wst_errf(err, errlen, "dump: out of memory");
        status = WST_ERR_NO_MEMORY;
        goto err_free;
    }
    *set_p = s;
    return WST_OK;

err_free:
    free(s);
    return status;
}

/* A JSON array of the first n values of v. */
static json_object *u64_array(const uint64_t *v, uint32_t n)
{
    json_object *a = json_object_new_array();
    uint32_t i;

    for (i = 0; a != NULL && i < n; i++) {
        if (json_object_array_add(a, json_object_new_int64((int64_t)v[i])) !=
            0) {
            json_object_put(a);
            return NULL;
        }
    }
    return a;
}

/* Adds key -> val to 'o', taking val; nonzero when val is NULL or the add
 * fails, so the callers can chain the adds and test once. */
static int add_key(json_object *o, const char *key, json_object *val)
{
    if (val == NULL)
        return 1;
    if (json_object_object_add(o, key, val) != 0) {
        json_object_put(val);
        return 1;
    }
    return 0;
}

static json_object *entry_json(const struct wst_dump_tensor *t,
                               const char *file)
{
    json_object *o = json_object_new_object(), *box, *srcs;
    int bad = o == NULL;
    uint32_t i;

    if (bad)
        return NULL;
    bad |= add_key(o, "name", json_object_new_string(t->name));
    bad |= add_key(o, "file", json_object_new_string(file));
    bad |=
        add_key(o, "dtype", json_object_new_string(wst_dtype_name(t->dtype)));
    bad |= add_key(o, "shape", u64_array(t->shape, t->ndim));
    bad |= add_key(o, "layout", json_object_new_string(t->layout));
    if (t->n_sources > 0) {
        srcs = json_object_new_array();
        for (i = 0; srcs != NULL && i < t->n_sources; i++)
            bad |= json_object_array_add(
                       srcs, json_object_new_string(t->sources[i])) != 0;
        bad |= add_key(o, "sources", srcs);
    }
    box = json_object_new_object();
    if (box != NULL) {
        bad |= add_key(box, "start", u64_array(t->box.start, t->box.ndim));
        bad |= add_key(box, "stop", u64_array(t->box.stop, t->box.ndim));
    }
    bad |= add_key(o, "box", box);
    bad |= add_key(o, "tensor_shape", u64_array(t->tensor_shape, t->box.ndim));
    if (bad) {
        json_object_put(o);
        return NULL;
    }
    return o;
}

/* Bytes of the file 't' describes; 0 on overflow or a bad description (a
 * dump never holds an empty tensor: boxes are non-empty). */
static uint64_t tensor_bytes(const struct wst_dump_tensor *t)
{
    uint64_t n = wst_dtype_size(t->dtype);
    uint32_t d;

    if (t->ndim < 1 || t->ndim > WST_MAX_DIMS || t->box.ndim < 1 ||
        t->box.ndim > WST_MAX_DIMS)
        return 0;
    for (d = 0; d < t->ndim; d++) {
        if (t->shape[d] != 0 && n > UINT64_MAX / t->shape[d])
            return 0;
        n *= t->shape[d];
    }
    return n;
}

wst_status_t wst_dump_set_begin(wst_dump_set_t *s,
                                const struct wst_dump_tensor *t, char *err,
                                size_t errlen)
{
    char file[32];
    int n;

    if (s == NULL || t == NULL || t->name == NULL || t->layout == NULL ||
        (t->n_sources > 0 && t->sources == NULL) || s->fp != NULL) {
        wst_errf(err, errlen, "dump: bad tensor, or one already open");
        return WST_ERR_INVALID;
    }
    s->bytes = tensor_bytes(t);
    if (s->bytes == 0) {
        wst_errf(err, errlen, "dump %s: tensor %s: bad dtype or shape", s->dir,
                 t->name);
        return WST_ERR_INVALID;
    }
    snprintf(file, sizeof(file), "%04zu.bin", s->count);
    n = snprintf(s->path, sizeof(s->path), "%s/%s", s->dir, file);
    if (n < 0 || (size_t)n >= sizeof(s->path)) {
        wst_errf(err, errlen, "dump %s: path too long", s->dir);
        return WST_ERR_INVALID;
    }
    s->entry = entry_json(t, file);
    if (s->entry == NULL) {
        wst_errf(err, errlen, "dump: out of memory");
        return WST_ERR_NO_MEMORY;
    }
    s->fp = fopen(s->path, "wb");
    if (s->fp == NULL) {
        wst_errf(err, errlen, "dump: cannot create %s: %s", s->path,
                 strerror(errno));
        json_object_put(s->entry);
        s->entry = NULL;
        return WST_ERR_IO;
    }
    s->count++;
    s->written = 0;
    return WST_OK;
}

wst_status_t wst_dump_set_write(wst_dump_set_t *s, const void *data,
                                size_t bytes, char *err, size_t errlen)
{
    if (s == NULL || s->fp == NULL || (data == NULL && bytes > 0) ||
        bytes > s->bytes - s->written) {
        wst_errf(err, errlen,
                 "dump: write of %zu bytes past the tensor's end "
                 "or with none open",
                 bytes);
        return WST_ERR_INVALID;
    }
    if (bytes > 0 && fwrite(data, 1, bytes, s->fp) != bytes) {
        wst_errf(err, errlen, "dump: write to %s: %s", s->path,
                 strerror(errno));
        return WST_ERR_IO;
    }
    s->written += bytes;
    return WST_OK;
}

wst_status_t wst_dump_set_end(wst_dump_set_t *s, char *err, size_t errlen)
{
    wst_status_t status = WST_OK;
    int rc;

    if (s == NULL || s->fp == NULL) {
        wst_errf(err, errlen, "dump: no tensor open");
        return WST_ERR_INVALID;
    }
    rc = fclose(s->fp);
    s->fp = NULL;
    if (rc != 0) {
        wst_errf(err, errlen, "dump: close %s: %s", s->path, strerror(errno));
        status = WST_ERR_IO;
    } else if (s->written != s->bytes) {
        wst_errf(err, errlen, "dump: %s has %llu of its %llu bytes", s->path,
                 (unsigned long long)s->written, (unsigned long long)s->bytes);
        status = WST_ERR_INVALID;
    } else if (json_object_array_add(s->tensors, s->entry) != 0) {
        wst_errf(err, errlen, "dump: out of memory");
        status = WST_ERR_NO_MEMORY;
    } else {
        s->entry = NULL; /* the array owns it now */
    }
    json_object_put(s->entry);
    s->entry = NULL;
    return status;
}

wst_status_t wst_dump_set_commit(wst_dump_set_t *s, char *err, size_t errlen)
{
    char path[PATH_MAX + 16];
    const char *text;
    json_object *root;
    wst_status_t status = WST_OK;

    if (s == NULL || s->fp != NULL) {
        wst_errf(err, errlen, "dump: commit with a tensor still open");
        return WST_ERR_INVALID;
    }
    snprintf(path, sizeof(path), "%s/index.json", s->dir);
    root = json_object_new_object();
    if (root == NULL ||
        add_key(root, "format", json_object_new_int(WST_DUMP_FORMAT)) ||
        add_key(root, "tensors", json_object_get(s->tensors))) {
        wst_errf(err, errlen, "dump: out of memory");
        status = WST_ERR_NO_MEMORY;
        goto out_put;
    }
    text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_SPACED);
    if (text == NULL) {
        wst_errf(err, errlen, "dump: out of memory");
        status = WST_ERR_NO_MEMORY;
        goto out_put;
    }
    status = wst_atomic_write(path, text, strlen(text), 0644, err, errlen);

out_put:
    json_object_put(root);
    return status;
}

void wst_dump_set_destroy(wst_dump_set_t *s)
{
    if (s == NULL)
        return;
    if (s->fp != NULL)
        fclose(s->fp);
    json_object_put(s->entry);
    json_object_put(s->tensors);
    free(s);
}

/* ---- live/ from a layout ------------------------------------------------ */

/* Packs the box of want 'w' (rows 'row_pitch' apart at 'src') into the set,
 * one row at a time: the file is the box dense, row-major. */
static wst_status_t dump_want(wst_dump_set_t *s, const struct wst_want *w,
                              const char *name, const unsigned char *src,
                              char *err, size_t errlen)
{
    const struct wst_box *b = &w->box;
    size_t esize = wst_dtype_size(w->tensor.dtype);
    const char *sources[1] = {w->tensor.name};
    struct wst_dump_tensor t;
    uint64_t rows = 1, row_bytes, pitch, r;
    uint32_t d;
    wst_status_t status;

    memset(&t, 0, sizeof(t));
    t.name = name;
    t.layout = "checkpoint";
    t.dtype = w->tensor.dtype;
    t.ndim = b->ndim;
    t.sources = sources;
    t.n_sources = 1;
    t.box = *b;
    for (d = 0; d < b->ndim; d++) {
        t.shape[d] = b->stop[d] - b->start[d];
        t.tensor_shape[d] = w->tensor.shape[d];
        if (d + 1 < b->ndim)
            rows *= t.shape[d];
    }
    row_bytes = t.shape[b->ndim - 1] * esize;
    pitch = w->row_pitch != 0 ? w->row_pitch : row_bytes;
    status = wst_dump_set_begin(s, &t, err, errlen);
    for (r = 0; status == WST_OK && r < rows; r++)
        status = wst_dump_set_write(s, src + r * pitch, row_bytes, err, errlen);
    if (status == WST_OK)
        status = wst_dump_set_end(s, err, errlen);
    return status;
}

static const struct wst_layout_experts *
experts_of_layer(const struct wst_layout *l, uint32_t layer)
{
    size_t i;

    for (i = 0; i < l->n_experts; i++)
        if (l->experts[i].layer == layer)
            return &l->experts[i];
    return NULL;
}

static wst_status_t dump_wants(wst_dump_set_t *s, const struct wst_layout *l,
                               const unsigned char *base, char *err,
                               size_t errlen)
{
    char name[WST_NAME_MAX + 16];
    size_t i, j, dup;
    wst_status_t status;

    for (i = 0; i < l->n_wants; i++) {
        const struct wst_want *w = &l->wants[i];
        const struct wst_layout_region *reg;

        if (w->expert.grouped &&
            experts_of_layer(l, wst_tensor_layer(w->tensor.name)) != NULL)
            continue;
        if (w->region >= l->n_regions || w->box.ndim < 1 ||
            w->box.ndim > WST_MAX_DIMS ||
            wst_box_check(&w->tensor, &w->box, 0) != WST_OK) {
            wst_errf(err, errlen, "dump: wants[%zu] (%s) is malformed", i,
                     w->tensor.name);
            return WST_ERR_INVALID;
        }
        if (wst_box_elems(&w->box) == 0)
            continue;
        reg = &l->regions[w->region];
        if (w->offset > reg->bytes ||
            wst_want_span(w) > reg->bytes - w->offset) {
            wst_errf(err, errlen,
                     "dump: wants[%zu] (%s) runs past region \"%s\"", i,
                     w->tensor.name, reg->name);
            return WST_ERR_INVALID;
        }
        /* Quadratic, but a dump is a debugging aid over at most a few
         * thousand wants. */
        for (j = 0, dup = 0; j < i; j++)
            dup += strcmp(l->wants[j].tensor.name, w->tensor.name) == 0;
        if (dup == 0)
            snprintf(name, sizeof(name), "%s", w->tensor.name);
        else
            snprintf(name, sizeof(name), "%s#%zu", w->tensor.name, dup + 1);
        status =
            dump_want(s, w, name, base + reg->offset + w->offset, err, errlen);
        if (status != WST_OK)
            return status;
    }
    return WST_OK;
}

/* The live bytes of one experts buffer: 'bytes' at 'offset' into region
 * 'region', checked against the region's size. */
static const unsigned char *expert_buf(const struct wst_layout *l,
                                       const unsigned char *base,
                                       uint32_t region, uint64_t offset,
                                       uint64_t bytes)
{
    const struct wst_layout_region *r;

    if (region >= l->n_regions)
        return NULL;
    r = &l->regions[region];
    if (offset > r->bytes || bytes > r->bytes - offset)
        return NULL;
    return base + r->offset + offset;
}

/* One projection pair's live tensor: w13 (gate, up) or w2 (down). */
static wst_status_t dump_expert_tensor(wst_dump_set_t *s,
                                       const struct wst_layout_experts *x,
                                       int w13, const unsigned char *src,
                                       char *err, size_t errlen)
{
    const uint64_t e = x->n_experts, nl = e / x->ep_size;
    const uint64_t h = x->hidden, i = x->inter;
    const int trtllm = strcmp(x->loader, "trtllm-bf16") == 0;
    char name[WST_NAME_MAX], src_names[2][WST_NAME_MAX];
    const char *sources[2] = {src_names[0], src_names[1]};
    struct wst_dump_tensor t;
    wst_status_t status;

    memset(&t, 0, sizeof(t));
    snprintf(name, sizeof(name), "model.layers.%u.mlp.experts.%s", x->layer,
             w13 ? "w13_weight" : "w2_weight");
    snprintf(src_names[0], sizeof(src_names[0]),
             "model.layers.%u.mlp.experts.%s.weight", x->layer,
             w13 ? "gate_proj" : "down_proj");
    snprintf(src_names[1], sizeof(src_names[1]),
             "model.layers.%u.mlp.experts.up_proj.weight", x->layer);
    t.name = name;
    t.layout = x->loader;
    t.dtype = x->dtype;
    t.sources = sources;
    t.n_sources = w13 ? 2 : 1;
    t.ndim = trtllm ? 4 : 3;
    t.shape[0] = nl;
    if (trtllm) {
        t.shape[1] = (w13 ? h : i) / 64;
        t.shape[2] = w13 ? 2 * i : h;
        t.shape[3] = 64;
    } else {
        t.shape[1] = w13 ? 2 * i : h;
        t.shape[2] = w13 ? h : i;
    }
    t.box.ndim = 3;
    t.box.start[0] = x->ep_rank * nl;
    t.box.stop[0] = t.box.start[0] + nl;
    t.box.stop[1] = t.tensor_shape[1] = w13 ? i : h;
    t.box.stop[2] = t.tensor_shape[2] = w13 ? h : i;
    t.tensor_shape[0] = e;
    status = wst_dump_set_begin(s, &t, err, errlen);
    if (status == WST_OK)
        status = wst_dump_set_write(s, src, (size_t)s->bytes, err, errlen);
    if (status == WST_OK)
        status = wst_dump_set_end(s, err, errlen);
    return status;
}

/* Experts entries the receiver refuses when it plans (REFIT_LAYOUTS.md
 * section 2): an expert map, a split intermediate dimension, E not
 * divisible by ep. Their live buffers are never written, so they have
 * nothing to dump. */
static int ep_refused(const struct wst_layout_experts *x)
{
    return x->expert_ids != NULL || x->inter_tp_size > 1 || x->ep_size == 0 ||
           x->n_experts % x->ep_size != 0;
}

/* With s NULL, only checks every entry (so a refused layout writes no
 * file at all); with a set, writes them too. */
static wst_status_t dump_experts(wst_dump_set_t *s, const struct wst_layout *l,
                                 const unsigned char *base, char *err,
                                 size_t errlen)
{
    struct wst_loader_registry reg;
    size_t k;
    wst_status_t status;

    /* Only the built-ins: the checker knows no other layout. */
    wst_loader_registry_init(&reg);
    for (k = 0; k < l->n_experts; k++) {
        const struct wst_layout_experts *x = &l->experts[k];
        const struct wst_repack_loader *ld;
        struct wst_expert_shape shape;
        const unsigned char *w13, *w2;

        if (ep_refused(x))
            continue;
        ld = wst_loader_registry_find(&reg, x->loader);
        if (ld == NULL) {
            wst_errf(err, errlen,
                     "dump: layer %u: loader \"%s\" has a layout the checker "
                     "does not know",
                     x->layer, x->loader);
            return WST_ERR_UNSUPPORTED_LAYOUT;
        }
        shape.n_local = x->n_experts / x->ep_size;
        shape.hidden = x->hidden;
        shape.inter = x->inter;
        shape.dtype = x->dtype;
        if (ld->check(&shape, NULL, 0) != WST_OK ||
            (ld == wst_repack_loader_trtllm_bf16() &&
             wst_repack_check_experts(x->n_experts, NULL, 0) != WST_OK))
            continue; /* refused by the receiver's plan, like ep_refused */
        w13 = expert_buf(l, base, x->w13_region, x->w13_offset,
                         ld->w13_bytes(&shape));
        w2 = expert_buf(l, base, x->w2_region, x->w2_offset,
                        ld->w2_bytes(&shape));
        if (w13 == NULL || w2 == NULL) {
            wst_errf(err, errlen,
                     "dump: layer %u: experts w13 or w2 runs past its region",
                     x->layer);
            return WST_ERR_INVALID;
        }
        if (s == NULL)
            continue;
        status = dump_expert_tensor(s, x, 1, w13, err, errlen);
        if (status == WST_OK)
            status = dump_expert_tensor(s, x, 0, w2, err, errlen);
        if (status != WST_OK)
            return status;
    }
    return WST_OK;
}

/* ---- source/ from the model --------------------------------------------- */

/* Tensor 't' whole, generated in slabs of dim-0 rows into 'buf' (at least
 * SLAB_BYTES or one row, whichever is larger: see dump_sources). */
static wst_status_t dump_source(wst_dump_set_t *s,
                                const struct wst_tensor_desc *t,
                                unsigned char *buf, uint64_t seed,
                                uint64_t version, char *err, size_t errlen)
{
    struct wst_dump_tensor d;
    struct wst_have h;
    uint64_t row_bytes = wst_dtype_size(t->dtype), per, r;
    uint32_t k;
    wst_status_t status;

    memset(&d, 0, sizeof(d));
    memset(&h, 0, sizeof(h));
    d.name = t->name;
    d.layout = "checkpoint";
    d.dtype = t->dtype;
    d.ndim = t->ndim;
    d.box.ndim = t->ndim;
    for (k = 0; k < t->ndim; k++) {
        d.shape[k] = d.box.stop[k] = d.tensor_shape[k] = t->shape[k];
        if (k > 0)
            row_bytes *= t->shape[k];
    }
    h.tensor = *t;
    h.box = d.box;
    h.mem = WST_MEM_HOST;
    per = SLAB_BYTES / row_bytes > 0 ? SLAB_BYTES / row_bytes : 1;
    status = wst_dump_set_begin(s, &d, err, errlen);
    for (r = 0; status == WST_OK && r < t->shape[0]; r += per) {
        h.box.start[0] = r;
        h.box.stop[0] = t->shape[0] - r < per ? t->shape[0] : r + per;
        wst_model_fill_shard(&h, seed, version, buf);
        status = wst_dump_set_write(s, buf, (size_t)wst_model_shard_bytes(&h),
                                    err, errlen);
    }
    if (status == WST_OK)
        status = wst_dump_set_end(s, err, errlen);
    return status;
}

static wst_status_t dump_sources(wst_dump_set_t *s, const struct wst_model *m,
                                 uint64_t seed, uint64_t version, char *err,
                                 size_t errlen)
{
    uint64_t cap = SLAB_BYTES, row;
    unsigned char *buf;
    size_t i;
    uint32_t k;
    wst_status_t status = WST_OK;

    for (i = 0; i < m->n_tensors; i++) {
        if (wst_tensor_desc_check(&m->tensors[i], NULL, NULL) != WST_OK) {
            wst_errf(err, errlen, "dump: model tensor %zu (%s) is malformed", i,
                     m->tensors[i].name);
            return WST_ERR_INVALID;
        }
        row = wst_dtype_size(m->tensors[i].dtype);
        for (k = 1; k < m->tensors[i].ndim; k++)
            row *= m->tensors[i].shape[k];
        if (row > cap)
            cap = row;
    }
    if (cap > SIZE_MAX || (buf = malloc((size_t)cap)) == NULL) {
        wst_errf(err, errlen, "dump: out of memory");
        return WST_ERR_NO_MEMORY;
    }
    for (i = 0; i < m->n_tensors && status == WST_OK; i++)
        status =
            dump_source(s, &m->tensors[i], buf, seed, version, err, errlen);
    free(buf);
    return status;
}

/* ---- the whole dump ------------------------------------------------------*/

wst_status_t wst_dump_write(const char *dir, const struct wst_model *m,
                            const struct wst_layout *l, const void *live_base,
                            uint64_t seed, uint64_t version, char *err,
                            size_t errlen)
{
    wst_dump_set_t *s = NULL;
    wst_status_t status;

    if (dir == NULL || m == NULL || l == NULL ||
        (live_base == NULL && (l->n_wants > 0 || l->n_experts > 0))) {
        wst_errf(err, errlen, "dump: NULL argument");
        return WST_ERR_INVALID;
    }
    status = dump_experts(NULL, l, live_base, err, errlen);
    if (status != WST_OK)
        return status;
    status = wst_dump_set_create(dir, "live", &s, err, errlen);
    if (status != WST_OK)
        return status;
    status = dump_wants(s, l, live_base, err, errlen);
    if (status == WST_OK)
        status = dump_experts(s, l, live_base, err, errlen);
    if (status == WST_OK)
        status = wst_dump_set_commit(s, err, errlen);
    wst_dump_set_destroy(s);
    if (status != WST_OK)
        return status;

    status = wst_dump_set_create(dir, "source", &s, err, errlen);
    if (status != WST_OK)
        return status;
    status = dump_sources(s, m, seed, version, err, errlen);
    if (status == WST_OK)
        status = wst_dump_set_commit(s, err, errlen);
    wst_dump_set_destroy(s);
    return status;
}
