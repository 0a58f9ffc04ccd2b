/* deadlines.c - the worker's tick: a refit without progress, and
 * manifests that never came, past the timeout (progress thread). */
#include <stdio.h>

#include "clock.h"
#include "log.h"
#include "receiver_internal.h"

void wst_recv_on_tick(void *arg)
{
    struct wst_receiver *r = arg;
    uint64_t now = wst_now_ns();
    uint64_t limit = (uint64_t)(r->timeout_s * 1e9);

    if (wst_rm_stalled(&r->rm, now, limit)) {
        struct wst_rm_event ev = {.kind = WST_RM_EV_DEADLINE,
                                  .seconds = r->timeout_s};
        wst_recv_refit_event(r, &ev);
        return;
    }
    if (r->first_have_ns == 0 || now - r->first_have_ns <= limit)
        return;
    /* Some ranks never sent a manifest: say which, and start over. */
    char missing[256] = "";
    size_t used = 0;
    for (uint32_t i = 0; i < r->world_size && used < sizeof(missing); i++)
        if (r->by_rank[i] == NULL || !r->by_rank[i]->have_done)
            used += (size_t)snprintf(missing + used, sizeof(missing) - used,
                                     "%s%u", used ? "," : "", i);
    if (used == 0) {
        r->first_have_ns = 0;
        return;
    }
    struct job refusal = {.status = WST_ERR_TIMED_OUT};
    snprintf(refusal.reason, sizeof(refusal.reason),
             "no have manifest from sender ranks %s within %.1f s", missing,
             r->timeout_s);
    WST_ERROR(&r->log, "%s", refusal.reason);
    wst_recv_for_each_peer(r, wst_recv_refuse_to_peer, &refusal);
    r->first_have_ns = 0;
}
