/* nccl_tx.c - the NCCL mover's sending half (see nccl_mover.h). */
#include "nccl_mover.h"

#include <stdlib.h>

struct nccl_tx {
    struct wst_tx tx;           /* first */
    struct wst_nccl_link *link; /* owned; kept while the plan is */
    struct wst_nccl_run *runs;  /* one a row, borrowed by the link */
    size_t *run_first;          /* [n_layers + 1]: each layer's first run */
    uint32_t next;              /* next layer to post */
    uint32_t done;              /* layers [0, done) sent */
    int fence_wanted;           /* fence_layer waits for its send */
    uint32_t fence_layer;
    int in_event; /* an event is being raised: destroy waits for it */
    int dead;     /* destroyed while an event was raised */
};

static void nccl_free(struct nccl_tx *n)
{
    wst_nccl_link_destroy(n->link); /* before its borrowed runs go */
    free(n->runs);
    free(n->run_first);
    free(n);
}

static int whole_layer(const struct wst_tx_plan *pl,
                       const struct wst_tx_cursor *cur, size_t limit,
                       uint32_t *layer_p)
{
    if (cur->item >= pl->n_items || cur->offset != 0)
        return 0;
    uint32_t layer = pl->items[cur->item].layer;
    *layer_p = layer;
    return cur->item == pl->layer_first[layer] &&
           limit >= pl->layer_first[layer + 1];
}

/* Progress thread: the GPU has sent layer 'done' (exchanges complete in
 * the order they were posted). */
static void nccl_sent(void *arg, wst_status_t status)
{
    struct nccl_tx *n = arg;
    const struct wst_tx_plan *pl = n->tx.plan;
    uint32_t layer = n->done++;
    uint64_t bytes = 0;

    for (size_t k = pl->layer_first[layer]; k < pl->layer_first[layer + 1]; k++)
        bytes += wst_plan_item_bytes(&pl->items[k]);
    /* Either event may destroy the tx (a link failing on it). */
    n->in_event++;
    n->tx.ev.moved(n->tx.ev.arg, bytes, status);
    if (!n->dead && n->fence_wanted && n->fence_layer == layer) {
        n->fence_wanted = 0;
        n->tx.ev.fenced(n->tx.ev.arg, layer, status);
    }
    n->in_event--;
    if (n->dead && n->in_event == 0)
        nccl_free(n);
}

/* Posts the cursor's layer as one exchange, if the limit lets all of it
 * go; a full link (WST_ERR_BUSY) waits for a completion. */
static wst_status_t nccl_post(struct wst_tx *tx, struct wst_tx_cursor *cur,
                              size_t limit, int *posted_p)
{
    struct nccl_tx *n = (struct nccl_tx *)tx;
    const struct wst_tx_plan *pl = tx->plan;
    uint32_t layer;

    *posted_p = 0;
    if (!whole_layer(pl, cur, limit, &layer))
        return WST_OK; /* a credit wakes the pump */
    size_t first = pl->layer_first[layer];
    size_t count = pl->layer_first[layer + 1] - first;
    size_t run = n->run_first[layer];
    wst_status_t st = wst_nccl_link_post(n->link, n->runs + run,
                                         n->run_first[layer + 1] - run, NULL, 0,
                                         nccl_sent, n);
    if (st == WST_ERR_BUSY)
        return WST_OK;
    if (st != WST_OK)
        return st;
    n->next = layer + 1;
    cur->item = first + count;
    cur->offset = 0;
    *posted_p = 1;
    return WST_OK;
}

static wst_status_t nccl_fence(struct wst_tx *tx, uint32_t layer)
{
    struct nccl_tx *n = (struct nccl_tx *)tx;

    if (n->done > layer) {
        tx->ev.fenced(tx->ev.arg, layer, WST_OK);
        return WST_OK;
    }
    n->fence_wanted = 1;
    n->fence_layer = layer;
    return WST_OK;
}

static wst_status_t nccl_begin(struct wst_tx *tx, uint64_t version)
{
    struct nccl_tx *n = (struct nccl_tx *)tx;

    if (wst_nccl_link_in_flight(n->link) != 0)
        return WST_ERR_STATE; /* a refit that failed left work behind */
    tx->version = version;
    n->next = 0;
    n->done = 0;
    n->fence_wanted = 0;
    return WST_OK;
}

static void nccl_destroy(struct wst_tx *tx)
{
    struct nccl_tx *n = (struct nccl_tx *)tx;

    if (n->in_event > 0) {
        n->dead = 1; /* nccl_sent frees it once its event returned */
        return;
    }
    nccl_free(n);
}

static const struct wst_tx_ops nccl_ops = {
    .name = "nccl",
    .begin = nccl_begin,
    .post = nccl_post,
    .fence = nccl_fence,
    .destroy = nccl_destroy,
};

wst_status_t wst_tx_nccl_create(const struct wst_tx_nccl_params *p,
                                unsigned char id_p[WST_NCCL_ID_BYTES],
                                struct wst_tx **tx_p)
{
    const struct wst_tx_plan *pl = p->plan;
    struct nccl_tx *n = calloc(1, sizeof(*n));
    wst_status_t st = WST_ERR_NO_MEMORY;

    if (n == NULL)
        return st;
    /* Every row's run, once per plan: a refit posts slices of these. */
    st = wst_nccl_runs_new(pl->items, pl->n_layers, pl->layer_first,
                           &n->run_first, &n->runs);
    if (st != WST_OK)
        goto err_free;
    for (size_t k = 0, r = 0; k < pl->layer_first[pl->n_layers]; k++) {
        const struct wst_plan_item *it = &pl->items[k];
        for (uint64_t row = 0; row <= it->more_rows; row++, r++) {
            n->runs[r].ptr = (char *)pl->srcs[k].ptr + row * it->src_stride;
            n->runs[r].bytes = it->length;
            n->runs[r].peer = 1; /* the receiver */
        }
    }
    n->tx.ops = &nccl_ops;
    n->tx.ev = p->events;
    n->tx.plan = pl;
    st = wst_nccl_get_id(p->log, id_p);
    if (st != WST_OK)
        goto err_free;
    st =
        wst_nccl_link_create(p->log, p->worker, p->device, id_p, 2, 0,
                             p->timeout_s, p->ready_fn, p->ready_arg, &n->link);
    if (st != WST_OK)
        goto err_free;
    *tx_p = &n->tx;
    return WST_OK;

err_free:
    free(n->runs);
    free(n->run_first);
    free(n);
    return st;
}
