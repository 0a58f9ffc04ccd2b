/* codec.h - control messages: encoding, length-capped decoding, validation.
 *
 * Control messages travel as UCX active messages whose payload is one
 * protobuf-c "Control" envelope (wstream.proto) holding exactly one message.
 * wst_msg_decode refuses a buffer longer than max_len before unpacking, and
 * after unpacking validates every field (counts, sizes, offsets, overflow of
 * offset + length, dtype, memory type, boxes inside their tensor, name
 * lengths) before converting it into the plain structs below. Checks that
 * need local knowledge (a plan item's source range inside this sender's
 * shard) are in wst_plan_msg_check.
 *
 * Ownership: a decoded struct wst_msg owns its arrays; free them with
 * wst_msg_release. Encoding borrows the message and returns a malloc'd buffer
 * the caller frees.
 */
#ifndef WST_CODEC_H
#define WST_CODEC_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "manifest.h"
#include "mover_kind.h"
#include "planner.h"

/* 2: data headers carry an item count; 3: engine groups (Barrier); 4:
 * plans carry a data token, and data headers that token and the rank; 5:
 * an ERROR may carry WST_ERR_STALE_VERSION (a peer of 4 refuses it as
 * unknown), BEGIN a label, WANT_SUMMARY the committed one's (a peer of 4
 * would drop them unseen); 6: HELLO carries the peer's UCX tcp receive
 * segment, which a receiver checks (a peer of 5 would send none) */
#define WST_PROTOCOL_VERSION 6
#define WST_MSG_MAX_DEFAULT (64u << 20) /* bytes */
#define WST_MAX_HAVES (1u << 20)        /* entries per have manifest */
#define WST_MAX_PLAN_ITEMS (1u << 24)
#define WST_MAX_REGIONS (1u << 16)
#define WST_MAX_BLOB 4096 /* rkey, worker address, auth: bytes */
#define WST_ERROR_MSG_MAX 512
#define WST_NCCL_UNIQUE_ID_BYTES 128 /* sizeof(ncclUniqueId) */
#define WST_GROUP_NAME_MAX 64        /* engine group names, NUL included */
#define WST_GROUP_SIZE_MAX 4096      /* agents in one engine group */
/* Further data lanes a receiver's hello names (lane 1, 2, ...): that is
 * WST_WORKER_LANES_MAX - 1 (common/worker.h, which proto/ does not
 * include; receiver/control.c asserts the two agree). */
#define WST_HELLO_LANES_MAX 7

enum wst_msg_type {
    WST_MSG_HELLO = 1,
    WST_MSG_HAVE = 2,
    WST_MSG_WANT_SUMMARY = 3,
    WST_MSG_PLAN = 4,
    WST_MSG_BEGIN = 5,
    WST_MSG_LAYER_DONE = 6,
    WST_MSG_COMMIT = 7,
    WST_MSG_ERROR = 8,
    WST_MSG_HEARTBEAT = 9,
    WST_MSG_CREDIT = 10,
    WST_MSG_NCCL_SETUP = 11,
    WST_MSG_NCCL_READY = 12,
    WST_MSG_BARRIER = 13,
};

enum wst_role {
    WST_ROLE_SENDER = 1,
    WST_ROLE_RECEIVER = 2,
};

struct wst_blob {
    size_t len;    /* <= WST_MAX_BLOB */
    uint8_t *data; /* owned by the message; NULL when len == 0 */
};

struct wst_hello {
    uint32_t protocol_version;
    enum wst_role role;
    uint32_t rank;
    uint32_t world_size; /* senders: trainer world; receivers: receiver count */
    uint64_t session;    /* random per process; shows restarts in logs */
    struct wst_blob auth;           /* reserved; empty for now */
    struct wst_blob worker_address; /* receiver's UCX worker address for the
                                       data endpoint; empty from senders */
    /* The receiver's further data lanes' UCX worker addresses (lane 1, 2,
     * ...); none from senders, or from a receiver with one lane. */
    size_t n_lane_addresses; /* <= WST_HELLO_LANES_MAX */
    struct wst_blob lane_addresses[WST_HELLO_LANES_MAX];
    /* Bytes of UCX's tcp receive segment in the peer (wst_ucx_tcp_rx_seg,
     * common/lanes.h); 0: unknown. */
    uint64_t tcp_rx_seg;
};

