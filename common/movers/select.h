/* select.h - which mover a (sender, receiver) pair uses: the one module
 * that decides, from what each side holds and what its UCX, CUDA and NCCL
 * can do (attributes: common/lanes.h, wst_worker_supports_cuda, the NCCL
 * stub), never from printed text.
 *
 * Three decisions, each pure and logged once per plan with its reason:
 *  - the device path (below): how device bytes travel;
 *  - the mover for host bytes (and bounced device bytes): put or am
 *    (wst_mover_choose);
 *  - whether a receiver can take the nccl mover at all
 *    (wst_rx_nccl_possible).
 *
 * The device path: how device bytes travel between one sender and one
 * receiver.
 *
 * A pure decision, taken once per (sender, receiver) pair from what each side
 * holds and can do, and logged once with its reason (DESIGN.md section 6).
 * Nothing here touches UCX, CUDA or NCCL: callers gather the inputs
 * (wst_worker_supports_cuda, the receiver's plan, the NCCL stub) and act on
 * the answer, so every combination can be tested on a machine with no GPU.
 *
 * The paths:
 *   host    no device memory on either side: the UCX put or AM movers as
 *           they are.
 *   direct  device memory registered with UCX and moved by UCX itself (CUDA
 *           IPC within a host, GPUDirect RDMA across hosts). Needs a
 *           CUDA-aware UCX on every side that holds device memory; Debian's
 *           and Ubuntu's UCX builds are not (tests/gpu/build-ucx.sh builds
 *           one).
 *   bounce  device memory copied through pinned host rings on the side(s)
 *           holding it, moved host to host by UCX. Always possible.
 *   nccl    ncclSend/ncclRecv between the two GPUs.
 *
 * The rules (the specification; tests/unit/test_select.c checks every
 * combination of inputs against them):
 *  1. Neither side holds device memory: host, whatever the preference, and
 *     the reason says a direct or bounce preference does not apply; except
 *     that a nccl preference is refused (NCCL here moves device memory only).
 *  2. Preference nccl: nccl when this sender has NCCL (nccl_built) and the
 *     receiver can run it (peer_nccl); refused otherwise.
 *  3. Preference direct: direct when every side holding device memory has a
 *     CUDA-aware UCX (src_device needs local_ucx_cuda, dst_device needs
 *     peer_ucx_cuda; a side holding only host memory needs nothing). Else
 *     nccl when rule 2 would allow it (UCX cannot reach that device
 *     memory). Else refused.
 *  4. Preference bounce: bounce.
 *  5. Preference auto: direct when rule 3 allows direct, else bounce. Auto
 *     never picks nccl: bounce always works, and NCCL needs a communicator
 *     the operator has to ask for.
 * Whenever direct is ruled out, the reason names the side(s) whose UCX lacks
 * CUDA support ("this sender's UCX", "the receiver's UCX").
 */
#ifndef WST_MOVERS_SELECT_H
#define WST_MOVERS_SELECT_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "log.h"
#include "mover_kind.h"
#include "rx.h"

/* Values may travel on the wire: append only. */
enum wst_path {
    WST_PATH_HOST = 1,
    WST_PATH_DIRECT = 2,
    WST_PATH_BOUNCE = 3,
    WST_PATH_NCCL = 4,
};

/* A sender's window on the direct path when none was asked for: at least
 * this. Its bytes in flight cost the sender nothing (they are the
 * trainer's shards) and the receiver nothing beyond its device ring, and
 * UCX moves device memory fast enough that 256 MiB (8 lanes' default)
 * leaves it waiting. One H200, 8-layer qwen3-30b-a3b direct refit, 32
 * MiB messages, refits 2-3 (NOTES.md, issue 19): window 256 MiB 331-376
 * GB/s, 1 GiB 399-420. (The device ring took 8 MiB messages then, and
 * its size changed nothing; with 32 MiB ones it does: landing.h.) */
#define WST_DIRECT_WINDOW_MIN (1ull << 30)

/* A sender's bytes in flight to a receiver on 'path': 'window', or with
 * 'window_auto' (none asked for) on the direct path at least
 * WST_DIRECT_WINDOW_MIN. */
