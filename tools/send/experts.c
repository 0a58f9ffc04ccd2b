/* experts.c - per-expert MoE tensors found, checked layer by layer and
 * turned into slices of the grouped wire tensors (experts.h).
 *
 * The per-expert tensors are listed once, sorted by (layer, projection,
 * expert), and each layer's run is checked as a whole before anything is
 * changed: a refusal leaves every entry as it was. Grouped tensors already
 * in the checkpoint are listed too, sorted by layer, to refuse a layer that
 * holds both forms.
 */
#include "experts.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"

#define N_PROJ 3

static const char *const proj_names[N_PROJ] = {"gate_proj", "up_proj",
                                               "down_proj"};

/* One per-expert tensor (expert < UINT32_MAX) or grouped tensor
 * (expert == UINT32_MAX) of the checkpoint. */
struct eref {
    uint32_t layer;
    uint32_t proj;
    uint32_t expert;
    size_t idx; /* into the caller's array */
};

const char *wst_send_tensor_name(const struct wst_send_tensor *x)
{
    return x->group_name != NULL ? x->group_name : x->t->name;
}

__attribute__((format(printf, 3, 4))) static wst_status_t
refuse(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return WST_ERR_INTEGRITY;
}

static int skip(const char **p, const char *lit)
{
    size_t n = strlen(lit);

    if (strncmp(*p, lit, n) != 0)
        return 0;
    *p += n;
    return 1;
}

/* Decimal, no leading zero, below UINT32_MAX (which marks "grouped"). */
static int parse_id(const char **p, uint32_t *v)
{
    const char *s = *p;
    uint64_t x = 0;

    if (*s < '0' || *s > '9' || (*s == '0' && s[1] >= '0' && s[1] <= '9'))
        return 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        x = x * 10 + (uint64_t)(*s - '0');
        if (x >= UINT32_MAX)
            return 0;
    }
    *v = (uint32_t)x;
    *p = s;
    return 1;
}

/* "model.layers.{l}.mlp.experts.[{e}.]{proj}.weight": 1 and its parts
 * (expert UINT32_MAX for the grouped form), else 0. */
static int parse_name(const char *name, struct eref *r)
{
    const char *p = name;

    if (!skip(&p, "model.layers.") || !parse_id(&p, &r->layer) ||
        !skip(&p, ".mlp.experts."))
        return 0;
    r->expert = UINT32_MAX;
    if (*p >= '0' && *p <= '9' && (!parse_id(&p, &r->expert) || !skip(&p, ".")))
        return 0;
    for (r->proj = 0; r->proj < N_PROJ; r->proj++) {
        const char *q = p;
        if (skip(&q, proj_names[r->proj]) && skip(&q, ".weight") && *q == '\0')
            return 1;
    }
    return 0;
}

static int cmp_u32(uint32_t a, uint32_t b)
{
    return a < b ? -1 : (a > b);
}

static int eref_cmp(const void *pa, const void *pb)
{
    const struct eref *a = pa, *b = pb;
    int r;

    if ((r = cmp_u32(a->layer, b->layer)) != 0 ||
        (r = cmp_u32(a->proj, b->proj)) != 0)
        return r;
    return cmp_u32(a->expert, b->expert);
}

static void fmt_shape(const struct wst_st_tensor *t, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "[");

    for (uint32_t d = 0; d < t->ndim && used < len; d++)
        used +=
            (size_t)snprintf(buf + used, len - used, "%s%llu", d ? ", " : "",
                             (unsigned long long)t->shape[d]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
}

/* The run r[0..n) of one layer: every projection present holds experts
 * 0..E-1, of one shape per projection and one dtype per layer, down_proj
 * the transpose of gate/up. *n_experts_p gets E. */
