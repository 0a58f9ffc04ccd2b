/* repack_cpu.c - CPU twins of the MoE repack loaders, and their registry.
 *
 * Both built-in layouts are fixed gathers: values never change, only their
 * positions. The TRTLLM BF16 layout (REFIT_LAYOUTS.md section 3) is written
 * in its closed form. For an output row n of a [M, K] source, with
 * sigma(n) = 32*floor(n/32) + 4*(n mod 8) + floor((n mod 32)/8):
 *
 *     out[kb][n][0..64) = src_row(sigma(n))[64*kb .. 64*kb + 64)
 *
 * where for w13 (M = 2I, K = H) src_row(q) is gate[q >> 1] when q is odd and
 * up[q >> 1] when it is even, and for w2 (M = H, K = I) src_row(q) is
 * down[q]. Each (kb, n) moves one 128-byte block, eight 16-byte groups of
 * 8 bf16, contiguous on both sides; the destination is written in order.
 *
 *     source row q  |....|blk kb|....|        dest  [kb][n]  |blk|
 *                          128 B         ---->               128 B
 */
#include "repack.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "repack_gpu.h"

#define TRTLLM_KBLOCK 64u        /* elements per K block */
#define TRTLLM_KBLOCK_BYTES 128u /* 64 bf16 */
#define TRTLLM_SHUFFLE_ROWS 32u  /* rows per shuffle block */

static wst_status_t refuse(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err != NULL && errlen > 0) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return WST_ERR_REPACK_SHAPE;
}

/* a*b*c*d without wrapping; 0 on overflow (no accepted shape is empty). */
static uint64_t mul4_u64(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    const uint64_t f[3] = {b, c, d};
    uint64_t p = a;

    for (int i = 0; i < 3; i++) {
        if (f[i] != 0 && p > UINT64_MAX / f[i]) {
            return 0;
        }
        p *= f[i];
    }
    return p;
}

/* Shared by both loaders: nonzero dimensions, a known dtype, and live
 * buffers whose sizes fit in size_t. */
static wst_status_t check_common(const char *loader,
                                 const struct wst_expert_shape *shape,
                                 char *err, size_t errlen)
{
    size_t es;
    uint64_t w13;

    if (shape == NULL) {
        return refuse(err, errlen, "%s: no shape", loader);
    }
    es = wst_dtype_size(shape->dtype);
    if (es == 0) {
        return refuse(err, errlen, "%s: unknown dtype %d", loader,
                      (int)shape->dtype);
    }
    if (shape->n_local == 0 || shape->hidden == 0 || shape->inter == 0) {
        return refuse(err, errlen,
                      "%s: n_local, hidden and inter must be > 0 (L=%u H=%u "
                      "I=%u)",
                      loader, shape->n_local, shape->hidden, shape->inter);
    }
    /* w13 = L*2I*H is the larger buffer; w2 = L*H*I is half of it. */
    w13 = mul4_u64(shape->n_local, 2u * (uint64_t)shape->inter, shape->hidden,
                   es);
    if (w13 == 0 || w13 > SIZE_MAX) {
        return refuse(err, errlen,
                      "%s: w13 of L=%u, 2I=%llu, H=%u does not fit in memory",
                      loader, shape->n_local,
                      2ull * (unsigned long long)shape->inter, shape->hidden);
    }
    return WST_OK;
}

static int load_args_ok(const struct wst_expert_shape *shape, uint32_t local,
                        const void *gate, const void *up, const void *down,
                        const void *w13, const void *w2)
{
    return shape != NULL && local < shape->n_local && gate != NULL &&
           up != NULL && down != NULL && w13 != NULL && w2 != NULL;
}

/* ---- "checkpoint": [L, 2I, H] with [gate; up], [L, H, I] --------------- */

static wst_status_t ckpt_check(const struct wst_expert_shape *shape, char *err,
                               size_t errlen)
{
    return check_common("checkpoint", shape, err, errlen);
}

static uint64_t ckpt_w13_bytes(const struct wst_expert_shape *shape)
{
    return mul4_u64(shape->n_local, 2u * (uint64_t)shape->inter, shape->hidden,
                    wst_dtype_size(shape->dtype));
}

static uint64_t ckpt_w2_bytes(const struct wst_expert_shape *shape)
{
    return mul4_u64(shape->n_local, shape->hidden, shape->inter,
                    wst_dtype_size(shape->dtype));
}