uint64_t wst_path_window(enum wst_path path, uint64_t window, int window_auto);

/* Configured preference. Values are local only; their order is the order of
 * the names wst_path_pref_parse accepts, so a config enum with the choices
 * {"auto", "direct", "bounce", "nccl"} stores them directly. */
enum wst_path_pref {
    WST_PATH_PREF_AUTO = 0,
    WST_PATH_PREF_DIRECT,
    WST_PATH_PREF_BOUNCE,
    WST_PATH_PREF_NCCL,
};

/* A 'why' buffer of this many bytes holds every reason without truncation. */
#define WST_PATH_WHY_LEN 320

/* "host", "direct", "bounce", "nccl"; "invalid" for other values. Static
 * strings. */
const char *wst_path_name(enum wst_path p);

/* "auto", "direct", "bounce" or "nccl" (exact, lowercase); NULL or "" mean
 * auto. Anything else: WST_ERR_INVALID and *out untouched (the caller names
 * the key and the value in its error). */
wst_status_t wst_path_pref_parse(const char *s, enum wst_path_pref *out);

/* What one sender knows about one receiver. Flags are 0 or nonzero. */
struct wst_path_inputs {
    int src_device;     /* the sender's bytes for this receiver include device
                           memory */
    int dst_device;     /* the receiver's destinations (live regions or
                           staging) include device memory */
    int local_ucx_cuda; /* this sender's UCX context reports CUDA memory */
    int peer_ucx_cuda;  /* the receiver's UCX context does (from its plan) */
    int nccl_built;     /* this sender can run NCCL (wst_nccl_available) */
    int peer_nccl;      /* the receiver can run NCCL (has NCCL and a device) */
    enum wst_path_pref pref;
};

/* Chooses the path for one (sender, receiver) pair by the rules above.
 * On WST_OK *path is set and 'why' holds one lowercase sentence for the log
 * line (without the path's name, which wst_path_log prints). On
 * WST_ERR_UNSUPPORTED (the preference cannot be honoured) *path is untouched
 * and 'why' says what is missing. WST_ERR_INVALID for a NULL 'in' or 'path'
 * or a preference out of range. 'why' is borrowed for the call and always
 * NUL-terminated when why_len > 0 (truncated below WST_PATH_WHY_LEN); it may
 * be NULL when why_len is 0. */
wst_status_t wst_path_choose(const struct wst_path_inputs *in,
                             enum wst_path *path, char *why, size_t why_len);

/* The one INFO line per (sender, receiver) pair:
 * "receiver <peer_name>: device path <name>: <why>", with a note for direct
 * that GPUDirect RDMA across hosts is unverified on hardware. log, peer_name
 * and why are borrowed for the call; NULL peer_name or why print as "?". */
void wst_path_log(const struct wst_logger *log, const char *peer_name,
                  enum wst_path p, const char *why);

/* The mover for a pair's host bytes (and bounced device bytes):
 *  - am when the receiver offers only am (it hands out no remote keys);
 *  - else the application's preference 'pref' (put or am), when it has one
 *    (0: none);
 *  - else put when a data lane does RMA in hardware ('rma_real',
 *    common/lanes.h), am otherwise (puts would be emulated).
 * On the direct path a lane that puts into device memory (cuda_ipc)
 * counts as 'rma_real' only when the sender was configured for put
 * (sender/link_open.c): auto stays am there, put being no faster.
 * *why_p (a static string) says why, for the log line. */
enum wst_mover_kind wst_mover_choose(enum wst_mover_kind offered,
                                     enum wst_mover_kind pref, int rma_real,
                                     const char **why_p);

/* Whether the nccl mover can serve a receiver whose regions are these:
 * built with NCCL (nccl_built: wst_nccl_available), and every region
 * device memory on its GPU 'device' (-1 if none). *why_p (a static string)
 * says why not. */
int wst_rx_nccl_possible(const struct wst_rx_region *regions, size_t n,
                         int device, int nccl_built, const char **why_p);

#endif
