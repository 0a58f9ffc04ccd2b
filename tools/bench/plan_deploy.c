/* plan_deploy.c - trainer have manifests and engine want manifests of a
 * full-size model (plan_deploy.h). */
#include "plan_deploy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "dtype.h"

struct have_vec {
    struct wst_have *v;
    size_t n, cap;
};

static struct wst_box whole(const struct wst_tensor_desc *t)
{
    struct wst_box b;

    memset(&b, 0, sizeof(b));
    b.ndim = t->ndim;
    memcpy(b.stop, t->shape, sizeof(b.stop));
    return b;
}

/* Part k of n of [0, len) in ceil-sized chunks (torch.chunk, FSDP2,
 * vLLM's padded partitions); empty past the end. */
static void chunk(uint64_t len, uint32_t k, uint32_t n, uint64_t *a_p,
                  uint64_t *b_p)
{
    uint64_t c = (len + n - 1) / n, a = (uint64_t)k * c;

    *a_p = a < len ? a : len;
    *b_p = a + c < len ? a + c : len;
}

static wst_status_t push(struct have_vec *hv, const struct wst_tensor_desc *t,
                         const struct wst_box *b)
{
    struct wst_have *h;

    if (wst_box_elems(b) == 0)
        return WST_OK; /* an empty FSDP chunk: nothing to list */
    if (wst_array_grow(&hv->v, &hv->cap, hv->n + 1, sizeof(*hv->v)) != WST_OK)
        return WST_ERR_NO_MEMORY;
    h = &hv->v[hv->n++];
    memset(h, 0, sizeof(*h));
    h->tensor = *t;
    h->box = *b;
    h->mem = WST_MEM_HOST;
    return WST_OK;
}

/* TP's box of a dense tensor for TP rank k of n. */
static struct wst_box tp_box(const struct pm_tensor *pt, uint32_t k, uint32_t n)
{
    struct wst_box b = whole(&pt->t);

    if (pt->cut == PM_COLUMN || pt->cut == PM_VOCAB)
        chunk(pt->t.shape[0], k, n, &b.start[0], &b.stop[0]);
    else if (pt->cut == PM_ROW)
        chunk(pt->t.shape[1], k, n, &b.start[1], &b.stop[1]);
    return b;
}

static int in_stage(const struct pm_model *m, const struct pm_tensor *pt,
                    uint32_t stage, uint32_t pp)
{
    uint32_t lo = (uint32_t)((uint64_t)stage * m->layers / pp);
    uint32_t hi = (uint32_t)((uint64_t)(stage + 1) * m->layers / pp);

    if (pt->layer != UINT32_MAX)
        return pt->layer >= lo && pt->layer < hi;
    /* embeddings first, final norm and lm_head last */
    return strcmp(pt->t.name, "model.embed_tokens.weight") == 0
               ? stage == 0
               : stage == pp - 1;
}

static wst_status_t megatron_haves(const struct pm_model *m,
                                   const struct pd_trainer *t, uint32_t rank,
                                   struct have_vec *hv)
{
    uint32_t per_stage = t->n / t->pp, stage = rank / per_stage;
    uint32_t idx = rank % per_stage, tp_rank = idx % t->tp;
    uint32_t ep_rank = idx % t->ep;
    wst_status_t st = WST_OK;

    for (size_t i = 0; i < m->n && st == WST_OK; i++) {
        const struct pm_tensor *pt = &m->v[i];
        struct wst_box b;
        uint64_t e0, e1;

        if (!in_stage(m, pt, stage, t->pp))
            continue;
        if (pt->cut != PM_EXPERTS) {
            b = tp_box(pt, tp_rank, t->tp);
            st = push(hv, &pt->t, &b);
            continue;
        }
        chunk(pt->t.shape[0], ep_rank, t->ep, &e0, &e1);
        for (uint64_t e = e0; e < e1 && st == WST_OK; e++) {
            b = whole(&pt->t);
            b.start[0] = e;
            b.stop[0] = e + 1;
            st = push(hv, &pt->t, &b);
        }
    }
    return st;
}

static wst_status_t fsdp_haves(const struct pm_model *m,
                               const struct pd_trainer *t, uint32_t rank,
                               struct have_vec *hv)
{
    uint32_t f = t->n / t->ep, ep_rank = rank / f, q = rank % f;
    wst_status_t st = WST_OK;

    for (size_t i = 0; i < m->n && st == WST_OK; i++) {
        const struct pm_tensor *pt = &m->v[i];
        struct wst_box b = whole(&pt->t);

        if (pt->cut != PM_EXPERTS) {
            chunk(pt->t.shape[0], rank, t->n, &b.start[0], &b.stop[0]);
        } else {
            chunk(pt->t.shape[0], ep_rank, t->ep, &b.start[0], &b.stop[0]);
            chunk(pt->t.shape[1], q, f, &b.start[1], &b.stop[1]);
        }
        st = push(hv, &pt->t, &b);
    }
    return st;
}

