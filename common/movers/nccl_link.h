/* nccl_link.h - the NCCL mover between one sender and one receiver: a
 * two-rank communicator (sender rank 0, receiver rank 1) kept across
 * refits, and whole layers moved as grouped ncclSend/ncclRecv exchanges.
 *
 * Every NCCL call runs on the link's own thread (a jobq), never on the
 * progress thread: the init is waited on there (with a deadline), and the
 * first exchange blocks until the peer enters its matching one. Each
 * exchange is followed by an event; a waiter (gpu_waiter.h) posts its
 * completion to the progress thread.
 *
 *   progress thread ──post(runs)──▶ NCCL thread: exchange, event ──▶ waiter
 *          ▲                                                         │
 *          └────────────── done_fn(arg, status) ◀──── post ──────────┘
 *
 * Both ends post their layers in plan order, each layer's runs in plan
 * order: NCCL pairs the calls between two ranks in the order they are
 * made, so that order is the protocol.
 *
 * Threads: create, post, abort and destroy on the progress thread; the
 * callbacks run there too.
 */
#ifndef WST_NCCL_LINK_H
#define WST_NCCL_LINK_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "log.h"
#include "nccl_comm.h"
#include "worker.h"

/* Exchanges one link may have in flight (layers posted, not yet done). */
#define WST_NCCL_LINK_DEPTH 64u

typedef void (*wst_nccl_link_fn)(void *arg, wst_status_t status);

struct wst_nccl_link;

/* Starts the init of rank 'rank' of 'nranks' on 'device' with unique id
 * 'id' (a refit link: 2 ranks, the sender 0; a check on one GPU: 1 rank
 * exchanging with itself);
 * ready_fn(arg, status) follows on the progress thread once the
 * communicator is ready, or failed, or timeout_s passed (it is aborted
 * then). 'log' and 'worker' are borrowed for the link's lifetime. On
 * success *link_p is owned by the caller (wst_nccl_link_destroy). */
wst_status_t wst_nccl_link_create(const struct wst_logger *log,
                                  wst_worker_t *worker, int device,
                                  const unsigned char id[WST_NCCL_ID_BYTES],
                                  int nranks, int rank, double timeout_s,
                                  wst_nccl_link_fn ready_fn, void *arg,
                                  struct wst_nccl_link **link_p);

/* Queues one grouped exchange of 'sends' and 'recvs' (wst_nccl_exchange);
 * done_fn(arg, status) follows on the progress thread once the GPU has
 * done it (or it failed). The arrays are borrowed, not copied (nothing is
 * allocated per layer): they, and the memory they name, stay untouched
 * until done_fn. WST_ERR_BUSY with WST_NCCL_LINK_DEPTH in
 * flight; WST_ERR_STATE after an abort. */
wst_status_t
wst_nccl_link_post(struct wst_nccl_link *link, const struct wst_nccl_run *sends,
                   size_t n_sends, const struct wst_nccl_run *recvs,
                   size_t n_recvs, wst_nccl_link_fn done_fn, void *arg);

/* Exchanges posted and not yet done. */
uint32_t wst_nccl_link_in_flight(const struct wst_nccl_link *link);

/* After a failure (the peer died, the refit failed): aborts the
 * communicator on the NCCL thread, which also ends kernels waiting on a
 * dead peer; exchanges in flight complete with an error, later posts are
 * refused. The link is dead: destroy it and make a new one. */
void wst_nccl_link_abort(struct wst_nccl_link *link);

/* Waits for the NCCL thread and the exchanges in flight (a link with
 * exchanges in flight is aborted first), frees the communicator. No
 * callback runs after it returns. NULL is fine. */
void wst_nccl_link_destroy(struct wst_nccl_link *link);

#endif
