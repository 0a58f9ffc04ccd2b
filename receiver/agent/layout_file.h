/* layout_file.h - the agent's layout file: what a receiver wants and where
 * its live regions are.
 *
 * The file is JSON (format 1):
 *
 *   {
 *     "format": 1,
 *     "rank": 0,
 *     "shm": "/wstream-demo-1234-r0",   optional POSIX shm object
 *     "shm_bytes": 123456,              required with "shm"
 *     "cuda_ipc": "0123...ef",          optional, exclusive with "shm"
 *     "cuda_bytes": 123456,             required with "cuda_ipc"
 *     "cuda_device": 0,                 optional with "cuda_ipc" (0)
 *     "allocations": [ {"name": "host0", "shm": "/eng-0", "bytes": 4096},
 *                      {"name": "gpu0", "cuda_ipc": "0123...ef",
 *                       "bytes": 8192, "device": 0} ],   optional
 *     "group": {"name": "engine-0", "size": 2, "member": 1},   optional
 *     "regions": [ {"name": "...", "allocation": "gpu0", "offset": 0,
 *                   "bytes": 1048576} ],
 *     "wants": [ {"tensor": "...", "dtype": "bf16", "shape": [1024, 1024],
 *                 "start": [0, 0], "stop": [512, 1024], "region": "...",
 *                 "offset": 0, "row_pitch": 0,
 *                 "expert": {"ep_rank": 3, "ep_size": 8}} ],  optional
 *     "experts": [ {"layer": 0, "loader": "trtllm-bf16", "dtype": "bf16",
 *                   "experts": 128, "ep_rank": 1, "ep_size": 8,
 *                   "hidden": 2048, "inter": 768,
 *                   "expert_ids": [16, 17, ...],             optional
 *                   "inter_tp": {"rank": 0, "size": 2},      optional
 *                   "w13": {"region": "...", "offset": 0},
 *                   "w2": {"region": "...", "offset": 0}} ]   optional
 *   }
 *
 * With "shm", every region lives at "offset" bytes inside the shm object and
 * regions may not overlap or run past "shm_bytes". "cuda_ipc" is the device
 * counterpart: the engine's GPU allocation of "cuda_bytes" bytes on GPU
 * "cuda_device", named by its CUDA IPC handle (cudaIpcMemHandle_t, 64
 * bytes) written as exactly 128 lowercase hex digits; regions live at
 * "offset" inside it under the same rules. A file may name "shm" or
 * "cuda_ipc", not both; "shm_bytes", "cuda_bytes" and "cuda_device" without
 * their object are refused. Without either, a region's "offset" is
 * optional (0) and the agent allocates each region itself -- memory no
 * engine sees, so wstream-agent refuses such a layout at start unless run
 * with --private-memory (region_memory.h).
 * "allocations" is for live memory in many blocks (an engine's caching
 * allocator hands out one CUDA IPC handle per segment): each entry is a
 * "name" (1..63 bytes, unique) and exactly one of "shm" (a POSIX shm
 * object) or "cuda_ipc" (a handle, spelled as above), with "bytes" > 0;
 * "device" (default 0) only with "cuda_ipc". A region with "allocation"
 * lives at "offset" (then required) inside the entry of that name, under
 * the rules above: inside its "bytes", no overlap with the other regions
 * of that entry. A region without it is allocated by the agent (only
 * with --private-memory, as above). Refused:
 * "allocations" next to the top-level "shm" or "cuda_ipc" (one way per
 * file), "allocation" without "allocations", two entries with one shm name
 * or one handle (CUDA maps a handle once per process), cuda_ipc entries on
 * different devices (one receiver serves one GPU), more than
 * WST_LAYOUT_ALLOC_MAX entries. Host (shm) and device entries may mix: the
 * receiver serves host and device regions together.
 * "group" names the engine group of this agent: the agents of one tensor/
 * expert-parallel engine, "size" of them, each its own "member" < "size";
 * a version is committed by all of them or by none (receiver.h). The name
 * is 1..63 bytes and "size" at most 4096. Without it the agent is a group
 * of one.
 * A want's "row_pitch" is optional (0 = dense). A want's "expert" marks a
 * grouped expert tensor ([E, rows, cols], dim 0 the global expert id; see
 * struct wst_want_expert): it needs both "ep_rank" < "ep_size" (>= 1) and a
 * shape of >= 2 dims; without it the want is dense. Placement rules (E
 * divisible by ep_size, box = the rank's dim-0 range) are refused by the
 * planner, with their own statuses, not here.
 * An "experts" entry is one MoE layer's routed experts as the engine holds
 * them (struct wst_expert_layer in receiver.h): live buffers w13 and w2 at
 * "offset" bytes into the named regions, in the layout of loader "loader"
 * (a name of at most 63 bytes; whether it is registered is the receiver's
 * check). Required: every key but "expert_ids" and "inter_tp"; ep_rank <
 * ep_size; nonzero experts, ep_size, hidden, inter; a known dtype; at most
 * one entry per layer. "expert_ids" (the engine's local -> global expert
 * map) must have exactly experts/ep_size entries when given (and ep_size
 * must divide experts then); "inter_tp" needs rank < size. Whether the map
 * is linear, the sharding allowed and the shape loadable are the receiver's
 * refusals at plan time, not the parser's. Unknown keys are ignored.
 * Numbers must be JSON integers in [0, INT64_MAX); at most WST_LAYOUT_MAX
 * regions and wants.
 *
 * The code is cut by purpose behind this header: layout_parse.c (reading),
 * layout_rules.c (the checks), layout_save.c (writing), layout_allocs.c
 * (the allocations: their list, parsing and rules); layout_internal.h
 * lists what they share.
 */
