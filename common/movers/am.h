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

/* Where an am message's bytes went, for the receiver's line per refit. */
enum wst_am_dest_class {
    WST_AM_TO_HOST,        /* host memory, directly */
    WST_AM_TO_DEVICE,      /* device memory, moved there by UCX */
    WST_AM_TO_DEVICE_RING, /* the device ring, then copied on the GPU */
    WST_AM_TO_HOST_RING,   /* the pinned ring, then copied to the GPU */
    WST_AM_DEST_CLASSES
};

/* Per class, over the messages placed and received since the receiver
 * last reset it: 'placed' at data_dest, 'received' at data_done (before a
 * ring's copy); the sums of their clock readings give the mean time a
 * message spent between the two (when every placed one was received), the
 * first and last readings the span, bytes over span the rate. */
struct wst_am_class_stats {
    uint64_t placed, received, bytes;
    uint64_t placed_ns_sum, received_ns_sum;
    uint64_t first_ns, last_ns;
};
struct wst_rx_am_stats {
    struct wst_am_class_stats c[WST_AM_DEST_CLASSES];
};
extern const char *const wst_am_dest_class_names[WST_AM_DEST_CLASSES];

struct wst_rx_am_params {
    const struct wst_logger *log; /* borrowed for the half's lifetime */
    struct wst_landing *landing;  /* borrowed; NULL: host regions only */
    /* This receiver's UCX writes device memory (a CUDA-aware build):
     * rendezvous messages for device regions land there directly, moved
     * by UCX (CUDA IPC on one host), and only eager ones go through the
     * landing ring. 0: every message for device memory is landed. */
    int ucx_cuda;
    /* With ucx_cuda: the device ring (borrowed, may be NULL) rendezvous
     * messages for regions marked no_export land in before their copy. */
    struct wst_landing *device_landing;
    /* Where the half adds its messages' stats (borrowed; NULL: none). */
    struct wst_rx_am_stats *stats;
    const struct wst_rx_plan *plan; /* borrowed for the half's lifetime */
    struct wst_rx_events events;
    /* Hashing as data lands (both borrowed until the half is freed, which
     * is after its last hash came back): messages into host memory are
     * hashed on 'hashers' while they are still in cache, and the result
     * is posted to 'worker's progress thread. NULL hashers: not hashed. */
    wst_jobq_t *hashers;
    wst_worker_t *worker;
    /* The half of a put plan with regions that have no key (the put
     * mover's receiving half then, wire.h): the bytes of items in keyed
     * regions come by put, which this side cannot see; they count as
     * landed when the refit begins (the sender's LAYER_DONE after its
     * flush still precedes any check of their layer), and a message into
     * a keyed region is a protocol error. 0: every region by am. */
    int put_share;
};

/* Whether a rendezvous message for 'reg' lands where it is going, moved by
 * UCX itself (WST_AM_TO_DEVICE), given the receiving half's ucx_cuda and
 * whether it has a device ring: device memory a CUDA-aware UCX can export,
 * or any device memory when there is no ring to land it in. */
static inline int wst_am_lands_direct(const struct wst_rx_region *reg,
                                      int ucx_cuda, int device_ring)
{
    return reg->mem == WST_MEM_CUDA && ucx_cuda &&
           (!reg->no_export || !device_ring);
}

/* The largest data message the receiver offers for 'reg'
 * (Region.message_max; 0: WST_DATA_CHUNK_MAX), given ucx_cuda, the device
 * ring's largest message (0: no device ring) and the size offered for
 * device memory UCX writes (device_max, mover.h). Device memory a CUDA-aware
 * UCX writes, directly or into the device ring, takes the larger messages
 * (the ring's limit, if smaller): UCX's cost per message bounds it there,
 * not bytes. Host memory and the pinned host ring keep the default. */
static inline uint64_t wst_am_message_max(const struct wst_rx_region *reg,
                                          int ucx_cuda, uint64_t ring_max,
                                          uint64_t device_max)
{
    if (wst_am_lands_direct(reg, ucx_cuda, ring_max != 0))
        return device_max;
    if (reg->mem == WST_MEM_CUDA && ucx_cuda)
        return ring_max < device_max ? ring_max : device_max;
    return 0;
}

/* On success *rx_p is owned by the caller (wst_rx_destroy). */
wst_status_t wst_rx_am_create(const struct wst_rx_am_params *params,
                              struct wst_rx **rx_p);

#endif
