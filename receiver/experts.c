/* experts.c - the receiver's MoE layers: checks, staging, replay. */
#include "experts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "dtype.h"
#include "errbuf.h"
#include "gpu.h"

#define STAGING_ALIGN 4096u

void wst_moe_init(struct wst_moe *m, uint32_t slots)
{
    memset(m, 0, sizeof(*m));
    m->staging_device = -1;
    wst_loader_registry_init(&m->loaders);
    m->slots = slots != 0 ? slots : 2;
}

wst_status_t wst_moe_add_loader(struct wst_moe *m,
                                const struct wst_repack_loader *loader)
{
    return wst_loader_registry_add(&m->loaders, loader);
}

/* The local shape as the engine declared it: ceil(E/ep) experts (a refused
 * split is still sized, so its regions can be checked) of I/inter_tp. */
static struct wst_expert_shape declared_shape(const struct wst_moe_layer *ml)
{
    uint32_t tp = ml->inter_tp_size > 1 ? ml->inter_tp_size : 1;
    struct wst_expert_shape s = {
        .n_local = (ml->n_experts + ml->ep_size - 1) / ml->ep_size,
        .hidden = ml->hidden,
        .inter = ml->inter / tp,
        .dtype = ml->dtype,
    };
    return s;
}

static int span_ok(const struct wst_region_desc *regions, size_t n_regions,
                   uint32_t region, uint64_t offset, uint64_t bytes)
{
    return region < n_regions && offset <= regions[region].length &&
           bytes <= regions[region].length - offset;
}

wst_status_t wst_moe_add(struct wst_moe *m, const struct wst_expert_layer *e,
                         const struct wst_region_desc *regions,
                         size_t n_regions, char *err, size_t errlen)
{
    struct wst_moe_layer ml = {0};

    if (e == NULL || e->loader == NULL) {
        wst_errf(err, errlen, "expert layer: no loader named");
        return WST_ERR_INVALID;
    }
    ml.loader = wst_loader_registry_find(&m->loaders, e->loader);
    if (ml.loader == NULL) {
        wst_errf(err, errlen,
                 "layer %u experts: no repack loader named \"%s\" is "
                 "registered",
                 e->layer, e->loader);
        return WST_ERR_INVALID;
    }
    if (wst_dtype_size((enum wst_dtype)e->dtype) == 0 || e->n_experts == 0 ||
        e->ep_size == 0 || e->ep_rank >= e->ep_size || e->hidden == 0 ||
        e->inter == 0 || (e->expert_ids == NULL) != (e->n_expert_ids == 0) ||
        (e->inter_tp_size > 1 && e->inter_tp_rank >= e->inter_tp_size)) {
        wst_errf(err, errlen,
                 "layer %u experts: invalid declaration (dtype %d, E=%u, ep "
                 "rank %u of %u, H=%u, I=%u, %u expert ids, inter tp rank %u "
                 "of %u)",
                 e->layer, e->dtype, e->n_experts, e->ep_rank, e->ep_size,
                 e->hidden, e->inter, e->n_expert_ids, e->inter_tp_rank,
                 e->inter_tp_size);
        return WST_ERR_INVALID;
    }
    for (size_t i = 0; i < m->n_layers; i++)
        if (m->layers[i].layer == e->layer) {
            wst_errf(err, errlen, "layer %u experts declared twice", e->layer);
            return WST_ERR_INVALID;
        }
    ml.layer = e->layer;
    ml.dtype = (enum wst_dtype)e->dtype;
    ml.n_experts = e->n_experts;
    ml.ep_rank = e->ep_rank;
    ml.ep_size = e->ep_size;
    ml.hidden = e->hidden;
    ml.inter = e->inter;
    ml.inter_tp_rank = e->inter_tp_size > 1 ? e->inter_tp_rank : 0;
    ml.inter_tp_size = e->inter_tp_size > 1 ? e->inter_tp_size : 0;
    ml.w13_region = e->w13_region;
    ml.w13_offset = e->w13_offset;
    ml.w2_region = e->w2_region;
    ml.w2_offset = e->w2_offset;
    struct wst_expert_shape s = declared_shape(&ml);
    uint64_t w13 = 0, w2 = 0;
    if (ml.loader->check(&s, NULL, 0) == WST_OK) {
        w13 = ml.loader->w13_bytes(&s);
        w2 = ml.loader->w2_bytes(&s);
    }
    if (!span_ok(regions, n_regions, ml.w13_region, ml.w13_offset, w13) ||
        !span_ok(regions, n_regions, ml.w2_region, ml.w2_offset, w2)) {
        wst_errf(err, errlen,
                 "layer %u experts: live w13 (region %u at %llu, %llu bytes) "
                 "or w2 (region %u at %llu, %llu bytes) is outside its region",
                 e->layer, ml.w13_region, (unsigned long long)ml.w13_offset,
                 (unsigned long long)w13, ml.w2_region,
                 (unsigned long long)ml.w2_offset, (unsigned long long)w2);
        return WST_ERR_INVALID;
    }
    if (e->expert_ids != NULL) {
        ml.expert_ids = malloc(e->n_expert_ids * sizeof(*ml.expert_ids));
        if (ml.expert_ids == NULL)
            return WST_ERR_NO_MEMORY;
        memcpy(ml.expert_ids, e->expert_ids,
               e->n_expert_ids * sizeof(*ml.expert_ids));
        ml.n_expert_ids = e->n_expert_ids;
    }
    if (wst_array_grow(&m->layers, &m->layers_cap, m->n_layers + 1,
                       sizeof(*m->layers)) != WST_OK) {
        free(ml.expert_ids);
        return WST_ERR_NO_MEMORY;
    }
    m->layers[m->n_layers++] = ml;
    return WST_OK;
}