static wst_status_t check_layer(const struct eref *r, size_t n,
                                const struct wst_send_tensor *x,
                                uint32_t *n_experts_p, char *err, size_t errlen)
{
    const struct wst_st_tensor *first = x[r[0].idx].t, *shape_of[N_PROJ] = {0};
    uint32_t l = r[0].layer, e_max = 0;
    char a[96], b[96];
    size_t i, k;

    for (i = 0; i < n; i++) {
        const struct wst_st_tensor *t = x[r[i].idx].t;
        if (t->ndim != 2) {
            fmt_shape(t, a, sizeof(a));
            return refuse(err, errlen,
                          "tensor '%s': a per-expert projection must be 2-D "
                          "([rows, cols]); it has shape %s",
                          t->name, a);
        }
        if (t->dtype != first->dtype)
            return refuse(err, errlen,
                          "layer %u experts: '%s' is %s but '%s' is %s; the "
                          "experts of a layer share one dtype",
                          l, t->name, wst_dtype_name(t->dtype), first->name,
                          wst_dtype_name(first->dtype));
        e_max = r[i].expert > e_max ? r[i].expert : e_max;
    }
    for (i = 0; i < n; i = k) {
        uint32_t p = r[i].proj;
        const struct wst_st_tensor *t0 = x[r[i].idx].t;
        for (k = i; k < n && r[k].proj == p; k++) {
            const struct wst_st_tensor *t = x[r[k].idx].t;
            if (r[k].expert != (uint32_t)(k - i))
                return refuse(err, errlen,
                              "layer %u %s: expert %u is missing: no tensor "
                              "'model.layers.%u.mlp.experts.%u.%s.weight' "
                              "(the layer has experts up to %u)",
                              l, proj_names[p], (uint32_t)(k - i), l,
                              (uint32_t)(k - i), proj_names[p], e_max);
            if (t->shape[0] != t0->shape[0] || t->shape[1] != t0->shape[1]) {
                fmt_shape(t, a, sizeof(a));
                fmt_shape(t0, b, sizeof(b));
                return refuse(err, errlen,
                              "layer %u %s: '%s' has shape %s but '%s' has "
                              "%s; the experts of a projection share one "
                              "shape",
                              l, proj_names[p], t->name, a, t0->name, b);
            }
        }
        if (k - i != (size_t)e_max + 1)
            return refuse(err, errlen,
                          "layer %u %s: expert %u is missing: no tensor "
                          "'model.layers.%u.mlp.experts.%u.%s.weight' (the "
                          "layer has experts up to %u)",
                          l, proj_names[p], (uint32_t)(k - i), l,
                          (uint32_t)(k - i), proj_names[p], e_max);
        shape_of[p] = t0;
    }
    /* gate and up are [I, H], down [H, I] */
    const struct wst_st_tensor *in = shape_of[0] ? shape_of[0] : shape_of[1];
    const struct wst_st_tensor *other[2] = {shape_of[1], shape_of[2]};
    for (int j = 0; in != NULL && j < 2; j++) {
        const struct wst_st_tensor *t = other[j];
        int down = j == 1;
        if (t == NULL || t == in)
            continue;
        if (t->shape[0] != in->shape[down] || t->shape[1] != in->shape[!down]) {
            fmt_shape(t, a, sizeof(a));
            fmt_shape(in, b, sizeof(b));
            return refuse(err, errlen,
                          "layer %u experts: '%s' has shape %s, which does "
                          "not fit '%s' of %s (gate_proj and up_proj are "
                          "[I, H], down_proj [H, I])",
                          l, t->name, a, in->name, b);
        }
    }
    *n_experts_p = e_max + 1;
    return WST_OK;
}

/* A grouped tensor of layer l in g[0..n) (sorted by layer), or NULL. */
static const struct eref *grouped_in(const struct eref *g, size_t n, uint32_t l)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (g[mid].layer < l)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && g[lo].layer == l ? &g[lo] : NULL;
}

/* Lists the per-expert tensors into e[] and the grouped ones into g[];
 * with NULL arrays, only counts them. */
static void list_refs(const struct wst_send_tensor *x, size_t n, struct eref *e,
                      size_t *n_e, struct eref *g, size_t *n_g)
{
    struct eref r;

    *n_e = *n_g = 0;
    for (size_t i = 0; i < n; i++) {
        if (!parse_name(x[i].t->name, &r))
            continue;
        r.idx = i;
        struct eref *to = r.expert == UINT32_MAX ? g : e;
        size_t *count = r.expert == UINT32_MAX ? n_g : n_e;
        if (to != NULL)
            to[*count] = r;
        (*count)++;
    }
    if (e == NULL)
        return;
    if (*n_e > 1)
        qsort(e, *n_e, sizeof(*e), eref_cmp);
    if (*n_g > 1)
        qsort(g, *n_g, sizeof(*g), eref_cmp);
}

