/* wstream/receiver.h - the receiver library an inference engine embeds.
 *
 * A receiver owns nothing of the model: it is told where the engine's live
 * parameters are (regions) and which box of which checkpoint tensor goes
 * where (wants). Senders connect to it; it plans which bytes come from
 * which sender, lets them stream into the live regions, checks every byte
 * with digests, and commits a version only when it holds all of it.
 *
 *     wst_receiver_create(&params, &r);
 *     wst_receiver_add_region(r, &region, &id);   // each live buffer
 *     wst_receiver_add_want(r, &want);            // each tensor box
 *     wst_receiver_add_expert_layer(r, &experts); // each MoE layer
 *     wst_receiver_start(r, &port);               // listen
 *     ... senders push versions; hooks fire ...
 *     wst_receiver_destroy(r);
 *
 * Engine hooks are all called from one thread, the receiver's engine
 * thread (never the caller's, never the progress thread), in this order
 * per refit: begin(V), then layer_finalized(L, V) per layer, then
 * committed(V) -- or unusable(status, reason) when a refit fails after
 * begin was acknowledged. Fail closed: once begin(V) returned WST_OK the
 * live buffers may hold a mix of versions until committed(V); a failure
 * makes the receiver unusable until a later refit completes. A version may
 * come with a label (the sender's wst_sender_push_with); hooks read it
 * with wst_receiver_get_state (refit_label, committed_label).
 *
 * Where it runs. The default is the sidecar: wstream-agent (receiver/agent/,
 * one per inference GPU or pod; on Kubernetes a native sidecar, deploy/)
 * links this library statically, maps the engine's live memory from a
 * layout file (POSIX shm, CUDA IPC) and relays the hooks over its engine
 * socket. An engine may instead host the receiver in its own process:
 * link build/lib/libwstream_receiver.so, which exports only the functions
 * of this header, loader.h and status.h and needs none of the agent's
 * libraries (no JSON, no HTTP); from Python, wstream.Receiver
 * (sender/python) loads it through ctypes. The hooks then run on the
 * receiver's engine thread inside the engine, which must not destroy the
 * receiver from a hook.
 */
#ifndef WSTREAM_RECEIVER_H
#define WSTREAM_RECEIVER_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/loader.h>
#include <wstream/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wst_receiver wst_receiver_t;

#ifndef WST_LOG_FN_DEFINED
#define WST_LOG_FN_DEFINED
typedef void (*wst_log_fn)(void *arg, int level, const char *line);
#endif

struct wst_receiver_hooks {
    void *arg;
    /* Stop serving; return WST_OK once the engine no longer reads the live
     * buffers. An error refuses the refit and changes nothing. On an error
     * the hook may write why into reason[0..reason_len) (NUL-terminated);
     * senders and wst_receiver_get_state report it. */
    wst_status_t (*begin)(void *arg, uint64_t version, char *reason,
                          size_t reason_len);
    /* Every byte of layer L is in place and verified (and its experts
     * replayed through the loader): refresh derived state. Layers may be
     * finalized out of order. An error fails the refit (the receiver
     * becomes unusable); 'reason' as for begin. */
    wst_status_t (*layer_finalized)(void *arg, uint32_t layer, uint64_t version,
                                    char *reason, size_t reason_len);
    /* Every layer is final: resume serving 'version'. */
    void (*committed)(void *arg, uint64_t version);
    /* A refit failed after begin: the live buffers are not a consistent
     * version. Stop serving until committed() is called again. */
    void (*unusable)(void *arg, wst_status_t status, const char *reason);
};

