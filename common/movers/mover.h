/* mover.h - every way bytes travel between a sender and a receiver, behind
 * one interface, in the manner of NCCL's transports.
 *
 * A mover has
 *  - a sending half (tx.h): the sender's pump offers it plan items from a
 *    cursor and asks it to fence each layer; it says when bytes moved and
 *    when a layer is visible;
 *  - a receiving half (rx.h): the receiver's refit state machine tells it
 *    when a refit begins, how far credits go and when it failed; it says
 *    when bytes landed;
 *  - a selection rule (select.h): which mover a (sender, receiver) pair
 *    uses, decided once per plan from what each side holds and what its UCX
 *    can do, and logged once with the reason.
 * Neither the pump nor the state machine names a mover.
 *
 * The movers, one file per half:
 *   put    wire.c (ucp_put_nbx, flush) under chunks.c; put_rx.c
 *   am     wire.c (ucp_am_send_nbx, rendezvous) under chunks.c; am_rx.c
 *   bounce device sources copied through bounce_ring.c into put or am
 *          (chunks.c); device destinations through landing.c (am_rx.c)
 *   nccl   nccl_tx.c, nccl_rx.c over nccl_link.c
 * Movers move contiguous runs; packing strided runs happens above them.
 */
#ifndef WST_MOVERS_MOVER_H
#define WST_MOVERS_MOVER_H

#include "mover_kind.h"
#include "rx.h"
#include "tx.h"

/* The largest data message a sender posts: items move in chunks of at
 * most this, and a receiver landing data for device memory in host slots
 * sizes them by it. */
#define WST_DATA_CHUNK_MAX (8ull << 20)

/* The largest data message into device memory the receiver's UCX writes
 * itself (a CUDA-aware UCX: memory it can export, or the device ring for
 * memory it cannot, am.h wst_am_message_max): the receiver says so per
 * region in its plan (Region.message_max) and the sender cuts such items
 * into chunks of this. UCX moves device memory at a cost per message that
 * bounds it at 8 MiB (~20 us a message on one H200: NOTES.md, issue 19).
 * An 8-layer direct refit there: 286-320 GB/s at 8 MiB, 331-376 at 32,
 * with a 256 MiB window; with 1 GiB (the direct path's window now,
 * select.h) 402-414 and 419-420. Host memory keeps WST_DATA_CHUNK_MAX,
 * which its tcp and shm lanes were measured at. */
#define WST_DATA_DEVICE_CHUNK_MAX (32ull << 20)

#endif
