/* plan_validate.c - what wst_plan_build checks before it plans: the input
 * arrays and every want (planner_internal.h), and the expert layouts it
 * refuses (REFIT_LAYOUTS.md section 2). Moved out of planner.c unchanged.
 */
#include "planner_internal.h"

/* ---- validation --------------------------------------------------------- */

wst_status_t wst_plan_validate_input(struct planner *p)
{
    const struct wst_plan_input *in = p->in;
    size_t i;
    uint32_t s;

    if ((in->n_wants && in->wants == NULL) ||
        (in->n_senders && (in->haves == NULL || in->n_haves == NULL)))
        return wst_plan_fail(p, WST_ERR_INVALID,
                             "planner: missing input arrays");
    for (i = 0; i < in->n_wants; i++) {
        const struct wst_want *w = &in->wants[i];

        if (wst_want_expert_check(w) != WST_OK)
            return wst_plan_fail(
                p, WST_ERR_INVALID,
                "want %zu (tensor %.*s): invalid expert "
                "descriptor (grouped %d, ep rank %u of %u, ndim "
                "%u)",
                i, wst_plan_name_len(w->tensor.name), w->tensor.name,
                w->expert.grouped, w->expert.ep_rank, w->expert.ep_size,
                w->tensor.ndim);
        if (wst_want_check(w, in->regions, in->n_regions) != WST_OK)
            return wst_plan_fail(
                p, WST_ERR_INVALID,
                "want %zu (tensor %.*s): invalid entry "
                "(dtype, shape, box, row pitch or region range)",
                i, wst_plan_name_len(w->tensor.name), w->tensor.name);
    }
    for (s = 0; s < in->n_senders; s++) {
        if (in->n_haves[s] && in->haves[s] == NULL)
            return wst_plan_fail(p, WST_ERR_INVALID,
                                 "planner: sender %u has no have array", s);
        if (in->n_haves[s] > UINT32_MAX)
            return wst_plan_fail(p, WST_ERR_INVALID,
                                 "planner: sender %u has too many haves", s);
    }
    return WST_OK; /* each have is checked as it is indexed (group_names) */
}

/* ---- expert refusals ---------------------------------------------------- */

/* A grouped want must be exactly its linear-placement range of dim 0 and the
 * whole of every other dim (REFIT_LAYOUTS.md section 2). Checked in the
 * order divisibility, non-expert sharding, placement, so the message names
 * the most basic problem. */
static wst_status_t check_expert_want(struct planner *p,
                                      const struct wst_want *w, size_t wi)
{
    const struct wst_want_expert *e = &w->expert;
    uint64_t n_exp = w->tensor.shape[0], start = 0, stop = 0;
    uint32_t d;

    if (wst_want_expert_range(w, &start, &stop) != WST_OK)
        return wst_plan_fail(
            p, WST_ERR_EXPERT_DIVISIBILITY,
            "tensor %s: %llu experts over ep %u do not divide "
            "evenly (%llu left over); ceil-sized and linear "
            "placements would disagree (want %zu of receiver %u)",
            w->tensor.name, (unsigned long long)n_exp, e->ep_size,
            (unsigned long long)(n_exp % e->ep_size), wi, p->in->receiver_rank);
    for (d = 1; d < w->box.ndim; d++) {
        if (w->box.start[d] != 0 || w->box.stop[d] != w->tensor.shape[d])
            return wst_plan_fail(
                p, WST_ERR_EXPERT_SHARDING,
                "tensor %s: expert want cuts non-expert dimension %u "
                "([%llu, %llu) of [0, %llu)); experts may be split on dim 0 "
                "only (want %zu of receiver %u)",
                w->tensor.name, d, (unsigned long long)w->box.start[d],
                (unsigned long long)w->box.stop[d],
                (unsigned long long)w->tensor.shape[d], wi,
                p->in->receiver_rank);
    }
    if (w->box.start[0] != start || w->box.stop[0] != stop)
        return wst_plan_fail(
            p, WST_ERR_NON_LINEAR_PLACEMENT,
            "tensor %s: ep rank %u of %u wants experts [%llu, "
            "%llu), linear placement gives it [%llu, %llu) "
            "(want %zu of receiver %u)",
            w->tensor.name, e->ep_rank, e->ep_size,
            (unsigned long long)w->box.start[0],
            (unsigned long long)w->box.stop[0], (unsigned long long)start,
            (unsigned long long)stop, wi, p->in->receiver_rank);
    return WST_OK;
}

/* Runs before any intersection: a refused layout moves no byte. Haves are
 * not checked: senders may own any box of a grouped tensor. */
wst_status_t wst_plan_check_expert_wants(struct planner *p)
{
    wst_status_t status = WST_OK;
    size_t i;

    for (i = 0; i < p->in->n_wants && status == WST_OK; i++) {
        if (p->in->wants[i].expert.grouped)
            status = check_expert_want(p, &p->in->wants[i], i);
    }
    return status;
}