struct wst_have_manifest {
    uint32_t rank;
    size_t n_entries;         /* <= WST_MAX_HAVES */
    struct wst_have *entries; /* owned */
};

struct wst_want_summary {
    uint32_t receiver_rank;
    uint32_t n_wants;
    uint32_t n_layers;
    uint64_t total_bytes;
    uint64_t committed_version; /* 0: none yet */
    int usable;
    char reason[WST_ERROR_MSG_MAX]; /* why unusable; "" when usable */
    char group[WST_GROUP_NAME_MAX]; /* engine group; "": a group of one */
    uint32_t group_size;            /* >= 1 */
    uint32_t group_member;          /* < group_size */
    /* The committed version's label (common/label.h); "": none. */
    char committed_label[WST_LABEL_MAX];
};

struct wst_wire_region {
    uint64_t base;        /* remote virtual address of the region */
    uint64_t length;      /* bytes */
    struct wst_blob rkey; /* packed UCX remote key; may be empty for AM */
    uint64_t message_max; /* largest data message into it; 0: the default */
};

/* Region.message_max's bounds, checked at decode: 0, or a multiple of
 * WST_REGION_MESSAGE_ALIGN (a digest chunk: a message of one item starts
 * and ends on one) from WST_REGION_MESSAGE_MIN (mover.h's
 * WST_DATA_CHUNK_MAX) to WST_REGION_MESSAGE_MAX (WST_DATA_DEVICE_CHUNK_MAX). */
#define WST_REGION_MESSAGE_ALIGN (64ull << 10)
#define WST_REGION_MESSAGE_MIN (8ull << 20)
#define WST_REGION_MESSAGE_MAX (32ull << 20)

/* What a receiver's side of the data path can do (Plan.caps). Our own
 * bits: UCX's enum values changed between versions and never travel. */
enum wst_cap {
    WST_CAP_DEVICE_DST = 1u << 0,  /* destinations include device memory */
    WST_CAP_UCX_CUDA = 1u << 1,    /* its UCX context reports CUDA memory */
    WST_CAP_NCCL = 1u << 2,        /* built with NCCL and has a device */
    WST_CAP_SCATTER = 1u << 3,     /* takes WST_DATA_SCATTER messages */
    WST_CAP_LAYER_BATCH = 1u << 4, /* takes several layers a LAYER_DONE */
    WST_CAP_ROWS = 1u << 5,        /* items may have rows (more_rows) */
    WST_CAP_ALL = (1u << 6) - 1,
};

/* The part of a plan one sender needs. */
struct wst_plan_msg {
    uint64_t plan_hash;
    uint32_t sender; /* rank these items are for */
    uint32_t n_senders;
    uint32_t n_layers; /* >= 1 */
    enum wst_mover_kind mover;
    uint32_t caps;                   /* WST_CAP_* of the receiver */
    uint64_t data_token;             /* its data messages carry it */
    size_t n_items;                  /* <= WST_MAX_PLAN_ITEMS */
    struct wst_plan_item *items;     /* owned; item.sender == sender */
    size_t n_regions;                /* <= WST_MAX_REGIONS */
    struct wst_wire_region *regions; /* owned */
};

struct wst_begin {
    uint64_t version; /* >= 1 */
    uint64_t plan_hash;
    int ack; /* 0: sender asks to begin; 1: receiver acknowledges */
    enum wst_mover_kind mover; /* sender's mover (put, am or nccl); 0 in
                                  acknowledgements */
    char label[WST_LABEL_MAX]; /* the version's (common/label.h); "": none */
};

#define WST_LAYER_DONE_MORE_MAX 31 /* further layers in one LAYER_DONE */
struct wst_layer_done {
    uint32_t layer; /* the first */
    uint64_t version;
    uint64_t bytes; /* the first layer's */
    uint64_t digest;
    /* Layers layer + 1 .. layer + n_more, done at the same time (only to a
     * receiver that offered WST_CAP_LAYER_BATCH). */
    uint32_t n_more;
    uint64_t more_bytes[WST_LAYER_DONE_MORE_MAX];
    uint64_t more_digests[WST_LAYER_DONE_MORE_MAX];
};

