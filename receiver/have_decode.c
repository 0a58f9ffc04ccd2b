/* have_decode.c - a sender's have manifest unpacked on the planner thread,
 * so that the progress thread keeps sending heartbeats meanwhile.
 *
 * Unpacking is the costly part of a manifest (seconds for 400,000 shards
 * on a busy 2-core host, protobuf-c allocating every entry). Its limits
 * are checked on the wire bytes before (peer_limits.c); the frame is
 * copied, decoded on the planner thread (one job at a time, in order with
 * plans), and the result posted back to wst_recv_on_msg, as if it had just
 * arrived. Meanwhile its copy and decoded size count as held
 * (wst_recv_reserve_have): many senders' manifests queued at once cannot
 * exceed max-manifest-bytes before any of them is decoded. A peer dropped
 * meanwhile is kept (peer->dropped) until then and freed here; one that says
 * anything else meanwhile is heard as usual (a sender waits for its plan after
 * its manifest).
 */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "codec.h"
#include "log.h"
#include "receiver_internal.h"
#include "worker.h"

struct have_job {
    struct wst_receiver *r;
    struct peer *p; /* kept while have_decoding */
    void *buf;      /* the frame's payload, owned */
    size_t len;
    struct wst_msg m; /* decoded; owned until handed on */
    wst_status_t status;
    char err[256];
    double seconds[2]; /* unpacking it: wall, and the thread's CPU */
};

static void pub_manifest_time(struct wst_receiver *r, void *arg)
{
    const double *s = arg;

    r->state.manifest_seconds += s[0];
    r->state.manifest_cpu_seconds += s[1];
}

/* Progress thread: the manifest, to the peer as a message of its. */
static void have_decoded(void *arg)
{
    struct have_job *j = arg;
    struct wst_receiver *r = j->r;
    struct peer *p = j->p;

    p->have_decoding = 0;
    wst_recv_unreserve_have(r, p);
    wst_recv_publish(r, pub_manifest_time, j->seconds);
    if (p->dropped || r->closing) {
        if (j->status == WST_OK)
            wst_msg_release(&j->m);
        if (p->dropped)
            free(p);
    } else {
        wst_recv_on_msg(r, p, j->status, &j->m, j->err);
    }
    free(j->buf);
    free(j);
}

/* Planner thread. */
static void have_decode(void *arg)
{
    struct have_job *j = arg;
    double t0 = wst_now_s(), c0 = wst_thread_cpu_s();

    j->status = wst_msg_decode(j->buf, j->len, WST_MSG_MAX_DEFAULT, &j->m,
                               j->err, sizeof(j->err));
    j->seconds[0] = wst_now_s() - t0;
    j->seconds[1] = wst_thread_cpu_s() - c0;
    if (wst_worker_post(j->r->worker, have_decoded, j) != WST_OK)
        WST_ERROR(&j->r->log, "cannot post a have manifest back");
}

wst_status_t wst_recv_decode_have(struct wst_receiver *r, struct peer *p,
                                  const void *buf, size_t len)
{
    struct have_job *j = calloc(1, sizeof(*j));

    if (j == NULL)
        return WST_ERR_NO_MEMORY;
    j->buf = malloc(len);
    if (j->buf == NULL)
        goto err_free_job;
    memcpy(j->buf, buf, len);
    j->r = r;
    j->p = p;
    j->len = len;
    if (wst_jobq_post(r->planner, have_decode, j) != WST_OK)
        goto err_free_buf;
    p->have_decoding = 1;
    return WST_OK;

err_free_buf:
    free(j->buf);
err_free_job:
    free(j);
    return WST_ERR_NO_MEMORY;
}
