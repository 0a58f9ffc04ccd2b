/* digest_batch.h - device runs of one digest, queued and hashed many per
 * kernel launch (digest_gpu.h), for a thread that walks a layer run by run:
 * a receiver's verifier, a sender's push. A tensor-parallel slice is one
 * run per row, so launching per run would cost more than hashing.
 *
 * One thread owns a batch. Runs in host memory go to wst_digest_update on
 * the same struct wst_digest, in any order with these: positions are
 * explicit and the sum is order-free.
 */
#ifndef WST_DIGEST_BATCH_H
#define WST_DIGEST_BATCH_H

#include <stdint.h>
#include <wstream/status.h>

#include "digest.h"
#include "digest_gpu.h"
#include "gpu.h"
#include "log.h"

#define WST_DIGEST_BATCH 1024u

struct wst_digest_batch {
    const struct wst_logger *log; /* borrowed */
    int device;
    wst_gpu_stream_t stream; /* owned; hashing runs here */
    struct wst_gpu_digest *dg;
    uint32_t n;
    struct wst_digest_run runs[WST_DIGEST_BATCH];
};

/* Creates the stream and digest context on 'device'. On failure nothing is
 * left to free; on success release with wst_digest_batch_fini. */
wst_status_t wst_digest_batch_init(struct wst_digest_batch *b,
                                   const struct wst_logger *log, int device);
void wst_digest_batch_fini(struct wst_digest_batch *b);

/* Queues device run 'data' of 'len' bytes at stream position d->pos and
 * advances d->pos; a full batch is hashed first. */
wst_status_t wst_digest_batch_add(struct wst_digest_batch *b,
                                  struct wst_digest *d, const void *data,
                                  uint64_t len);

/* Hashes what is queued and waits for it: 'd' is complete after this. */
wst_status_t wst_digest_batch_flush(struct wst_digest_batch *b,
                                    struct wst_digest *d);

#endif