static int by_layer(const void *a, const void *b)
{
    const struct wst_moe_layer *x = a, *y = b;

    return (x->layer > y->layer) - (x->layer < y->layer);
}

/* "1, 3, 5, ..." for a refusal message. */
static void list_ids(const struct wst_moe_layer *ml, char *out, size_t len)
{
    size_t used = 0;

    out[0] = '\0';
    for (uint32_t i = 0; i < ml->n_expert_ids && used + 16 < len; i++) {
        if (i == 6) {
            snprintf(out + used, len - used, ", ...");
            return;
        }
        used += (size_t)snprintf(out + used, len - used, "%s%u", i ? ", " : "",
                                 ml->expert_ids[i]);
    }
}

/* The refusals of DESIGN.md section 4 that need only the engine's side,
 * in the order a user would fix them. */
static wst_status_t refuse_layer(const struct wst_moe_layer *ml, char *err,
                                 size_t errlen)
{
    char t[WST_NAME_MAX];
    uint32_t per = ml->ep_size ? ml->n_experts / ml->ep_size : 0;
    uint64_t start = (uint64_t)ml->ep_rank * per;

    snprintf(t, sizeof(t), "model.layers.%u.mlp.experts.gate_proj.weight",
             ml->layer);
    if (ml->inter_tp_size > 1) {
        wst_errf(err, errlen,
                 "tensor %s (and up_proj; down_proj on dim 2): the engine "
                 "shards dimension 1, the intermediate dimension (I=%u over "
                 "%u ranks), inside each expert; experts may only be split "
                 "on dimension 0, the expert id, so there is no one named "
                 "load per expert",
                 t, ml->inter, ml->inter_tp_size);
        return WST_ERR_EXPERT_SHARDING;
    }
    if (ml->n_experts % ml->ep_size != 0) {
        wst_errf(err, errlen,
                 "tensor %s: %u experts do not split evenly over ep_size %u; "
                 "ceil-sized and linear splits would disagree on which rank "
                 "owns which expert",
                 t, ml->n_experts, ml->ep_size);
        return WST_ERR_EXPERT_DIVISIBILITY;
    }
    if (ml->expert_ids != NULL) {
        int linear = ml->n_expert_ids == per, rr = ml->n_expert_ids == per;
        for (uint32_t i = 0; i < ml->n_expert_ids; i++) {
            linear &= ml->expert_ids[i] == start + i;
            rr &= ml->expert_ids[i] ==
                  (uint64_t)ml->ep_rank + (uint64_t)i * ml->ep_size;
        }
        if (!linear) {
            char ids[96];
            list_ids(ml, ids, sizeof(ids));
            wst_errf(err, errlen,
                     "tensor %s: %s expert placement (ep rank %u of %u holds "
                     "global experts %s); only linear placement is "
                     "supported: rank %u must hold experts [%llu, %llu), "
                     "local expert i being global id %llu + i",
                     t, rr ? "round-robin" : "non-linear", ml->ep_rank,
                     ml->ep_size, ids, ml->ep_rank, (unsigned long long)start,
                     (unsigned long long)(start + per),
                     (unsigned long long)start);
            return WST_ERR_NON_LINEAR_PLACEMENT;
        }
    }
    struct wst_expert_shape s = declared_shape(ml);
    char why[384] = "";
    wst_status_t st = ml->loader->check(&s, why, sizeof(why));
    if (st == WST_OK && strcmp(ml->loader->name, "trtllm-bf16") == 0)
        st = wst_repack_check_experts(ml->n_experts, why, sizeof(why));
    if (st != WST_OK) {
        wst_errf(err, errlen, "tensor %s: the %s layout cannot hold it: %s", t,
                 ml->loader->name, why);
        return WST_ERR_REPACK_SHAPE;
    }
    return WST_OK;
}

