/* nccl_comm.h - an NCCL communicator and one grouped send/recv exchange,
 * behind a C seam: the NCCL fallback mover.
 *
 * nccl_comm.cu implements it with NCCL (built when cmake finds nccl.h and
 * libnccl next to the CUDA toolkit); nccl_comm_stub.c, with the same
 * symbols, refuses every call with WST_ERR_UNSUPPORTED and an error line
 * "built without NCCL". Both builds check arguments the same way first, so
 * a bad argument is WST_ERR_INVALID in either.
 *
 * Life of a communicator (one per peer group, kept across refits: creating
 * one costs seconds):
 *
 *   rank 0: wst_nccl_get_id ──(128 bytes over the control channel)──► all
 *   each:   wst_nccl_comm_start ─► wst_nccl_comm_wait (or _poll) ─► WST_OK
 *           wst_nccl_exchange × N, each enqueued on a stream
 *           wst_nccl_comm_destroy (or, after a failure, _abort then _destroy)
 *
 * The communicator is non-blocking (ncclConfig_t.blocking = 0): no call
 * here waits on a peer without a deadline, and a deadline that passes
 * aborts the communicator (ncclCommAbort), which also stops kernels that
 * wait on a dead peer. After an error or an abort the communicator only
 * answers its error; make a new one.
 *
 * Every ncclResult_t is translated once, here: ncclInProgress is
 * WST_INPROGRESS; ncclInvalidArgument and ncclInvalidUsage WST_ERR_INVALID;
 * ncclRemoteError (a peer exited or its network failed) WST_ERR_PEER_FAILED;
 * ncclSystemError, ncclInternalError and ncclUnhandledCudaError
 * WST_ERR_TRANSPORT. The call's name, NCCL's message and ncclGetLastError
 * go to the communicator's logger at error level.
 *
 * One thread at a time per communicator. Nothing here is called inside a
 * caller's own ncclGroupStart/ncclGroupEnd.
 */
#ifndef WST_NCCL_COMM_H
#define WST_NCCL_COMM_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "gpu.h"
#include "log.h"

#define WST_NCCL_ID_BYTES 128

/* The most bytes one ncclSend or ncclRecv carries: longer runs are split
 * into calls of this size and a remainder. Both sides split the same way,
 * so it is part of what peers agree on; NCCL 2.28 takes size_t counts, but
 * the largest count it supports is not documented, and 1 GiB calls keep
 * every count in 32 bits at the cost of one call per GiB. */
#define WST_NCCL_MAX_CALL_BYTES (1ull << 30)

/* How long an exchange may take to be enqueued, and a destroy to flush.
 * The first exchange with a peer connects to it, which waits until the
 * peer enters its matching exchange. */
#define WST_NCCL_SETTLE_TIMEOUT_S 60.0

/* Nonzero when this build has NCCL (nccl_comm.cu), 0 for the stub. */
int wst_nccl_available(void);

/* A new unique id (ncclGetUniqueId) into 'id', for one communicator: one
 * rank makes it and ships it to the others. 'log' may be NULL. */
wst_status_t wst_nccl_get_id(const struct wst_logger *log,
                             unsigned char id[WST_NCCL_ID_BYTES]);

struct wst_nccl_comm; /* opaque */

/* Starts the init of rank 'rank' of 'nranks' on CUDA device 'device' and
 * returns at once (the init goes on in NCCL's own thread). On success
 * *comm_p is the new communicator, owned by the caller until
 * wst_nccl_comm_destroy; on failure *comm_p is left alone. 'id' is copied;
 * 'log' is borrowed for the communicator's life (may be NULL). Leaves
 * 'device' current for the calling thread. */
wst_status_t wst_nccl_comm_start(const struct wst_logger *log, int device,
                                 const unsigned char id[WST_NCCL_ID_BYTES],
                                 int nranks, int rank,
                                 struct wst_nccl_comm **comm_p);

/* How the init stands: WST_OK when the communicator is ready,
 * WST_INPROGRESS while it goes on, the init's error (logged once, then
 * returned again) when it failed, WST_ERR_STATE after an abort. Never
 * blocks. */
wst_status_t wst_nccl_comm_poll(struct wst_nccl_comm *comm);

/* Polls the init for up to 'timeout_s' seconds (0: once). On success
 * WST_OK; when time runs out WST_ERR_TIMED_OUT, when the init failed its
 * error: in both cases the communicator is aborted, with a line that says
 * which, and the caller still destroys it. */
wst_status_t wst_nccl_comm_wait(struct wst_nccl_comm *comm, double timeout_s);

/* A run of bytes: device memory (or host memory registered with CUDA) of
 * the communicator's device, and the rank it goes to or comes from. */
struct wst_nccl_run {
    void *ptr;
    uint64_t bytes;
    int peer;
};

/* One grouped exchange: every run of 'sends' and 'recvs' in one
 * ncclGroupStart/ncclGroupEnd, as ncclUint8 bytes, enqueued on 'stream'
 * (a stream of the communicator's device). Returns once it is enqueued:
 * work enqueued on 'stream' afterwards runs after it; the caller keeps the
 * buffers alive and leaves them alone until the stream gets there. Runs of 0
 * bytes are skipped (their pointer may be NULL). The runs to a peer and the
 * runs that peer receives from us must match one for one, in order and size
 * (NCCL pairs the calls that way); a rank may send to itself. Arrays are
 * borrowed for the call.
 *
 * Arguments are checked before anything is enqueued: a NULL communicator
 * or array with a nonzero count, a NULL pointer with bytes, or a peer out
 * of range is WST_ERR_INVALID and changes nothing. Before the init has
 * finished or after an abort: WST_ERR_STATE; on a failed communicator, its
 * error. An NCCL error marks the communicator failed; an enqueue that
 * takes longer than WST_NCCL_SETTLE_TIMEOUT_S aborts it (WST_ERR_TIMED_OUT).
 * Makes the communicator's device current. */
wst_status_t wst_nccl_exchange(struct wst_nccl_comm *comm,
                               const struct wst_nccl_run *sends, size_t n_sends,
                               const struct wst_nccl_run *recvs, size_t n_recvs,
                               wst_gpu_stream_t stream);

/* After an error elsewhere (a peer died, a deadline passed): ncclCommAbort,
 * which also unblocks kernels still waiting on a dead peer. Work enqueued
 * by exchanges is abandoned. Later calls see WST_ERR_STATE; a second abort
 * does nothing. NULL is fine. Destroy the communicator afterwards. */
void wst_nccl_comm_abort(struct wst_nccl_comm *comm);

/* Frees the communicator: a healthy one is finalized (its last exchanges
 * flushed; aborted instead when that takes over WST_NCCL_SETTLE_TIMEOUT_S)
 * and destroyed, any other aborted. The caller has synchronized the streams its
 * exchanges used, or aborted first (which also skips the flush when a peer is
 * gone). NULL is fine. */
void wst_nccl_comm_destroy(struct wst_nccl_comm *comm);

#endif
