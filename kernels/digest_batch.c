/* digest_batch.c - batched device digests (see digest_batch.h). */
#include "digest_batch.h"

#include <string.h>

wst_status_t wst_digest_batch_init(struct wst_digest_batch *b,
                                   const struct wst_logger *log, int device)
{
    wst_status_t st;

    memset(b, 0, sizeof(*b));
    b->log = log;
    b->device = device;
    st = wst_gpu_set_device(log, device);
    if (st == WST_OK)
        st = wst_gpu_stream_create(log, &b->stream);
    if (st == WST_OK)
        st = wst_gpu_digest_create(log, WST_DIGEST_BATCH, &b->dg);
    if (st != WST_OK)
        wst_digest_batch_fini(b);
    return st;
}

void wst_digest_batch_fini(struct wst_digest_batch *b)
{
    wst_gpu_digest_destroy(b->dg);
    wst_gpu_stream_destroy(b->stream);
    b->dg = NULL;
    b->stream = NULL;
    b->n = 0;
}

wst_status_t wst_digest_batch_flush(struct wst_digest_batch *b,
                                    struct wst_digest *d)
{
    uint64_t pos = d->pos;
    wst_status_t st = WST_OK;

    if (b->n > 0)
        st = wst_gpu_set_device(b->log, b->device);
    if (b->n > 0 && st == WST_OK)
        st = wst_gpu_digest_runs(b->dg, b->runs, b->n, b->stream, d);
    d->pos = pos; /* positions were advanced as runs were added */
    b->n = 0;
    return st;
}

wst_status_t wst_digest_batch_add(struct wst_digest_batch *b,
                                  struct wst_digest *d, const void *data,
                                  uint64_t len)
{
    wst_status_t st = WST_OK;

    if (b->n == WST_DIGEST_BATCH)
        st = wst_digest_batch_flush(b, d);
    b->runs[b->n].data = data;
    b->runs[b->n].length = len;
    b->runs[b->n].pos = d->pos;
    b->n++;
    d->pos += len;
    return st;
}
