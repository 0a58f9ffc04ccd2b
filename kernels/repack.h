/* repack.h - MoE expert repack loaders: checkpoint and TRTLLM BF16 layouts.
 *
 * A repack loader turns one expert's checkpoint tensors (gate [I,H], up [I,H],
 * down [H,I], row-major) into that expert's slice of the engine's live buffers
 * w13 and w2. It is an ops table so that an engine embedding the receiver can
 * register its own layout next to the built-ins:
 *
 *   "checkpoint"   w13 = [L, 2I, H], rows [0,I) gate and [I,2I) up per
 *                  expert; w2 = [L, H, I]. Any dtype.
 *   "trtllm-bf16"  FlashInfer TRTLLM BF16 block layout, REFIT_LAYOUTS.md
 *                  section 3: w13 = [L, H/64, 2I, 64], w2 = [L, I/64, H, 64].
 *
 * The functions here are the CPU twins of the GPU kernels; the layouts they
 * write are the reference the GPU results are checked against bit for bit.
 *
 * The receiver replays staged local expert i as global id expert_start + i:
 * it checks expert_start <= global < expert_start + n_local itself and calls
 * load_expert(shape, global - expert_start, ...). A loader writes only the
 * bytes of expert 'local' in w13 and w2; the other experts' bytes are left
 * as they were.
 */
#ifndef WST_REPACK_H
#define WST_REPACK_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

/* Experts of one MoE layer held by this rank. */
struct wst_expert_shape {
    uint32_t n_local;     /* L experts on this rank */
    uint32_t hidden;      /* H */
    uint32_t inter;       /* I, per expert */
    enum wst_dtype dtype; /* element type, unchanged by every loader */
};

/* A loader's ops table. All functions are pure in their arguments: no state
 * lives in a loader, so one table serves every layer and thread at once.
 *
 * check:       refuses a shape the layout cannot hold with
 *              WST_ERR_REPACK_SHAPE and a message naming the violated
 *              constraint in 'err' (NUL-terminated, truncated to errlen; err
 *              may be NULL when errlen is 0). Call it once per layer before
 *              w13_bytes/w2_bytes/load_expert.
 * w13_bytes:   size in bytes of the whole live w13 buffer (all L experts) for
 *              a shape check() accepted.
 * w2_bytes:    the same for w2.
 * load_expert: writes expert 'local' (< n_local) of w13 and w2 from gate, up
 *              and down; 'self' is the table it was called through, so an
 *              engine's own loader reaches its context through self->arg
 *              (a stream, a handle). Borrows every pointer for the call. Never
 *              touches bytes of other experts. WST_ERR_INVALID for a NULL
 *              pointer or local >= n_local, WST_ERR_REPACK_SHAPE for a shape
 *              check() refuses. Source and destination must not overlap.
 * arg:         for the owner of the table; the built-ins leave it NULL. */
struct wst_repack_loader {
    const char *name;
    wst_status_t (*check)(const struct wst_expert_shape *shape, char *err,
                          size_t errlen);
    uint64_t (*w13_bytes)(const struct wst_expert_shape *shape);
    uint64_t (*w2_bytes)(const struct wst_expert_shape *shape);
    wst_status_t (*load_expert)(const struct wst_repack_loader *self,
                                const struct wst_expert_shape *shape,
                                uint32_t local, const void *gate /* [I,H] */,
                                const void *up /* [I,H] */,
                                const void *down /* [H,I] */, void *w13,
                                void *w2);
    void *arg;
};

/* The built-in loaders. Static tables owned by the library, valid for the
 * life of the process; never modify or free them. */
const struct wst_repack_loader *wst_repack_loader_checkpoint(void);
const struct wst_repack_loader *wst_repack_loader_trtllm_bf16(void);

/* The TRTLLM kernel's limit on the model's total routed experts: E <= 2048
 * (and E > 0). Per-rank loaders see only L = E/ep, so the caller checks E
 * here when it picks "trtllm-bf16". WST_ERR_REPACK_SHAPE with a message in
 * 'err' otherwise. */
#define WST_REPACK_TRTLLM_MAX_EXPERTS 2048u
wst_status_t wst_repack_check_experts(uint32_t n_experts, char *err,
                                      size_t errlen);

/* sigma(n) of REFIT_LAYOUTS.md section 3: the source row of output row n
 * after the interleave, within the shuffle blocks of 32 rows. */
uint32_t wst_repack_trtllm_row(uint32_t n);

/* Loader registry: a plain struct the caller owns (stack, heap or inside its
 * context); no globals. It borrows the loader tables it holds: each one must
 * stay valid and unchanged for as long as the registry is used. Not
 * thread-safe while being added to; find() may run concurrently once adding
 * is over. There is nothing to destroy. */
#define WST_LOADER_REGISTRY_MAX 16
struct wst_loader_registry {
    const struct wst_repack_loader *loaders[WST_LOADER_REGISTRY_MAX];
    uint32_t count;
};

/* Empties 'reg' and registers the built-ins ("checkpoint", "trtllm-bf16"). */
void wst_loader_registry_init(struct wst_loader_registry *reg);

/* Registers 'loader' (borrowed, see above). WST_ERR_INVALID for a NULL
 * loader, an empty name, a NULL function, or a name already registered (the
 * first one stays); WST_ERR_TOO_LARGE when the registry is full. The
 * registry is unchanged on error. */
wst_status_t wst_loader_registry_add(struct wst_loader_registry *reg,
                                     const struct wst_repack_loader *loader);

/* The loader named 'name', or NULL when none is. Borrowed from the registry's
 * owner (see above). */
const struct wst_repack_loader *
wst_loader_registry_find(const struct wst_loader_registry *reg,
                         const char *name);

#endif