#ifndef WST_LAYOUT_FILE_H
#define WST_LAYOUT_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "manifest.h"
#include <wstream/status.h>

#define WST_LAYOUT_FORMAT 1
#define WST_LAYOUT_MAX ((size_t)1 << 20) /* regions, and wants */
/* Bytes of a CUDA IPC handle (cudaIpcMemHandle_t; WST_GPU_IPC_HANDLE_BYTES
 * in common/gpu/gpu.h, which this parser does not depend on). */
#define WST_LAYOUT_CUDA_IPC_BYTES 64

struct wst_layout_region {
    char name[WST_NAME_MAX];
    /* 1 + the index in 'allocations' of the allocation the region lives
     * in ("allocation"); 0: none of them -- the region is in the top-level
     * shm or cuda_ipc allocation when the layout has one, else the agent
     * allocates it. 1-based so that a zeroed region is never silently put
     * into allocations[0]. */
    uint32_t allocation;
    uint64_t offset; /* into its allocation (0 without one) */
    uint64_t bytes;
};

/* One entry of "allocations": a block of the engine's live memory that
 * regions are placed in. */
#define WST_LAYOUT_ALLOC_MAX 65536   /* entries of "allocations" */
#define WST_LAYOUT_ALLOC_NAME_MAX 64 /* bytes of a name, with the NUL */

enum wst_layout_alloc_kind {
    WST_LAYOUT_ALLOC_SHM = 1, /* a POSIX shm object, mapped by the agent */
    WST_LAYOUT_ALLOC_CUDA_IPC /* a device allocation, imported by CUDA IPC */
};

struct wst_layout_allocation {
    char name[WST_LAYOUT_ALLOC_NAME_MAX]; /* "" for the top-level one */
    enum wst_layout_alloc_kind kind;
    char shm[WST_NAME_MAX]; /* WST_LAYOUT_ALLOC_SHM: the object's name */
    /* WST_LAYOUT_ALLOC_CUDA_IPC: the handle's raw bytes and its GPU
     * ("device"; always 0 for shm). */
    unsigned char cuda_ipc[WST_LAYOUT_CUDA_IPC_BYTES];
    uint32_t device;
    uint64_t bytes;
};

#define WST_LAYOUT_LOADER_MAX 64 /* bytes, with the NUL */

/* One MoE layer's experts (the "experts" array). */
struct wst_layout_experts {
    uint32_t layer;
    char loader[WST_LAYOUT_LOADER_MAX];
    enum wst_dtype dtype;
    uint32_t n_experts; /* E */
    uint32_t ep_rank;
    uint32_t ep_size;
    uint32_t hidden;
    uint32_t inter;
    uint32_t *expert_ids; /* owned (malloc'd) [n_expert_ids]; NULL: linear */
    uint32_t n_expert_ids;
    uint32_t inter_tp_rank; /* inter_tp_size 0: no "inter_tp" */
    uint32_t inter_tp_size;
    uint32_t w13_region; /* index into 'regions' */
    uint64_t w13_offset;
    uint32_t w2_region;
    uint64_t w2_offset;
};

/* A parsed layout. 'regions' and 'wants' are malloc'd arrays owned by the
 * struct; free them with wst_layout_release. want.region is an index into
 * 'regions'; want.tensor holds name, dtype and shape; want.box comes from
 * start/stop. */
#define WST_LAYOUT_GROUP_MAX 64 /* bytes of a group name, with the NUL */
#define WST_LAYOUT_GROUP_SIZE_MAX 4096

