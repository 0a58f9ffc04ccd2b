/* refit_sizes.c - the refit state machine's storage: sized for a world of
 * senders and a plan, seeded with a restarted receiver's state, and freed
 * (refit_machine.h). Nothing here decides a refit; refit_machine.c does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit_machine.h"

static void free_cells(struct wst_rm_cells *c)
{
    free(c->marks);
    free(c->landed);
    free(c->digests);
    free(c->hashed);
    free(c->sums);
}

/* Zeroed, for world x n_layers. */
static wst_status_t alloc_cells(struct wst_rm_cells *c, uint32_t world,
                                uint32_t n_layers)
{
    size_t n = (size_t)world * n_layers + 1;

    c->marks = calloc(n, 1);
    c->landed = calloc(n, sizeof(*c->landed));
    c->digests = calloc(n, sizeof(*c->digests));
    c->hashed = calloc(n, sizeof(*c->hashed));
    c->sums = calloc(n, sizeof(*c->sums));
    if (c->marks != NULL && c->landed != NULL && c->digests != NULL &&
        c->hashed != NULL && c->sums != NULL)
        return WST_OK;
    free_cells(c);
    return WST_ERR_NO_MEMORY;
}

static void free_layers(struct wst_rm_layers *l)
{
    free(l->bytes);
    free(l->staged);
    free(l->moe_layers);
    free(l->moe_ordinal);
    free(l->queued);
    free(l->verified);
    free(l->repacked);
}

static wst_status_t copy_plan(struct wst_rm_layers *l,
                              const struct wst_rm_plan *plan)
{
    size_t n = (size_t)plan->n_senders * plan->n_layers;

    *l = (struct wst_rm_layers){.n_senders = plan->n_senders,
                                .n_layers = plan->n_layers,
                                .total_bytes = plan->total_bytes,
                                .n_moe = plan->n_moe,
                                .slots = plan->slots ? plan->slots : 1};
    l->bytes = calloc(n + 1, sizeof(*l->bytes));
    l->staged = calloc(n + 1, 1);
    l->moe_layers = calloc(l->n_moe + 1, sizeof(*l->moe_layers));
    l->moe_ordinal = calloc(l->n_layers + 1, sizeof(*l->moe_ordinal));
    l->queued = calloc(l->n_layers + 1, sizeof(*l->queued));
    l->verified = calloc(l->n_layers + 1, sizeof(*l->verified));
    l->repacked = calloc(l->n_moe + 1, 1);
    if (l->bytes == NULL || l->staged == NULL || l->moe_layers == NULL ||
        l->moe_ordinal == NULL || l->queued == NULL || l->verified == NULL ||
        l->repacked == NULL) {
        free_layers(l);
        return WST_ERR_NO_MEMORY;
    }
    if (n != 0) {
        memcpy(l->bytes, plan->layer_bytes, n * sizeof(*l->bytes));
        memcpy(l->staged, plan->staged, n);
    }
    for (uint32_t layer = 0; layer < l->n_layers; layer++)
        l->moe_ordinal[layer] = WST_RM_DENSE;
    for (uint32_t k = 0; k < l->n_moe; k++) {
        l->moe_layers[k] = plan->moe_layers[k];
        if (l->moe_layers[k] < l->n_layers)
            l->moe_ordinal[l->moe_layers[k]] = k;
    }
    return WST_OK;
}

wst_status_t wst_rm_set_world(struct wst_refit_machine *m, uint32_t world)
{
    struct wst_rm_sender *senders = calloc(world + 1, sizeof(*senders));
    struct wst_rm_cells cells;

    if (senders == NULL)
        return WST_ERR_NO_MEMORY;
    if (alloc_cells(&cells, world, m->lay.n_layers) != WST_OK) {
        free(senders);
        return WST_ERR_NO_MEMORY;
    }
    free(m->senders);
    m->senders = senders;
    m->world = world;
    free_cells(&m->cells);
    m->cells = cells;
    return WST_OK;
}

wst_status_t wst_rm_set_plan(struct wst_refit_machine *m,
                             const struct wst_rm_plan *plan)
{
    struct wst_rm_layers lay;
    struct wst_rm_cells cells;

    if (copy_plan(&lay, plan) != WST_OK)
        return WST_ERR_NO_MEMORY;
    if (alloc_cells(&cells, m->world, plan->n_layers) != WST_OK) {
        free_layers(&lay);
        return WST_ERR_NO_MEMORY;
    }
    free_layers(&m->lay);
    m->lay = lay;
    free_cells(&m->cells);
    m->cells = cells;
    return WST_OK;
}

void wst_rm_seed(struct wst_refit_machine *m, uint64_t committed_version,
                 const char *committed_label, const char *unusable_reason)
{
    m->committed_version = committed_version;
    snprintf(m->committed_label, sizeof(m->committed_label), "%s",
             committed_label != NULL ? committed_label : "");
    m->unusable = unusable_reason != NULL && unusable_reason[0] != '\0';
    snprintf(m->reason, sizeof(m->reason), "%s",
             m->unusable ? unusable_reason : "");
}

void wst_rm_release(struct wst_refit_machine *m)
{
    free(m->senders);
    free_layers(&m->lay);
    free_cells(&m->cells);
    memset(m, 0, sizeof(*m));
}