enum wst_receiver_param_field {
    WST_RECEIVER_PARAM_RANK = 1u << 0,
    WST_RECEIVER_PARAM_LISTEN = 1u << 1,
    WST_RECEIVER_PARAM_TIMEOUT = 1u << 2,
    WST_RECEIVER_PARAM_MOVER = 1u << 3,
    WST_RECEIVER_PARAM_VERIFY = 1u << 4,
    WST_RECEIVER_PARAM_LOG = 1u << 5,
    WST_RECEIVER_PARAM_HOOKS = 1u << 6,
    WST_RECEIVER_PARAM_HEARTBEAT = 1u << 7,
    WST_RECEIVER_PARAM_STAGING_SLOTS = 1u << 8,
    WST_RECEIVER_PARAM_INITIAL_STATE = 1u << 9,
    WST_RECEIVER_PARAM_GROUP = 1u << 10,
    WST_RECEIVER_PARAM_AUTH = 1u << 11,
    WST_RECEIVER_PARAM_LIMITS = 1u << 12,
    WST_RECEIVER_PARAM_LANES = 1u << 13,
    WST_RECEIVER_PARAM_LANE_DEVICES = 1u << 14,
    WST_RECEIVER_PARAM_INITIAL_LABEL = 1u << 15,
    WST_RECEIVER_PARAM_DEVICE_RING = 1u << 16,
};

/* Data lanes a receiver may have (wst_receiver_params.lanes). */
#define WST_RECEIVER_LANES_MAX 8

struct wst_receiver_params {
    uint64_t field_mask; /* WST_RECEIVER_PARAM_* bits of the fields set */
    uint32_t rank;       /* this receiver's rank among receivers; default 0 */
    const char *listen_host; /* default "0.0.0.0"; borrowed during create */
    uint16_t listen_port;    /* 0: any free port */
    double timeout_s;        /* deadline for manifests and for a stalled refit;
                                default 30 */
    /* "auto" (default; senders use put where their lane does real RMA) or
     * "am" (never hand out remote keys). Borrowed during create. */
    const char *mover;
    int verify; /* check digests; default 1 */
    /* With verify (WST_RECEIVER_PARAM_VERIFY too): threads that hash data
     * messages as they land, so that a layer is checked without reading
     * it again; 0: the default, three for every four data lanes, at
     * least 2. At most 64. */
    uint32_t verify_threads;
    int log_level;     /* 0..4, default 2 (info) */
    wst_log_fn log_fn; /* NULL: stderr */
    void *log_arg;
    const char *log_name; /* e.g. "agent[0]"; borrowed for the lifetime */
    struct wst_receiver_hooks hooks; /* all optional */
    /* Control-channel liveness: a heartbeat every heartbeat_s (default 1);
     * a sender silent for peer_timeout_s (default 5) has failed. */
    double heartbeat_s;
    double peer_timeout_s;
    /* Staging slots for routed experts (default 2): MoE layer k (the k-th
     * layer with experts) stages in slot k mod staging_slots, so staging
     * memory is staging_slots times the largest layer's local experts,
     * whatever the depth. */
    uint32_t staging_slots;
    /* The engine group: the receivers of one tensor/expert-parallel engine
     * (every rank of it), named alike, group_size of them, each with its
     * own group_member < group_size. A version is committed by every
     * receiver of a group or by none: each reports "prepared" to its
     * senders, and only once every one did do the engines hear committed()
     * (a sender that reaches only part of a group refuses to push). Unset
     * or "": a group of one. group is copied, at most 63 bytes. */
    const char *group;
    uint32_t group_size;
    uint32_t group_member;
    /* Where a restarted receiver starts (WST_RECEIVER_PARAM_INITIAL_STATE;
     * default: version 0, usable): as if it had committed
     * initial_committed_version and then, with a non-empty
     * initial_unusable_reason, failed a refit for that reason. A BEGIN of a
     * version not above it is refused ("version V is not above C",
     * WST_ERR_STALE_VERSION); an unusable receiver says why to senders and
     * in wst_receiver_get_state, and never tells its engine to resume,
     * until a later refit commits.
     * For a daemon that persists what it committed (wstream-agent's
     * --state-file), so that a restart neither reopens rollback nor serves
     * memory a crash left half-written. The reason is copied during create
     * (at most 511 bytes kept); NULL or "": usable. */
    uint64_t initial_committed_version;
    const char *initial_unusable_reason;
    /* The deployment's secret: a file of 32 to 4096 bytes that neither
     * group nor others may read (create fails naming the file and its mode
     * otherwise). A sender must prove it holds the same secret before it
     * reaches this receiver's UCX worker, and every control message then
     * carries a MAC. NULL or "" (default): insecure -- only senders
     * without a secret are accepted and the log says so (wstream-agent
     * refuses to start that way unless --insecure). The library reads no
     * environment. Borrowed during create. */
    const char *auth_secret_file;
    /* What authenticated senders may make this receiver hold
     * (WST_RECEIVER_PARAM_LIMITS). A have manifest over either limit is
     * refused with an ERROR naming it, and its sender dropped; nothing else
     * changes. max_manifest_entries: shards one sender may list, at most
     * 1048576; 0 (default): 64 times the tensors this receiver wants, at
     * least 65536. max_manifest_bytes: what all senders' decoded
     * manifests may hold together (default 512 MiB; a shard takes 472
     * bytes). max_unranked_peers: authenticated connections at once that
     * have not said hello (default 8); one more is refused. */
    uint64_t max_manifest_entries;
    uint64_t max_manifest_bytes;
    uint32_t max_unranked_peers;
    /* Data lanes (WST_RECEIVER_PARAM_LANES): UCX workers, each with a
     * progress thread of its own, that take a share of the senders' am
     * data messages; the hello tells each sender their addresses. 1 to 8;
     * 0: the default, 1. */
    uint32_t lanes;
    /* Network devices for the data lanes (WST_RECEIVER_PARAM_LANE_DEVICES;
     * copied), as UCX names them, comma-separated ("mlx5_0:1,mlx5_1:1"):
     * lane i uses entry i mod n only, so with one entry per NIC every NIC
     * carries a share. NULL or "": UCX chooses (confined to the listen
     * address's interface). UCX_NET_DEVICES in the environment wins. At
     * most 16 entries of 63 characters (letters, digits, "_.:-"). */
    const char *lane_devices;
    /* The label initial_committed_version came with
     * (WST_RECEIVER_PARAM_INITIAL_LABEL, only with _INITIAL_STATE; copied
     * during create): what the state's committed_label and the senders
     * that connect hear until the next commit. NULL or "": none; a label
     * that breaks the rule (WST_LABEL_MAX) fails create with
     * WST_ERR_INVALID. */
    const char *initial_committed_label;
    /* The device ring (WST_RECEIVER_PARAM_DEVICE_RING): GPU memory of this
     * receiver's own, on its regions' GPU, in which data for device memory
     * its CUDA-aware UCX cannot export (an engine's buffers mapped by CUDA
     * IPC) lands before a copy in place. Allocated only then. Bytes, a
     * whole number of MiB from 8 MiB to 64 GiB; 0: the default, 1 GiB
     * (32 messages of 32 MiB; a smaller ring holds fewer). */
    uint64_t device_ring_bytes;
};