static uint64_t align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

/* A loader that cannot write device memory is refused for live buffers
 * on a GPU, like any other layout it cannot produce. */
static wst_status_t refuse_host_loader(const struct wst_moe_layer *ml,
                                       int device, char *err, size_t errlen)
{
    if (device < 0 || ml->loader->load_layer_device != NULL)
        return WST_OK;
    wst_errf(err, errlen,
             "layer %u: loader %s writes host memory only, and the live "
             "expert buffers are on GPU %d",
             ml->layer, ml->loader->name, device);
    return WST_ERR_UNSUPPORTED_LAYOUT;
}

static wst_status_t alloc_staging(struct wst_moe *m, int device)
{
    wst_status_t st;

    if (device < 0) {
        m->staging = aligned_alloc(STAGING_ALIGN, m->staging_bytes);
        if (m->staging == NULL)
            return WST_ERR_NO_MEMORY;
        /* Fault every page in now: first touch during the first refit is
         * not refit work (like registration, it belongs to start-up). */
        memset(m->staging, 0, m->staging_bytes);
        return WST_OK;
    }
    st = wst_gpu_set_device(NULL, device);
    if (st == WST_OK)
        st = wst_gpu_malloc(NULL, m->staging_bytes, &m->staging);
    if (st == WST_OK)
        st = wst_gpu_memset(NULL, m->staging, 0, m->staging_bytes);
    if (st != WST_OK) {
        wst_gpu_free(m->staging);
        m->staging = NULL;
        return st;
    }
    m->staging_device = device;
    return WST_OK;
}

uint64_t wst_moe_expert_bytes(const struct wst_moe_layer *ml)
{
    return (uint64_t)ml->shape.inter * ml->shape.hidden *
           wst_dtype_size(ml->dtype);
}

wst_status_t wst_moe_prepare(struct wst_moe *m, int device)
{
    m->staging_device = -1;
    if (m->n_layers == 0)
        return WST_OK;
    qsort(m->layers, m->n_layers, sizeof(*m->layers), by_layer);
    m->refusal = WST_OK;
    m->slot_bytes = 0;
    for (size_t i = 0; i < m->n_layers; i++) {
        struct wst_moe_layer *ml = &m->layers[i];
        wst_status_t st = refuse_layer(ml, m->reason, sizeof(m->reason));
        if (st == WST_OK)
            st = refuse_host_loader(ml, device, m->reason, sizeof(m->reason));
        if (st != WST_OK) {
            m->refusal = st;
            return WST_OK; /* reported when the receiver plans */
        }
        ml->ordinal = (uint32_t)i;
        ml->slot = (uint32_t)(i % m->slots);
        ml->shape = declared_shape(ml);
        ml->expert_start = (uint64_t)ml->ep_rank * ml->shape.n_local;
        uint64_t bytes = 3ull * ml->shape.n_local * ml->shape.inter *
                         ml->shape.hidden * wst_dtype_size(ml->dtype);
        if (bytes > m->slot_bytes)
            m->slot_bytes = align_up(bytes, STAGING_ALIGN);
    }
    uint32_t used = m->n_layers < m->slots ? (uint32_t)m->n_layers : m->slots;
    m->staging_bytes = m->slot_bytes * used;
    return alloc_staging(m, device);
}