static wst_status_t ckpt_load_expert(const struct wst_repack_loader *self,
                                     const struct wst_expert_shape *shape,
                                     uint32_t local, const void *gate,
                                     const void *up, const void *down,
                                     void *w13, void *w2)
{
    (void)self;
    size_t proj; /* bytes of one [I, H] or [H, I] projection */
    unsigned char *d13;

    if (!load_args_ok(shape, local, gate, up, down, w13, w2)) {
        return WST_ERR_INVALID;
    }
    if (ckpt_check(shape, NULL, 0) != WST_OK) {
        return WST_ERR_REPACK_SHAPE;
    }
    proj = (size_t)shape->inter * shape->hidden * wst_dtype_size(shape->dtype);
    d13 = (unsigned char *)w13 + (size_t)local * 2 * proj;
    memcpy(d13, gate, proj);
    memcpy(d13 + proj, up, proj);
    memcpy((unsigned char *)w2 + (size_t)local * proj, down, proj);
    return WST_OK;
}

/* ---- "trtllm-bf16": [L, H/64, 2I, 64], [L, I/64, H, 64] ---------------- */

uint32_t wst_repack_trtllm_row(uint32_t n)
{
    return 32u * (n / 32u) + 4u * (n % 8u) + (n % 32u) / 8u;
}

static wst_status_t trtllm_check(const struct wst_expert_shape *shape,
                                 char *err, size_t errlen)
{
    const char *me = "trtllm-bf16";
    uint64_t h, i;
    wst_status_t status;

    status = check_common(me, shape, err, errlen);
    if (status != WST_OK) {
        return status;
    }
    h = shape->hidden;
    i = shape->inter;
    if (shape->dtype != WST_DTYPE_BF16) {
        return refuse(err, errlen, "%s: dtype must be bf16, got %s", me,
                      wst_dtype_name(shape->dtype));
    }
    if ((2 * i) % 32 != 0) {
        return refuse(err, errlen, "%s: 2I %% 32 != 0 (I=%llu)", me,
                      (unsigned long long)i);
    }
    if (h % 32 != 0) {
        return refuse(err, errlen, "%s: H %% 32 != 0 (H=%llu)", me,
                      (unsigned long long)h);
    }
    if (h % 64 != 0) {
        return refuse(err, errlen, "%s: H %% 64 != 0 (H=%llu)", me,
                      (unsigned long long)h);
    }
    if (i % 64 != 0) {
        return refuse(err, errlen, "%s: I %% 64 != 0 (I=%llu)", me,
                      (unsigned long long)i);
    }
    if (i % 128 != 0) {
        return refuse(err, errlen, "%s: I %% 128 != 0 (I=%llu)", me,
                      (unsigned long long)i);
    }
    if (shape->n_local > WST_REPACK_TRTLLM_MAX_EXPERTS) {
        return refuse(err, errlen, "%s: n_local %u > E limit %u", me,
                      shape->n_local, WST_REPACK_TRTLLM_MAX_EXPERTS);
    }
    return WST_OK;
}

wst_status_t wst_repack_check_experts(uint32_t n_experts, char *err,
                                      size_t errlen)
{
    if (n_experts == 0 || n_experts > WST_REPACK_TRTLLM_MAX_EXPERTS) {
        return refuse(err, errlen, "trtllm-bf16: E must be in [1, %u], got %u",
                      WST_REPACK_TRTLLM_MAX_EXPERTS, n_experts);
    }
    return WST_OK;
}

/* One expert's [K/64, M, 64] block layout of M shuffled rows of K bf16.
 * Source row q is a[q] when b is NULL, else the interleave of a and b:
 * a[q >> 1] for even q, b[q >> 1] for odd q.
 *
 * Walked in strips of TRTLLM_KSTRIP K blocks: each source row is read once
 * per strip as one contiguous run (a whole KiB, which the prefetcher
 * follows) and spread over that many destination planes, each written in
 * order. Reading 128 bytes per row per plane instead strides by a row and
 * runs at about half the speed. */
