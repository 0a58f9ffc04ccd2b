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
#include <wstream/loader.h>
#include <wstream/status.h>

/* struct wst_expert_shape and struct wst_repack_loader: <wstream/loader.h>. */

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
