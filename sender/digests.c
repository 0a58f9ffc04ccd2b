/* digests.c - layer digests. They are computed on the application thread
 * inside push, layer by layer (host runs here, device runs on the GPU), and
 * handed to the progress thread as they are ready; data does not wait for
 * them, so hashing overlaps sending. A layer's LAYER_DONE carries its
 * digest (pump.c).
 */
#include <stdlib.h>

#include "device.h"
#include "digest.h"
#include "log.h"
#include "sender_internal.h"
#include "worker.h"

struct digest_ready {
    struct link *l;
    uint64_t version;
    uint32_t layer;
    uint64_t digest;
    wst_status_t status; /* not WST_OK: the layer has no digest */
};

static void do_digest_ready(void *arg)
{
    struct digest_ready *d = arg;
    struct link *l = d->l;

    WST_TRACE(&l->s->log, "receiver %s: digest of layer %u ready", l->name,
              d->layer);
    if (l->version == d->version && l->have_plan &&
        d->layer == l->digests_ready) {
        if (d->status != WST_OK) {
            /* The refit cannot complete: its caller hears why now, not at
             * its deadline. */
            wst_link_fail(l, d->status, "cannot digest layer %u on the GPU",
                          d->layer);
        } else {
            l->digests[d->layer] = d->digest;
            l->digests_ready = d->layer + 1;
            wst_send_pump(l);
        }
    }
    free(d);
}

/* One layer's digest for one link: host runs on this thread, device runs
 * on the GPU. */
static wst_status_t layer_digest(struct wst_sender *s, const struct link *l,
                                 uint32_t layer, uint64_t *digest_p)
{
    struct wst_digest d;
    wst_status_t st = WST_OK;

    wst_digest_init(&d);
    for (size_t k = l->layer_first[layer];
         st == WST_OK && k < l->layer_first[layer + 1]; k++) {
        const struct wst_plan_item *it = &l->plan.items[k];
        const struct shard *sh = &s->shards[it->have];
        const char *run = (const char *)sh->data + it->src_offset;
        if (sh->device >= 0)
            st = wst_send_device_digest_add(s->dev, &d, run, it->length);
        else
            wst_digest_update(&d, run, it->length);
    }
    if (st == WST_OK && s->dev != NULL)
        st = wst_send_device_digest_flush(s->dev, &d);
    *digest_p = wst_digest_final(&d);
    return st;
}

void wst_send_compute_digests(struct wst_sender *s, uint64_t version)
{
    uint32_t max_layers = 0;

    for (size_t i = 0; i < s->n_links; i++)
        if (s->links[i].plan.n_layers > max_layers)
            max_layers = s->links[i].plan.n_layers;
    /* Layer-major, so the first layer of every receiver is ready first. */
    for (uint32_t layer = 0; layer < max_layers; layer++) {
        for (size_t i = 0; i < s->n_links; i++) {
            struct link *l = &s->links[i];
            if (layer >= l->plan.n_layers)
                continue;
            uint64_t digest;
            /* A failure goes to the progress thread too, which fails the
             * link with it (the link is not this thread's to fail). */
            wst_status_t st = layer_digest(s, l, layer, &digest);
            struct digest_ready *dr = malloc(sizeof(*dr));
            if (dr == NULL)
                continue; /* the refit then stalls into its deadline */
            dr->l = l;
            dr->version = version;
            dr->layer = layer;
            dr->digest = digest;
            dr->status = st;
            wst_worker_post(s->worker, do_digest_ready, dr);
        }
    }
}