/* One block of live memory. */
struct wst_region {
    const char *name; /* copied */
    void *data;       /* borrowed until wst_receiver_destroy */
    uint64_t length;  /* bytes */
    int mem_type;     /* enum wst_mem_type (checked): host or CUDA memory */
};

/* A box of a checkpoint tensor this receiver needs, and where it goes: a
 * row-major array of the box's extents at 'offset' bytes into region
 * 'region', rows 'row_pitch' bytes apart (0: dense). */
struct wst_want_entry {
    const char *name; /* copied */
    int dtype;        /* enum wst_dtype */
    uint32_t ndim;
    const uint64_t *shape;     /* [ndim] global shape */
    const uint64_t *box_start; /* [ndim] */
    const uint64_t *box_stop;  /* [ndim] */
    uint32_t region;
    uint64_t offset;
    uint64_t row_pitch;
    /* Grouped routed experts ([E, rows, cols], dim 0 the global expert id):
     * nonzero expert_grouped, and this rank's place in expert parallelism.
     * The plan refuses E % ep_size != 0, a box cutting a non-expert
     * dimension, and any dim-0 range but [ep_rank*E/ep_size,
     * (ep_rank+1)*E/ep_size) (linear placement). Zero: a dense tensor. */
    int expert_grouped;
    uint32_t ep_rank;
    uint32_t ep_size;
};

