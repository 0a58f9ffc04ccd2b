/* am.h - the am mover: data as UCX active messages with rendezvous into
 * the place the receiver picks. For lanes where puts would be emulated
 * (TCP and shared memory without cma in UCX 1.13); no remote key exists.
 * Its sending half is chunks.h over the am wire (wire.h); its receiving
 * half takes each message into its planned destination (am_rx.c): host
 * memory directly; device memory directly when UCX can write it and the
 * message is a rendezvous one, through the landing ring otherwise.
 */
#ifndef WST_MOVERS_AM_H
#define WST_MOVERS_AM_H

#include "jobq.h"
#include "landing.h"
#include "log.h"
#include "rx.h"

struct wst_rx_am_params {
    const struct wst_logger *log; /* borrowed for the half's lifetime */
    struct wst_landing *landing;  /* borrowed; NULL: host regions only */
    /* This receiver's UCX writes device memory (a CUDA-aware build):
     * rendezvous messages for device regions land there directly, moved
     * by UCX (CUDA IPC on one host), and only eager ones go through the
     * landing ring. 0: every message for device memory is landed. */
    int ucx_cuda;
    const struct wst_rx_plan *plan; /* borrowed for the half's lifetime */
    struct wst_rx_events events;
    /* Hashing as data lands (both borrowed until the half is freed, which
     * is after its last hash came back): messages into host memory are
     * hashed on 'hashers' while they are still in cache, and the result
     * is posted to 'worker's progress thread. NULL hashers: not hashed. */
    wst_jobq_t *hashers;
    wst_worker_t *worker;
};

/* On success *rx_p is owned by the caller (wst_rx_destroy). */
wst_status_t wst_rx_am_create(const struct wst_rx_am_params *params,
                              struct wst_rx **rx_p);

#endif
