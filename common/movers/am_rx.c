/* am_rx.c - the am mover's receiving half (see am.h): data messages from
 * one sender land where its plan puts them, or, for device memory, in the
 * landing ring first and on the GPU after their copy -- unless this
 * receiver's UCX can write device memory and UCX itself moves the message
 * (rendezvous): then it lands in device memory directly (the direct path;
 * an eager message is copied with memcpy and still needs the ring), or,
 * for device memory this process cannot export (mapped from its engine by
 * CUDA IPC), in the device ring first and in place after a copy on the
 * GPU (landing.h says why).
 *
 * A message is accepted only while a refit of its version is receiving,
 * only inside the sender's own items (one chunk of an item, whole
 * neighbouring items gathered, or whole small items of one layer
 * scattered: eager, through a scratch buffer, each to its own place), and,
 * for staged items, only after their credit. Anything else fails the refit:
 * bytes outside the plan are never written.
 *
 * A message into host memory is hashed as it lands, on the hashing
 * threads, while its bytes are still in cache: the layer's digest check
 * then adds up the parts instead of reading the layer again from memory
 * (a serial pass over every byte at the end of the refit otherwise). It
 * counts as landed once hashed. A message not cut at digest chunk
 * boundaries (our senders always cut there) is not hashed, and its
 * layer is read again. Device memory is never read here: its layers are
 * hashed on the GPU when the layer is checked.
 *
 * Copies to the GPU and hashes outlive a failed refit: each carries the
 * half's epoch (bumped by begin and abort), and a late one is not counted.
 * The half itself is freed only once its last copy and hash completed.
 */
#include "am.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "digest.h"

/* Messages up to this size are hashed on the progress thread as they
 * land: handing one to a hashing thread and back (a queue, a wake-up and
 * a post each way) costs more than hashing 64 KiB in cache, and a scale
 * run's messages are mostly this small (NOTES.md, issue 21). */
#define WST_HASH_INLINE_MAX (64u * 1024u)

const char *const wst_am_dest_class_names[WST_AM_DEST_CLASSES] = {
    "host memory", "device memory by UCX", "device ring, then copied",
    "pinned ring, then copied"};

struct am_rx {
    struct wst_rx rx; /* first */
    const struct wst_logger *log;
    struct wst_landing *landing;        /* borrowed; NULL: host regions only */
    int ucx_cuda;                       /* UCX writes device memory (am.h) */
    struct wst_landing *device_landing; /* borrowed; may be NULL */
    struct wst_rx_am_stats *stats;      /* borrowed; may be NULL */
    wst_jobq_t *hashers;  /* borrowed; NULL: not hashed as it lands */
    wst_worker_t *worker; /* borrowed: hashes come back to it */
    uint64_t *pos; /* [n_items]: each item's stream position in its layer */
    uint32_t epoch;
    unsigned char *scratch; /* WST_SCATTER_BYTES, on the first scatter
                               message: each one lands here and is copied
                               out before the next (eager: data_dest and
                               data_done come in one call, worker.h) */
    uint64_t *put_bytes;    /* [n_layers] with put_share (am.h), or NULL */
    uint64_t copies;        /* landing copies in flight */
    uint64_t hashes;        /* hash jobs in flight */
    uint32_t holds;         /* calls that raise events and go on after */
    int destroyed;
};

/* One landed message to hash: runs of bytes from src, one per item, each
 * with its stream position. Owned by the job until it is back. */
struct hash_job {
    struct am_rx *a;
    uint32_t epoch;
    uint32_t layer;
    const char *src;
    uint64_t len;
    uint64_t sum;
    uint64_t rows; /* > 0: runs[0] is the first of this many rows, each
                      runs[0].len bytes, one after the other (planner.h) */
    uint32_t n_runs;
    struct hash_run {
        uint64_t len;
        uint64_t pos;
    } runs[];
};