/* The routed experts of one MoE layer, as the engine holds them: live
 * buffers w13 and w2 in the layout of loader 'loader', for the local experts
 * of expert-parallel rank ep_rank of ep_size. On the wire they are the
 * grouped tensors "model.layers.{layer}.mlp.experts.{gate_proj,up_proj,
 * down_proj}.weight" of shapes [E, I, H], [E, I, H] and [E, H, I]; the
 * receiver stages its experts' boxes of them (checkpoint layout, EP-local)
 * and, once the layer is verified, replays staged expert i as global id
 * ep_rank*E/ep_size + i through the loader into w13 and w2, in place.
 *
 * Refused when the receiver plans (each with its own status, the message
 * naming the tensor; nothing is written and the committed version is still
 * served): E % ep_size != 0; an expert map that is not linear placement
 * (expert_ids[i] != ep_rank*E/ep_size + i, e.g. round-robin); experts
 * sharded inside (inter_tp_size > 1: the intermediate dimension split over
 * tensor-parallel ranks); a shape the loader's check() refuses. */
struct wst_expert_layer {
    uint32_t layer;     /* model.layers.{layer} */
    const char *loader; /* registered loader name; copied */
    int dtype;          /* enum wst_dtype */
    uint32_t n_experts; /* E, routed experts of the model */
    uint32_t ep_rank;   /* < ep_size */
    uint32_t ep_size;   /* >= 1 */
    uint32_t hidden;    /* H */
    uint32_t inter;     /* I, per expert, unsharded */
    /* The engine's map from local expert index to global id (copied), for
     * checking; NULL: linear placement. n_expert_ids must then be 0. */
    const uint32_t *expert_ids;
    uint32_t n_expert_ids;
    /* Tensor parallelism inside each expert (intermediate dim split over
     * inter_tp_size ranks); 0 or 1: none. Anything else is refused. */
    uint32_t inter_tp_rank;
    uint32_t inter_tp_size;
    uint32_t w13_region; /* live w13: region index and byte offset */
    uint64_t w13_offset;
    uint32_t w2_region; /* live w2 */
    uint64_t w2_offset;
};

/* One layer's timeline in the last refit, seconds from the begin hook's
 * acknowledgement; 0 where that step did not happen. */
struct wst_layer_times {
    double received;  /* every sender's bytes in and verified */
    double repacked;  /* experts replayed into live memory (MoE layers) */
    double finalized; /* the engine's finalize hook returned */
    double repack_seconds;
    double finalize_seconds;
};

struct wst_receiver_state {
    uint64_t committed_version; /* 0: none */
    int usable;                 /* 0 after a failed refit */
    int refit_in_progress;
    char reason[512]; /* why unusable (or the last refusal); "" if none */
    uint64_t refits_ok;
    uint64_t refits_failed;
    uint64_t last_refit_bytes;
    /* The same bytes by the mover that brought them (each sender uses one
     * mover per refit): put (RMA), am (active messages, also the bounce
     * path's) and nccl. */
    uint64_t last_refit_put_bytes;
    uint64_t last_refit_am_bytes;
    uint64_t last_refit_nccl_bytes;
    double last_refit_seconds; /* begin acknowledged to commit */
    double plan_seconds;       /* building the current plan (0: cached) */
    /* The refit under way (refit_in_progress): its version and phase --
     * "beginning" (the engine is asked to pause), "ready" (paused, nothing
     * written, waiting for the engine group), "receiving", "prepared"
     * (every layer in, waiting for the group to commit); "" and 0 when
     * none. */
    uint64_t refit_version;
    char refit_phase[16];
    /* Data messages dropped because they did not carry the data token of
     * the sender rank they claimed (forged, or from a stale plan): their
     * bytes were never written. */
    uint64_t forged_data;
    /* Times the UCX worker data arrives on was replaced because a failed
     * refit left receives in flight (their bytes can then never land). */
    uint64_t data_resets;
    /* The receiver's data lanes, and the bytes of the last committed
     * refit's data messages that landed on each (am and bounce; put and
     * nccl bytes travel outside them). */
    uint32_t lanes;
    uint64_t last_refit_lane_bytes[WST_RECEIVER_LANES_MAX];
    /* The network device each lane was given (lane_devices); "": UCX's
     * choice. */
    char lane_device[WST_RECEIVER_LANES_MAX][64];
    /* The labels senders pushed with the refit under way (refit_label,
     * "" when none is) and with the committed version (committed_label):
     * free-form ("step-1200", a run or git id), at most WST_LABEL_MAX - 1
     * bytes of printable ASCII without spaces; "": none. The engine's
     * hooks read them here: in begin(V), refit_label is V's (when
     * refit_version is V); in committed(V), committed_label is V's. */
    char refit_label[WST_LABEL_MAX];
    char committed_label[WST_LABEL_MAX];
    /* Scale figures (appended: the fields above keep their offsets). */
    /* Unpacking senders' have manifests, summed over every manifest since
     * the receiver started (the planner thread's other job). */
    double manifest_seconds;
    /* The planner thread's CPU seconds for the current plan and for those
     * manifests: on a host with more threads than cores, the cost of each
     * without the waits for a core. */
    double plan_cpu_seconds;
    double manifest_cpu_seconds;
    /* Bytes of the senders' decoded have manifests the receiver held when
     * the current plan was installed (what max_manifest_bytes bounds). */
    uint64_t manifest_bytes;
    /* Control messages on the senders' connections since the receiver
     * started, heartbeats included: sent and received, and their payload
     * bytes (each frame adds 4 bytes and a 32-byte MAC on the wire). */
    uint64_t control_msgs_out;
    uint64_t control_bytes_out;
    uint64_t control_msgs_in;
    uint64_t control_bytes_in;
};