#define TRTLLM_KSTRIP 8u
static void trtllm_gather(unsigned char *dst, const unsigned char *a,
                          const unsigned char *b, uint32_t m, uint32_t k)
{
    const size_t row_bytes = (size_t)k * 2;
    const size_t plane = (size_t)m * TRTLLM_KBLOCK_BYTES;
    const uint32_t nkb = k / TRTLLM_KBLOCK;

    for (uint32_t kb0 = 0; kb0 < nkb; kb0 += TRTLLM_KSTRIP) {
        uint32_t kbn = nkb - kb0 < TRTLLM_KSTRIP ? nkb - kb0 : TRTLLM_KSTRIP;

        for (uint32_t n = 0; n < m; n++) {
            uint32_t q = wst_repack_trtllm_row(n);
            const unsigned char *src;
            unsigned char *out;

            if (b == NULL) {
                src = a + (size_t)q * row_bytes;
            } else {
                src = ((q & 1u) ? b : a) + (size_t)(q >> 1) * row_bytes;
            }
            src += (size_t)kb0 * TRTLLM_KBLOCK_BYTES;
            out = dst + (size_t)kb0 * plane + (size_t)n * TRTLLM_KBLOCK_BYTES;
            /* Eight 16-byte groups per block; a constant size, so the copy
             * is inline vector moves. */
            for (uint32_t kb = 0; kb < kbn; kb++) {
                memcpy(out, src, TRTLLM_KBLOCK_BYTES);
                out += plane;
                src += TRTLLM_KBLOCK_BYTES;
            }
        }
    }
}

static uint64_t trtllm_w13_bytes(const struct wst_expert_shape *shape)
{
    return ckpt_w13_bytes(shape);
}

static uint64_t trtllm_w2_bytes(const struct wst_expert_shape *shape)
{
    return ckpt_w2_bytes(shape);
}

static wst_status_t trtllm_load_expert(const struct wst_repack_loader *self,
                                       const struct wst_expert_shape *shape,
                                       uint32_t local, const void *gate,
                                       const void *up, const void *down,
                                       void *w13, void *w2)
{
    (void)self;
    size_t proj; /* bytes of one [I, H] projection */
    uint32_t h, i;

    if (!load_args_ok(shape, local, gate, up, down, w13, w2)) {
        return WST_ERR_INVALID;
    }
    if (trtllm_check(shape, NULL, 0) != WST_OK) {
        return WST_ERR_REPACK_SHAPE;
    }
    h = shape->hidden;
    i = shape->inter;
    proj = (size_t)i * h * 2;
    /* Interleave puts up at even rows and gate at odd ones. */
    trtllm_gather((unsigned char *)w13 + (size_t)local * 2 * proj, up, gate,
                  2 * i, h);
    trtllm_gather((unsigned char *)w2 + (size_t)local * proj, down, NULL, h, i);
    return WST_OK;
}

/* ---- built-in tables and the registry ---------------------------------- */

static const struct wst_repack_loader checkpoint_loader = {
    .name = "checkpoint",
    .check = ckpt_check,
    .w13_bytes = ckpt_w13_bytes,
    .w2_bytes = ckpt_w2_bytes,
    .load_expert = ckpt_load_expert,
    .arg = NULL,
    .load_layer_device = wst_gpu_repack_checkpoint,
};

static const struct wst_repack_loader trtllm_bf16_loader = {
    .name = "trtllm-bf16",
    .check = trtllm_check,
    .w13_bytes = trtllm_w13_bytes,
    .w2_bytes = trtllm_w2_bytes,
    .load_expert = trtllm_load_expert,
    .arg = NULL,
    .load_layer_device = wst_gpu_repack_trtllm_bf16,
};

const struct wst_repack_loader *wst_repack_loader_checkpoint(void)
{
    return &checkpoint_loader;
}

const struct wst_repack_loader *wst_repack_loader_trtllm_bf16(void)
{
    return &trtllm_bf16_loader;
}

void wst_loader_registry_init(struct wst_loader_registry *reg)
{
    memset(reg, 0, sizeof(*reg));
    reg->loaders[reg->count++] = &checkpoint_loader;
    reg->loaders[reg->count++] = &trtllm_bf16_loader;
}

wst_status_t wst_loader_registry_add(struct wst_loader_registry *reg,
                                     const struct wst_repack_loader *loader)
{
    if (reg == NULL || loader == NULL || loader->name == NULL ||
        loader->name[0] == '\0' || loader->check == NULL ||
        loader->w13_bytes == NULL || loader->w2_bytes == NULL ||
        loader->load_expert == NULL) {
        return WST_ERR_INVALID;
    }
    if (wst_loader_registry_find(reg, loader->name) != NULL) {
        return WST_ERR_INVALID;
    }
    if (reg->count >= WST_LOADER_REGISTRY_MAX) {
        return WST_ERR_TOO_LARGE;
    }
    reg->loaders[reg->count++] = loader;
    return WST_OK;
}

const struct wst_repack_loader *
wst_loader_registry_find(const struct wst_loader_registry *reg,
                         const char *name)
{
    if (reg == NULL || name == NULL) {
        return NULL;
    }
    for (uint32_t i = 0; i < reg->count; i++) {
        if (strcmp(reg->loaders[i]->name, name) == 0) {
            return reg->loaders[i];
        }
    }
    return NULL;
}