static void fail(struct am_rx *a, wst_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail(struct am_rx *a, wst_status_t status, const char *fmt, ...)
{
    char reason[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    a->rx.ev.failed(a->rx.ev.arg, status, reason);
}

/* A scatter message (worker.h): whole items [item, item + count) of one
 * layer, staged alike, each into host memory, 'len' bytes in all, at most
 * WST_SCATTER_BYTES. */
static int scatter_fits(const struct wst_rx_plan *pl,
                        const struct wst_data_hdr *hdr, size_t len)
{
    const struct wst_plan_item *it = &pl->items[hdr->item];
    uint64_t sum = 0;

    if (hdr->count == 0 || hdr->count > pl->n_items - hdr->item ||
        hdr->offset != 0 || len > WST_SCATTER_BYTES)
        return 0;
    for (uint32_t k = 0; k < hdr->count; k++) {
        const struct wst_plan_item *x = &it[k];
        if (x->layer != it->layer || x->staged != it->staged ||
            x->more_rows != 0 || pl->regions[x->region].mem == WST_MEM_CUDA ||
            x->length > WST_SCATTER_BYTES - sum)
            return 0;
        sum += x->length;
    }
    return sum == len;
}

/* Whether a data message lands exactly where the plan puts it: 'len'
 * bytes at 'offset' into one item (whole rows of an item of rows), or
 * (count > 1) whole items [item, item + count) of one layer and region
 * whose destinations follow each other, 'len' bytes in all. */
static int data_fits(const struct wst_rx_plan *pl,
                     const struct wst_data_hdr *hdr, size_t len)
{
    const struct wst_plan_item *it = &pl->items[hdr->item];
    uint64_t sum = 0, bytes = wst_plan_item_bytes(it);

    if (hdr->flags & WST_DATA_SCATTER)
        return scatter_fits(pl, hdr, len);
    if (hdr->count == 1)
        return hdr->offset <= bytes && len <= bytes - hdr->offset &&
               (it->more_rows == 0 ||
                (hdr->offset % it->length == 0 && len % it->length == 0));
    if (hdr->count == 0 || hdr->count > pl->n_items - hdr->item ||
        hdr->offset != 0)
        return 0;
    for (uint32_t k = 0; k < hdr->count; k++) {
        const struct wst_plan_item *x = &it[k];
        if (x->layer != it->layer || x->region != it->region ||
            x->staged != it->staged || x->more_rows != 0 ||
            x->dst_offset != it->dst_offset + sum)
            return 0;
        sum += x->length;
    }
    return sum == len;
}

/* Whether a message that fits its plan (data_fits) writes a keyed
 * region: those of a put plan come by put only. */
static int into_keyed(const struct wst_rx_plan *pl,
                      const struct wst_data_hdr *hdr)
{
    for (uint32_t k = 0; k < hdr->count; k++)
        if (pl->regions[pl->items[hdr->item + k].region].keyed)
            return 1;
    return 0;
}

static int current(const struct am_rx *a, uint64_t version)
{
    return a->rx.receiving && version == a->rx.version;
}

static void count_placed(struct am_rx *a, enum wst_am_dest_class cls)
{
    if (a->stats == NULL)
        return;
    struct wst_am_class_stats *c = &a->stats->c[cls];
    uint64_t now = wst_now_ns();
    if (c->placed == 0 || now < c->first_ns)
        c->first_ns = now;
    c->placed++;
    c->placed_ns_sum += now;
}

static void count_received(struct am_rx *a, enum wst_am_dest_class cls,
                           size_t len)
{
    if (a->stats == NULL)
        return;
    struct wst_am_class_stats *c = &a->stats->c[cls];
    uint64_t now = wst_now_ns();
    c->received++;
    c->bytes += len;
    c->received_ns_sum += now;
    if (now > c->last_ns)
        c->last_ns = now;
}

/* The ring that holds 'dest', or NULL. */
static struct wst_landing *ring_of(const struct am_rx *a, const void *dest)
{
    if (dest == NULL)
        return NULL;
    if (a->landing != NULL && wst_landing_owns(a->landing, dest))
        return a->landing;
    if (a->device_landing != NULL && wst_landing_owns(a->device_landing, dest))
        return a->device_landing;
    return NULL;
}

static wst_status_t am_dest(struct wst_rx *rx, const struct wst_data_hdr *hdr,
                            size_t len, int rndv, void **dest_p)
{
    struct am_rx *a = (struct am_rx *)rx;
    const struct wst_rx_plan *pl = rx->plan;

    if (!current(a, hdr->version)) {
        WST_DEBUG(a->log, "data for version %llu dropped (not receiving it)",
                  (unsigned long long)hdr->version);
        return WST_ERR_STATE;
    }
    if (hdr->flags & ~WST_DATA_FLAGS_ALL) {
        fail(a, WST_ERR_PROTOCOL, "data message with unknown flags 0x%x",
             hdr->flags);
        return WST_ERR_PROTOCOL;
    }
    if ((hdr->flags & WST_DATA_SCATTER) && rndv) {
        fail(a, WST_ERR_PROTOCOL,
             "a scatter data message of %zu bytes came by rendezvous (they "
             "are eager)",
             len);
        return WST_ERR_PROTOCOL;
    }
    if (hdr->item >= pl->n_items || !data_fits(pl, hdr, len)) {
        fail(a, WST_ERR_PROTOCOL,
             "data for item %u (x%u) at %llu+%zu outside its plan", hdr->item,
             hdr->count, (unsigned long long)hdr->offset, len);
        return WST_ERR_PROTOCOL;
    }
    const struct wst_plan_item *it = &pl->items[hdr->item];
    if (a->put_bytes != NULL && into_keyed(pl, hdr)) {
        fail(a, WST_ERR_PROTOCOL,
             "data for item %u (x%u) as a message into a region it was given "
             "a remote key for",
             hdr->item, hdr->count);
        return WST_ERR_PROTOCOL;
    }
    if (!wst_rx_item_allowed(rx, hdr->item)) {
        fail(a, WST_ERR_PROTOCOL,
             "experts of layer %u sent before their credit", it->layer);
        return WST_ERR_PROTOCOL;
    }
    if (hdr->flags & WST_DATA_SCATTER) {
        if (a->scratch == NULL)
            a->scratch = malloc(WST_SCATTER_BYTES);
        if (a->scratch == NULL) {
            fail(a, WST_ERR_NO_MEMORY, "no memory for scatter messages");
            return WST_ERR_NO_MEMORY;
        }
        *dest_p = a->scratch;
        count_placed(a, WST_AM_TO_HOST);
        return WST_OK;
    }
    const struct wst_rx_region *reg = &pl->regions[it->region];
    struct wst_landing *ring = a->landing;
    enum wst_am_dest_class cls = WST_AM_TO_HOST_RING;
    if (reg->mem != WST_MEM_CUDA) {
        cls = WST_AM_TO_HOST;
        ring = NULL;
    } else if (rndv && wst_am_lands_direct(reg, a->ucx_cuda,
                                           a->device_landing != NULL)) {
        cls = WST_AM_TO_DEVICE;
        ring = NULL;
    } else if (a->ucx_cuda && rndv) {
        cls = WST_AM_TO_DEVICE_RING;
        ring = a->device_landing;
    }
    if (ring == NULL && cls == WST_AM_TO_HOST_RING) {
        fail(a, WST_ERR_PROTOCOL,
             "a data message for device memory and no landing ring");
        return WST_ERR_PROTOCOL;
    }
    if (ring == NULL) {
        *dest_p = wst_rx_item_dest(pl, it, hdr->offset);
        count_placed(a, cls);
        return WST_OK;
    }
    if (len > wst_landing_message_max(ring)) {
        fail(a, WST_ERR_PROTOCOL,
             "a %zu-byte data message for device memory exceeds the "
             "%zu-byte landing limit",
             len, wst_landing_message_max(ring));
        return WST_ERR_PROTOCOL;
    }
    *dest_p = wst_landing_take(ring, len);
    if (*dest_p == NULL)
        return WST_ERR_BUSY;
    count_placed(a, cls);
    return WST_OK;
}

static void am_free(struct am_rx *a)
{
    free(a->put_bytes);
    free(a->scratch);
    free(a->pos);
    free(a);
}

/* A destroyed half goes once nothing of it is in flight. */
static int am_gone(struct am_rx *a)
{
    if (!a->destroyed)
        return 0;
    if (a->copies == 0 && a->hashes == 0 && a->holds == 0)
        am_free(a);
    return 1;
}

static void am_copied(void *ctx, uint64_t tag, size_t len, wst_status_t status)
{
    struct am_rx *a = ctx;
    uint32_t layer = (uint32_t)tag, epoch = (uint32_t)(tag >> 32);

    a->copies--;
    if (am_gone(a))
        return;
    if (epoch != a->epoch || !a->rx.receiving)
        return; /* a refit that is over */
    if (status != WST_OK) {
        fail(a, status, "copying data to the GPU failed");
        return;
    }
    a->rx.ev.landed(a->rx.ev.arg, layer, len, 0, 0);
}

/* Progress thread: a message's hash is back; it has landed now. */
static void hash_back(void *arg)
{
    struct hash_job *j = arg;
    struct am_rx *a = j->a;

    a->hashes--;
    if (!am_gone(a) && j->epoch == a->epoch && a->rx.receiving)
        a->rx.ev.landed(a->rx.ev.arg, j->layer, j->len, j->len, j->sum);
    free(j);
}

/* A hashing thread: reads only the landed bytes and the job. */
static void hash_run(void *arg)
{
    struct hash_job *j = arg;
    const char *src = j->src;

    for (uint64_t r = 0; r < j->rows; r++, src += j->runs[0].len)
        j->sum += wst_digest_part(src, j->runs[0].len,
                                  j->runs[0].pos + r * j->runs[0].len);
    for (uint32_t k = 0; j->rows == 0 && k < j->n_runs; k++) {
        j->sum += wst_digest_part(src, j->runs[k].len, j->runs[k].pos);
        src += j->runs[k].len;
    }
    if (wst_worker_post(j->a->worker, hash_back, j) != WST_OK)
        WST_ERROR(j->a->log,
                  "a hashed message of layer %u is lost: no "
                  "memory (its refit will time out)",
                  j->layer);
}

/* Queues the hash of a message data_fits placed at dest in host memory;
 * 0 when it is not hashed (it has landed now). A chunk of one item must
 * start and end on digest chunk boundaries of that item. */
static int hash_landed(struct am_rx *a, const struct wst_data_hdr *hdr,
                       const void *dest, size_t len)
{
    const struct wst_plan_item *it = &a->rx.plan->items[hdr->item];
    struct hash_job *j;

    if (a->hashers == NULL)
        return 0;
    if (hdr->count == 1 && it->more_rows == 0 &&
        (hdr->offset % WST_DIGEST_CHUNK != 0 ||
         (len % WST_DIGEST_CHUNK != 0 && hdr->offset + len != it->length)))
        return 0;
    /* whole rows (data_fits), each a run of its own */
    uint64_t rows =
        hdr->count == 1 && it->more_rows != 0 ? len / it->length : 0;
    uint64_t pos = a->pos[hdr->item] + hdr->offset;
    if (len <= WST_HASH_INLINE_MAX) {
        /* Cheaper here than a trip through the pool and back; no job. */
        const char *src = dest;
        uint64_t sum = 0;
        for (uint64_t r = 0; r < rows; r++, src += it->length)
            sum += wst_digest_part(src, it->length, pos + r * it->length);
        if (hdr->count == 1 && rows == 0)
            sum = wst_digest_part(src, len, pos);
        for (uint32_t k = 0; hdr->count > 1 && k < hdr->count; k++) {
            sum += wst_digest_part(src, it[k].length, a->pos[hdr->item + k]);
            src += it[k].length;
        }
        a->rx.ev.landed(a->rx.ev.arg, it->layer, len, len, sum);
        return 1;
    }
    j = malloc(sizeof(*j) + (size_t)hdr->count * sizeof(j->runs[0]));
    if (j == NULL)
        return 0;
    *j = (struct hash_job){.a = a,
                           .epoch = a->epoch,
                           .layer = it->layer,
                           .src = dest,
                           .len = len,
                           .rows = rows,
                           .n_runs = hdr->count};
    if (rows > 0) {
        j->runs[0].len = it->length;
        j->runs[0].pos = pos;
    } else if (hdr->count == 1) {
        j->runs[0].len = len;
        j->runs[0].pos = pos;
    } else {
        for (uint32_t k = 0; k < hdr->count; k++) {
            j->runs[k].len = it[k].length;
            j->runs[k].pos = a->pos[hdr->item + k];
        }
    }
    if (wst_jobq_post(a->hashers, hash_run, j) != WST_OK) {
        free(j);
        return 0;
    }
    a->hashes++;
    return 1;
}

/* A scatter message's items, from the scratch to their places, hashed
 * on the way while they are in cache (they are small: see
 * WST_HASH_INLINE_MAX). */
static void scatter(struct am_rx *a, const struct wst_data_hdr *hdr,
                    const unsigned char *src, size_t len)
{
    const struct wst_rx_plan *pl = a->rx.plan;
    uint64_t sum = 0;

    for (uint32_t k = 0; k < hdr->count; k++) {
        const struct wst_plan_item *it = &pl->items[hdr->item + k];
        memcpy(wst_rx_item_dest(pl, it, 0), src, it->length);
        if (a->pos != NULL)
            sum += wst_digest_part(src, it->length, a->pos[hdr->item + k]);
        src += it->length;
    }
    a->rx.ev.landed(a->rx.ev.arg, pl->items[hdr->item].layer, len,
                    a->pos != NULL ? len : 0, sum);
}

static void am_done(struct wst_rx *rx, const struct wst_data_hdr *hdr,
                    void *dest, size_t len, wst_status_t status)
{
    struct am_rx *a = (struct am_rx *)rx;
    struct wst_landing *ring = ring_of(a, dest);

    if (!current(a, hdr->version) || status != WST_OK) {
        if (ring != NULL)
            wst_landing_release(ring, dest);
        if (current(a, hdr->version))
            fail(a, status, "receiving data failed");
        return;
    }
    const struct wst_plan_item *it = &rx->plan->items[hdr->item];
    if (hdr->flags & WST_DATA_SCATTER) {
        count_received(a, WST_AM_TO_HOST, len);
        scatter(a, hdr, dest, len);
        return;
    }
    int on_device = rx->plan->regions[it->region].mem == WST_MEM_CUDA;
    if (ring == NULL) {
        count_received(a, on_device ? WST_AM_TO_DEVICE : WST_AM_TO_HOST, len);
        /* Device memory UCX wrote: hashed on the GPU with its layer. */
        if (on_device || !hash_landed(a, hdr, dest, len))
            rx->ev.landed(rx->ev.arg, it->layer, len, 0, 0);
        return;
    }
    count_received(
        a, ring == a->landing ? WST_AM_TO_HOST_RING : WST_AM_TO_DEVICE_RING,
        len);
    /* In a landing ring: counted once it is in place (am_copied). */
    uint64_t tag = (uint64_t)a->epoch << 32 | it->layer;
    wst_status_t st = wst_landing_copy(
        ring, dest, wst_rx_item_dest(rx->plan, it, hdr->offset), len, am_copied,
        a, tag);
    if (st != WST_OK) {
        fail(a, st, "copying data to the GPU failed");
        return;
    }
    a->copies++;
}

static wst_status_t am_begin(struct wst_rx *rx, uint64_t version)
{
    struct am_rx *a = (struct am_rx *)rx;

    a->epoch++;
    rx->version = version;
    rx->receiving = 1;
    return WST_OK;
}

/* begin for the half of a put plan: the put share of every layer counts
 * as landed now (am.h, put_share). The events are the receiver's to
 * order: it takes them after the begin that raised them. */
static wst_status_t am_put_begin(struct wst_rx *rx, uint64_t version)
{
    struct am_rx *a = (struct am_rx *)rx;

    am_begin(rx, version);
    uint32_t epoch = a->epoch;
    /* An event may abort or destroy the half (a failed refit): held, it
     * is freed only below. */
    a->holds++;
    for (uint32_t l = 0; l < rx->plan->n_layers; l++) {
        if (a->destroyed || a->epoch != epoch)
            break;
        if (a->put_bytes[l] != 0)
            rx->ev.landed(rx->ev.arg, l, a->put_bytes[l], 0, 0);
    }
    a->holds--;
    am_gone(a);
    return WST_OK;
}

static void am_allow(struct wst_rx *rx, uint32_t layer_bound)
{
    rx->layer_bound = layer_bound;
}

static void am_abort(struct wst_rx *rx)
{
    struct am_rx *a = (struct am_rx *)rx;

    a->epoch++;
    rx->receiving = 0;
}

static void am_destroy(struct wst_rx *rx)
{
    struct am_rx *a = (struct am_rx *)rx;

    a->destroyed = 1;
    rx->receiving = 0;
    am_gone(a);
}

static const struct wst_rx_ops am_rx_ops = {
    .name = "am",
    .counts_bytes = 1,
    .begin = am_begin,
    .allow = am_allow,
    .data_dest = am_dest,
    .data_done = am_done,
    .abort = am_abort,
    .destroy = am_destroy,
};

static const struct wst_rx_ops am_put_rx_ops = {
    .name = "put+am",
    .counts_bytes = 1,
    .begin = am_put_begin,
    .allow = am_allow,
    .data_dest = am_dest,
    .data_done = am_done,
    .abort = am_abort,
    .destroy = am_destroy,
};

/* Bytes per layer of the items in keyed regions (am.h, put_share). */
static uint64_t *put_share_bytes(const struct wst_rx_plan *pl)
{
    uint64_t *bytes = calloc(pl->n_layers ? pl->n_layers : 1, sizeof(*bytes));

    for (size_t k = 0; bytes != NULL && k < pl->n_items; k++) {
        const struct wst_plan_item *it = &pl->items[k];
        if (it->layer < pl->n_layers && pl->regions[it->region].keyed)
            bytes[it->layer] += wst_plan_item_bytes(it);
    }
    return bytes;
}

wst_status_t wst_rx_am_create(const struct wst_rx_am_params *p,
                              struct wst_rx **rx_p)
{
    struct am_rx *a = calloc(1, sizeof(*a));

    if (a == NULL)
        return WST_ERR_NO_MEMORY;
    a->rx.ops = p->put_share ? &am_put_rx_ops : &am_rx_ops;
    a->rx.ev = p->events;
    if (p->put_share && (a->put_bytes = put_share_bytes(p->plan)) == NULL) {
        free(a);
        return WST_ERR_NO_MEMORY;
    }
    a->rx.plan = p->plan;
    a->log = p->log;
    a->landing = p->landing;
    a->ucx_cuda = p->ucx_cuda;
    a->device_landing = p->ucx_cuda ? p->device_landing : NULL;
    a->stats = p->stats;
    if (p->hashers != NULL && p->worker != NULL) {
        const struct wst_rx_plan *pl = p->plan;
        a->pos = calloc(pl->n_items ? pl->n_items : 1, sizeof(*a->pos));
        if (a->pos == NULL) {
            am_free(a);
            return WST_ERR_NO_MEMORY;
        }
        for (uint32_t l = 0; l < pl->n_layers; l++) {
            uint64_t pos = 0;
            for (size_t k = pl->layer_first[l]; k < pl->layer_first[l + 1];
                 k++) {
                a->pos[k] = pos;
                pos += wst_plan_item_bytes(&pl->items[k]);
            }
        }
        a->hashers = p->hashers;
        a->worker = p->worker;
    }
    *rx_p = &a->rx;
    return WST_OK;
}