/* On success *receiver_p is owned by the caller. */
wst_status_t wst_receiver_create(const struct wst_receiver_params *params,
                                 wst_receiver_t **receiver_p);

/* Adds a region and registers its memory once; its index goes to *id_p.
 * Only before wst_receiver_start. */
wst_status_t wst_receiver_add_region(wst_receiver_t *receiver,
                                     const struct wst_region *region,
                                     uint32_t *id_p);

/* Adds a want entry (validated against its region at once). Only before
 * wst_receiver_start. */
wst_status_t wst_receiver_add_want(wst_receiver_t *receiver,
                                   const struct wst_want_entry *want);

/* Adds a repack loader next to the built-ins ("checkpoint", "trtllm-bf16");
 * borrowed until wst_receiver_destroy. WST_ERR_INVALID for a NULL function,
 * an empty name or a name already registered. Only before
 * wst_receiver_start. */
wst_status_t wst_receiver_add_loader(wst_receiver_t *receiver,
                                     const struct wst_repack_loader *loader);

/* Adds the routed experts of one MoE layer (see struct wst_expert_layer).
 * Checked at once: known dtype and loader, ep_rank < ep_size, nonzero
 * sizes, one per layer, live buffers inside their regions (sizes from the
 * loader for the local shape). Placement and shape refusals come when the
 * receiver plans. Only before wst_receiver_start. */
wst_status_t wst_receiver_add_expert_layer(wst_receiver_t *receiver,
                                           const struct wst_expert_layer *e);

/* Starts listening; the bound port goes to *port_p (may be NULL). */
wst_status_t wst_receiver_start(wst_receiver_t *receiver, uint16_t *port_p);

/* A snapshot of the receiver's state. */
void wst_receiver_get_state(wst_receiver_t *receiver,
                            struct wst_receiver_state *state);

/* Waits until 'version' (or a later one) is committed: WST_OK; the receiver
 * became unusable while waiting: WST_ERR_UNUSABLE; timeout:
 * WST_ERR_TIMED_OUT. */
wst_status_t wst_receiver_wait_committed(wst_receiver_t *receiver,
                                         uint64_t version, double timeout_s);

/* Copies the per-layer timeline of the last refit into times[0..n) (layer
 * order, the global-tensor layer last) and returns the number of layers in
 * the plan (0 before the first plan). */
uint32_t wst_receiver_get_timeline(wst_receiver_t *receiver,
                                   struct wst_layer_times *times, uint32_t n);

/* Closes every connection, deregisters memory, frees everything. The
 * regions' memory stays the caller's. */
void wst_receiver_destroy(wst_receiver_t *receiver);

#ifdef __cplusplus
}
#endif
#endif /* WSTREAM_RECEIVER_H */