const struct wst_moe_layer *wst_moe_find(const struct wst_moe *m,
                                         uint32_t layer)
{
    for (size_t i = 0; i < m->n_layers; i++)
        if (m->layers[i].layer == layer)
            return &m->layers[i];
    return NULL;
}

void wst_moe_staging_wants(const struct wst_moe *m,
                           const struct wst_moe_layer *ml,
                           uint32_t staging_region, struct wst_want out[3])
{
    static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
    uint64_t L = ml->shape.n_local, I = ml->shape.inter, H = ml->shape.hidden;
    uint64_t part = L * I * H * wst_dtype_size(ml->dtype);

    for (int p = 0; p < 3; p++) {
        struct wst_want *w = &out[p];
        memset(w, 0, sizeof(*w));
        snprintf(w->tensor.name, sizeof(w->tensor.name),
                 "model.layers.%u.mlp.experts.%s.weight", ml->layer, proj[p]);
        w->tensor.dtype = ml->dtype;
        w->tensor.ndim = 3;
        w->tensor.shape[0] = ml->n_experts;
        w->tensor.shape[1] = p < 2 ? I : H;
        w->tensor.shape[2] = p < 2 ? H : I;
        w->box.ndim = 3;
        w->box.start[0] = ml->expert_start;
        w->box.stop[0] = ml->expert_start + L;
        w->box.stop[1] = w->tensor.shape[1];
        w->box.stop[2] = w->tensor.shape[2];
        w->region = staging_region;
        w->offset = ml->slot * m->slot_bytes + (uint64_t)p * part;
        w->expert.grouped = 1;
        w->expert.ep_rank = ml->ep_rank;
        w->expert.ep_size = ml->ep_size;
        w->staged = 1;
    }
}

wst_status_t wst_moe_replay(const struct wst_moe *m,
                            const struct wst_moe_layer *ml,
                            void *const *region_data, char *err, size_t errlen)
{
    const struct wst_expert_shape *s = &ml->shape;
    uint64_t es = wst_dtype_size(ml->dtype);
    uint64_t per = (uint64_t)s->inter * s->hidden * es; /* one expert's gate */
    const char *slot = (const char *)m->staging + ml->slot * m->slot_bytes;
    const char *gate = slot, *up = slot + s->n_local * per,
               *down = slot + 2 * s->n_local * per;
    char *w13 = (char *)region_data[ml->w13_region] + ml->w13_offset;
    char *w2 = (char *)region_data[ml->w2_region] + ml->w2_offset;

    for (uint32_t i = 0; i < s->n_local; i++) {
        /* Staged expert i is global expert_start + i; the loader takes the
         * engine's local index of that global id, which linear placement
         * (checked when planning) makes i again. */
        uint64_t global = ml->expert_start + i;
        uint32_t local = (uint32_t)(global - ml->expert_start);
        wst_status_t st =
            ml->loader->load_expert(ml->loader, s, local, gate + i * per,
                                    up + i * per, down + i * per, w13, w2);
        if (st != WST_OK) {
            wst_errf(err, errlen,
                     "layer %u: loader %s failed on global expert %llu (local "
                     "%u): %s",
                     ml->layer, ml->loader->name, (unsigned long long)global,
                     local, wst_status_string(st));
            return st;
        }
    }
    return WST_OK;
}

void wst_moe_release(struct wst_moe *m)
{
    for (size_t i = 0; i < m->n_layers; i++)
        free(m->layers[i].expert_ids);
    free(m->layers);
    if (m->staging_device >= 0)
        wst_gpu_free(m->staging);
    else
        free(m->staging);
    memset(m, 0, sizeof(*m));
}