struct wst_commit {
    uint64_t version;
};

struct wst_error_msg {
    int32_t status; /* a known wst_status_t, < 0 */
    char message[WST_ERROR_MSG_MAX];
};

struct wst_credit {
    uint64_t version; /* >= 1 */
    uint32_t layer;   /* < the plan's n_layers: the receiver checks */
};

/* Sender to receiver: the id of a 2-rank NCCL communicator, sender rank 0,
 * receiver rank 1. Both sides start a non-blocking init on sending and on
 * receipt. */
struct wst_nccl_setup {
    uint8_t unique_id[WST_NCCL_UNIQUE_ID_BYTES]; /* an ncclUniqueId */
};

/* Receiver to sender: its side of the communicator is ready. Failures
 * travel as struct wst_error_msg instead. */
struct wst_nccl_ready {
    uint64_t plan_hash; /* echoes the sender's plan slice; spots stale ones */
};

/* Barrier.step: the refit's two barriers across an engine group. */
enum wst_barrier_step {
    WST_BARRIER_READY = 1,    /* receiver: its engine paused */
    WST_BARRIER_GO = 2,       /* sender: the whole group is ready */
    WST_BARRIER_PREPARED = 3, /* receiver: every layer final, not committed */
};

struct wst_barrier {
    uint64_t version; /* >= 1 */
    enum wst_barrier_step step;
};

struct wst_heartbeat {
    uint64_t seq;
};

struct wst_msg {
    enum wst_msg_type type;
    union {
        struct wst_hello hello;
        struct wst_have_manifest have;
        struct wst_want_summary want_summary;
        struct wst_plan_msg plan;
        struct wst_begin begin;
        struct wst_layer_done layer_done;
        struct wst_commit commit;
        struct wst_error_msg error;
        struct wst_heartbeat heartbeat;
        struct wst_credit credit;
        struct wst_nccl_setup nccl_setup;
        struct wst_nccl_ready nccl_ready;
        struct wst_barrier barrier;
    } u;
};

/* Encodes 'msg' into a new malloc'd buffer. Fails with WST_ERR_INVALID if
 * the message would not pass wst_msg_decode's validation. */
wst_status_t wst_msg_encode(const struct wst_msg *msg, uint8_t **buf_p,
                            size_t *len_p);

/* Decodes and validates. On failure *msg is left zeroed (nothing to
 * release), the reason is in err. Statuses: WST_ERR_TOO_LARGE (len >
 * max_len), WST_ERR_PROTOCOL (unparsable, no message set, invalid field).
 * For a hello, a protocol_version other than WST_PROTOCOL_VERSION is not an
 * error here: the caller decides (and answers WST_ERR_VERSION). */
wst_status_t wst_msg_decode(const void *buf, size_t len, size_t max_len,
                            struct wst_msg *msg, char *err, size_t errlen);

void wst_msg_release(struct wst_msg *msg);

/* Nonzero when buf[0..len) is a Control message holding a have manifest
 * of at least one entry; *n_entries_p then gets how many entries
 * unpacking it would produce at most. Reads tags and lengths only,
 * allocates nothing (have_peek.c). 0 for any other message, and for bytes
 * that are not a well-formed one (wst_msg_decode says why). */
int wst_msg_peek_have(const void *buf, size_t len, size_t *n_entries_p);

const char *wst_msg_type_name(enum wst_msg_type type);

/* Sender-side check of a decoded plan against the sender's own have
 * manifest: item.have < n_haves, src_offset + length within that shard's
 * bytes, region < n_regions, dst_offset + length within the region length,
 * layer < n_layers, item.sender == plan->sender, and the hash matches
 * wst_plan_hash_items. */
wst_status_t wst_plan_msg_check(const struct wst_plan_msg *plan,
                                const struct wst_have *haves, size_t n_haves,
                                char *err, size_t errlen);

#endif