struct wst_layout {
    uint32_t rank;
    char group[WST_LAYOUT_GROUP_MAX]; /* "" without "group" */
    uint32_t group_size;              /* 0 without "group" */
    uint32_t group_member;
    char shm[WST_NAME_MAX]; /* "" if none */
    uint64_t shm_bytes;
    /* "cuda_ipc": has_cuda_ipc nonzero, the handle's raw bytes, the
     * allocation's size and its device ordinal. Exclusive with shm. */
    int has_cuda_ipc;
    unsigned char cuda_ipc[WST_LAYOUT_CUDA_IPC_BYTES];
    uint64_t cuda_bytes;
    uint32_t cuda_device;
    /* "allocations" (owned; NULL and 0 without the key). Exclusive with
     * shm and has_cuda_ipc. */
    size_t n_allocations;
    struct wst_layout_allocation *allocations;
    size_t n_regions;
    struct wst_layout_region *regions;
    size_t n_wants;
    struct wst_want *wants;
    size_t n_experts;
    struct wst_layout_experts *experts; /* owned, with their expert_ids */
};

/* Reads and parses the layout file at 'path'. On success fills *out, which
 * the caller then owns (release with wst_layout_release). On failure *out
 * is untouched, 'err' (may be NULL) holds a message naming the file, field
 * and entry, and the status is WST_ERR_IO (unreadable file), WST_ERR_CONFIG
 * (bad content), WST_ERR_NO_MEMORY or WST_ERR_INVALID (bad arguments). */
wst_status_t wst_layout_load(const char *path, struct wst_layout *out,
                             char *err, size_t errlen);

/* As wst_layout_load, from 'len' bytes of JSON text (need not be
 * NUL-terminated; borrowed for the call only). */
wst_status_t wst_layout_parse(const char *json_text, size_t len,
                              struct wst_layout *out, char *err, size_t errlen);

/* Writes 'l' (borrowed) to 'path' atomically: a temporary file next to it,
 * fsync'd, then renamed over 'path'. Refuses (WST_ERR_INVALID) values the
 * loader would refuse to read back: numbers >= INT64_MAX, region indices out
 * of range, unknown dtypes, both shm and cuda_ipc, a zero cuda_bytes, and
 * allocations the parser would refuse (names, kinds, sizes, duplicates,
 * devices; next to shm or cuda_ipc; a region's allocation out of range).
 * WST_ERR_IO when the file cannot be written. */
wst_status_t wst_layout_save(const char *path, const struct wst_layout *l,
                             char *err, size_t errlen);

/* "cuda_ipc" text <-> handle bytes. decode takes a NUL-terminated string of
 * exactly 2 * WST_LAYOUT_CUDA_IPC_BYTES lowercase hex digits and fills
 * 'handle' (untouched on failure, WST_ERR_CONFIG); encode writes that many
 * digits and a NUL into 'hex'. Both borrow their arguments for the call. */
#define WST_LAYOUT_CUDA_IPC_HEX (2 * WST_LAYOUT_CUDA_IPC_BYTES)
wst_status_t
wst_layout_ipc_decode(const char *hex,
                      unsigned char handle[WST_LAYOUT_CUDA_IPC_BYTES]);
void wst_layout_ipc_encode(
    const unsigned char handle[WST_LAYOUT_CUDA_IPC_BYTES],
    char hex[WST_LAYOUT_CUDA_IPC_HEX + 1]);

/* The allocations of 'l' as one list, whichever way the file spelled
 * them: "allocations", or the one implicit allocation of the top-level
 * "shm" or "cuda_ipc" (name "", kind, shm_bytes or cuda_bytes,
 * cuda_device), or none. wst_layout_alloc_get copies entry k < count into
 * *out; wst_layout_region_alloc gives the entry region i lives in, or
 * SIZE_MAX when the agent allocates it. All borrow 'l' for the call. */
size_t wst_layout_alloc_count(const struct wst_layout *l);
void wst_layout_alloc_get(const struct wst_layout *l, size_t k,
                          struct wst_layout_allocation *out);
size_t wst_layout_region_alloc(const struct wst_layout *l, size_t i);

/* Nonzero when some allocation of 'l' is device memory, with its GPU in
 * *device_p (a valid layout has them all on one GPU). */
int wst_layout_cuda_device(const struct wst_layout *l, uint32_t *device_p);

/* Frees the arrays of 'l' and zeroes it. NULL and zeroed structs are fine. */
void wst_layout_release(struct wst_layout *l);

#endif