/* Checks every layer; its E into experts_of[] (one per run start). */
static wst_status_t check_layers(const struct eref *e, size_t n_e,
                                 const struct eref *g, size_t n_g,
                                 const struct wst_send_tensor *x,
                                 uint32_t *experts_of, size_t *n_layers_p,
                                 char *err, size_t errlen)
{
    size_t i, k, layers = 0;
    wst_status_t st;

    for (i = 0; i < n_e; i = k) {
        const struct eref *both = grouped_in(g, n_g, e[i].layer);
        for (k = i; k < n_e && e[k].layer == e[i].layer; k++)
            ;
        if (both != NULL)
            return refuse(err, errlen,
                          "layer %u: the checkpoint holds both the grouped "
                          "tensor '%s' and per-expert tensors such as '%s'; "
                          "a layer's experts come in one form or the other",
                          e[i].layer, x[both->idx].t->name,
                          x[e[i].idx].t->name);
        st = check_layer(&e[i], k - i, x, &experts_of[i], err, errlen);
        if (st != WST_OK)
            return st;
        layers++;
    }
    *n_layers_p = layers;
    return WST_OK;
}

/* Entry e of a layer of E experts becomes [e:e+1, 0:rows, 0:cols]. The
 * names are made first, so that running out of memory changes nothing. */
static wst_status_t make_slices(const struct eref *e, size_t n_e,
                                const uint32_t *experts_of,
                                struct wst_send_tensor *x, size_t *n_grouped_p)
{
    char name[WST_NAME_MAX], **names = calloc(n_e ? n_e : 1, sizeof(*names));
    uint32_t n_experts = 0;
    size_t grouped = 0, i;

    if (names == NULL)
        return WST_ERR_NO_MEMORY;
    for (i = 0; i < n_e; i++) {
        snprintf(name, sizeof(name), "model.layers.%u.mlp.experts.%s.weight",
                 e[i].layer, proj_names[e[i].proj]);
        if ((names[i] = strdup(name)) == NULL)
            goto err_free_names;
    }
    for (i = 0; i < n_e; i++) {
        struct wst_send_tensor *s = &x[e[i].idx];
        if (i == 0 || e[i].layer != e[i - 1].layer)
            n_experts = experts_of[i];
        if (i == 0 || e[i].layer != e[i - 1].layer ||
            e[i].proj != e[i - 1].proj)
            grouped++;
        s->group_name = names[i];
        s->ndim = 3;
        s->shape[0] = n_experts;
        s->shape[1] = s->t->shape[0];
        s->shape[2] = s->t->shape[1];
        s->start[0] = e[i].expert;
        s->start[1] = s->start[2] = 0;
        s->stop[0] = e[i].expert + 1;
        s->stop[1] = s->shape[1];
        s->stop[2] = s->shape[2];
    }
    free(names);
    *n_grouped_p = grouped;
    return WST_OK;

err_free_names:
    while (i-- > 0)
        free(names[i]);
    free(names);
    return WST_ERR_NO_MEMORY;
}

wst_status_t wst_send_group_experts(struct wst_send_tensor *x, size_t n,
                                    struct wst_send_experts *out, char *err,
                                    size_t errlen)
{
    struct wst_send_experts found = {0};
    size_t n_e = 0, n_g = 0;
    wst_status_t st = WST_ERR_NO_MEMORY;

    list_refs(x, n, NULL, &n_e, NULL, &n_g);
    if (n_e == 0) { /* nothing to group; grouped tensors go as they are */
        *out = found;
        return WST_OK;
    }
    struct eref *e = calloc(n_e, sizeof(*e));
    struct eref *g = calloc(n_g ? n_g : 1, sizeof(*g));
    uint32_t *experts_of = calloc(n_e, sizeof(*experts_of));
    if (e == NULL || g == NULL || experts_of == NULL) {
        snprintf(err, errlen, "no memory to group expert tensors");
        goto out_free;
    }
    list_refs(x, n, e, &n_e, g, &n_g);
    st = check_layers(e, n_e, g, n_g, x, experts_of, &found.n_layers, err,
                      errlen);
    if (st != WST_OK)
        goto out_free;
    st = make_slices(e, n_e, experts_of, x, &found.n_grouped);
    if (st != WST_OK) {
        snprintf(err, errlen, "no memory to group expert tensors");
        goto out_free;
    }
    found.n_slices = n_e;
    *out = found;
out_free:
    free(experts_of);
    free(g);
    free(e);
    return st;
}

void wst_send_tensors_release(struct wst_send_tensor *x, size_t n)
{
    for (size_t i = 0; x != NULL && i < n; i++) {
        free(x[i].group_name);
        x[i].group_name = NULL;
    }
}