wst_status_t pd_sender_haves(const struct pm_model *m,
                             const struct pd_trainer *t, uint32_t rank,
                             struct wst_have **haves_p, size_t *n_p)
{
    struct have_vec hv = {0};
    wst_status_t st;

    st = t->kind == PD_MEGATRON ? megatron_haves(m, t, rank, &hv)
                                : fsdp_haves(m, t, rank, &hv);
    if (st != WST_OK) {
        free(hv.v);
        return st;
    }
    *haves_p = hv.v;
    *n_p = hv.n;
    return WST_OK;
}

static int divides(uint64_t d, uint64_t n)
{
    return d != 0 && n % d == 0;
}

wst_status_t pd_check(const struct pm_model *m, const struct pd_trainer *t,
                      const struct pd_engine *e, char *err, size_t errlen)
{
    uint64_t experts = m->shape->experts, heads = m->shape->heads;

    if (t->kind == PD_MEGATRON &&
        (!divides((uint64_t)t->tp * t->pp, t->n) ||
         !divides(t->ep, t->n / t->pp) || t->pp > m->layers)) {
        snprintf(err, errlen,
                 "megatron: tp %u x pp %u must divide %u ranks, ep %u the "
                 "%u ranks of a stage, pp at most %u layers",
                 t->tp, t->pp, t->n, t->ep, t->pp ? t->n / t->pp : 0,
                 m->layers);
        return WST_ERR_INVALID;
    }
    if (!divides(t->ep, t->n) || !divides(t->ep, experts)) {
        snprintf(err, errlen,
                 "trainer ep %u must divide %u ranks and %llu "
                 "experts",
                 t->ep, t->n, (unsigned long long)experts);
        return WST_ERR_INVALID;
    }
    if (!divides(e->tp, e->n) || !divides(e->ep, e->n) ||
        !divides(e->ep, experts) || !divides(e->tp, heads)) {
        snprintf(err, errlen,
                 "engine tp %u and ep %u must divide %u ranks, ep the %llu "
                 "experts, tp the %llu heads",
                 e->tp, e->ep, e->n, (unsigned long long)experts,
                 (unsigned long long)heads);
        return WST_ERR_INVALID;
    }
    return WST_OK;
}

/* A want of pt's box b at 'offset' into region 'region'. */
static void set_want(struct wst_want *w, const struct pm_tensor *pt,
                     const struct wst_box *b, uint32_t region, uint64_t offset)
{
    memset(w, 0, sizeof(*w));
    w->tensor = pt->t;
    w->box = *b;
    w->region = region;
    w->offset = offset;
}

wst_status_t pd_receiver_wants(const struct pm_model *m,
                               const struct pd_engine *e, uint32_t rank,
                               struct pd_wants *out)
{
    uint32_t tp_rank = rank % e->tp, ep_rank = rank % e->ep;
    uint32_t region = UINT32_MAX;

    memset(out, 0, sizeof(*out));
    out->wants = calloc(m->n ? m->n : 1, sizeof(*out->wants));
    out->regions = calloc(m->n ? m->n : 1, sizeof(*out->regions));
    if (out->wants == NULL || out->regions == NULL) {
        pd_wants_free(out);
        return WST_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < m->n; i++) {
        const struct pm_tensor *pt = &m->v[i];
        struct wst_want *w = &out->wants[out->n_wants++];
        struct wst_region_desc *rd;
        struct wst_box b;

        if (pt->fuse == i) { /* a new live parameter */
            region = (uint32_t)out->n_regions++;
            rd = &out->regions[region];
            snprintf(rd->name, sizeof(rd->name), "%s", pt->t.name);
            rd->mem = WST_MEM_HOST;
        }
        rd = &out->regions[region];
        if (pt->cut == PM_EXPERTS) {
            b = whole(&pt->t);
            chunk(pt->t.shape[0], ep_rank, e->ep, &b.start[0], &b.stop[0]);
            set_want(w, pt, &b, region, rd->length);
            w->expert.grouped = 1;
            w->expert.ep_rank = ep_rank;
            w->expert.ep_size = e->ep;
            w->staged = 1;
        } else {
            b = tp_box(pt, tp_rank, e->tp);
            set_want(w, pt, &b, region, rd->length);
        }
        rd->length += wst_want_span(w);
    }
    return WST_OK;
}

void pd_wants_free(struct pd_wants *w)
{
    free(w->wants);
    free(w->regions);
    memset(w, 0, sizeof(*w));
}
