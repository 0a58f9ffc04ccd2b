/* check_repack.c - the built-in loaders' GPU paths against their CPU twins,
 * and the repack benchmark.
 *
 * For each shape: random staged experts (gate, up, down of L experts) on the
 * host, the CPU twin's w13/w2 from poisoned buffers, the GPU's from poisoned
 * device buffers, compared byte for byte. An offset of 2 bytes on every
 * device pointer takes the kernel's unaligned path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "gpu_check.h"
#include "repack.h"

struct layer_bufs {
    size_t proj, w13, w2; /* bytes */
    unsigned char *h_gate, *h_up, *h_down, *h_w13, *h_w2, *g_w13, *g_w2;
    unsigned char *d_base[5]; /* gate, up, down, w13, w2 allocations */
};

static void bufs_free(struct layer_bufs *b)
{
    free(b->h_gate), free(b->h_up), free(b->h_down);
    free(b->h_w13), free(b->h_w2), free(b->g_w13), free(b->g_w2);
    for (int i = 0; i < 5; i++)
        wst_gpu_free(b->d_base[i]);
    memset(b, 0, sizeof(*b));
}

static int bufs_alloc(struct gcheck *g, struct layer_bufs *b,
                      const struct wst_expert_shape *sh)
{
    size_t es = wst_dtype_size(sh->dtype);
    size_t sizes[5];

    memset(b, 0, sizeof(*b));
    b->proj = (size_t)sh->inter * sh->hidden * es;
    b->w13 = 2 * b->proj * sh->n_local;
    b->w2 = b->proj * sh->n_local;
    sizes[0] = sizes[1] = sizes[2] = b->w2;
    sizes[3] = b->w13;
    sizes[4] = b->w2;
    b->h_gate = malloc(b->w2), b->h_up = malloc(b->w2);
    b->h_down = malloc(b->w2);
    b->h_w13 = malloc(b->w13), b->h_w2 = malloc(b->w2);
    b->g_w13 = malloc(b->w13), b->g_w2 = malloc(b->w2);
    if (!b->h_gate || !b->h_up || !b->h_down || !b->h_w13 || !b->h_w2 ||
        !b->g_w13 || !b->g_w2)
        return -1;
    for (int i = 0; i < 5; i++) /* +16: room for the unaligned offset */
        if (wst_gpu_malloc(g->log, sizes[i] + 16, (void **)&b->d_base[i]) !=
            WST_OK)
            return -1;
    gcheck_fill_random(g, b->h_gate, b->w2);
    gcheck_fill_random(g, b->h_up, b->w2);
    gcheck_fill_random(g, b->h_down, b->w2);
    return 0;
}

/* The CPU twin, expert by expert, into poisoned host buffers. */
static wst_status_t cpu_layer(const struct wst_repack_loader *ld,
                              const struct wst_expert_shape *sh,
                              struct layer_bufs *b)
{
    memset(b->h_w13, GCHECK_POISON, b->w13);
    memset(b->h_w2, GCHECK_POISON, b->w2);
    for (uint32_t e = 0; e < sh->n_local; e++) {
        wst_status_t st = ld->load_expert(
            ld, sh, e, b->h_gate + e * b->proj, b->h_up + e * b->proj,
            b->h_down + e * b->proj, b->h_w13, b->h_w2);
        if (st != WST_OK)
            return st;
    }
    return WST_OK;
}

static void check_one(struct gcheck *g, const struct wst_repack_loader *ld,
                      const char *label, struct wst_expert_shape sh,
                      size_t offset)
{
    struct layer_bufs b;
    char name[128], err[256] = "";
    unsigned char *d[5];
    wst_status_t st = WST_ERR_NO_MEMORY;

    snprintf(name, sizeof(name), "repack %s %s L=%u H=%u I=%u%s", ld->name,
             label, sh.n_local, sh.hidden, sh.inter,
             offset ? " unaligned" : "");
    if (bufs_alloc(g, &b, &sh) != 0)
        goto out;
    for (int i = 0; i < 5; i++)
        d[i] = b.d_base[i] + offset;
    st = cpu_layer(ld, &sh, &b);
    if (st != WST_OK)
        goto out;
    if ((st = wst_gpu_copy(g->log, d[0], b.h_gate, b.w2)) != WST_OK ||
        (st = wst_gpu_copy(g->log, d[1], b.h_up, b.w2)) != WST_OK ||
        (st = wst_gpu_copy(g->log, d[2], b.h_down, b.w2)) != WST_OK ||
        (st = wst_gpu_memset(g->log, d[3], GCHECK_POISON, b.w13)) != WST_OK ||
        (st = wst_gpu_memset(g->log, d[4], GCHECK_POISON, b.w2)) != WST_OK)
        goto out;
    st = ld->load_layer_device(ld, &sh, d[0], d[1], d[2], d[3], d[4], g->stream,
                               err, sizeof(err));
    if (st == WST_OK)
        st = wst_gpu_stream_sync(g->log, g->stream);
    if (st == WST_OK &&
        (st = wst_gpu_copy(g->log, b.g_w13, d[3], b.w13)) == WST_OK)
        st = wst_gpu_copy(g->log, b.g_w2, d[4], b.w2);
out:
    if (st != WST_OK) {
        gcheck_result(g, 0, name, "status %s %s", wst_status_name(st), err);
    } else {
        int same13 = memcmp(b.g_w13, b.h_w13, b.w13) == 0;
        int same2 = memcmp(b.g_w2, b.h_w2, b.w2) == 0;
        gcheck_result(g, same13 && same2, name,
                      "w13 %zu B %s, w2 %zu B %s vs the CPU twin", b.w13,
                      same13 ? "identical" : "DIFFER", b.w2,
                      same2 ? "identical" : "DIFFER");
    }
    bufs_free(&b);
}

/* Shapes: a small one, Qwen3-30B-A3B at ep=8 (E=128, H=2048, I=768: 151 MB
 * per layer per rank) and DeepSeek-V3 at ep=32 (E=256, H=7168, I=2048). */
static const struct {
    const char *label;
    struct wst_expert_shape shape;
} shapes[] = {
    {"small", {2, 128, 128, WST_DTYPE_BF16}},
    {"qwen3-30b-a3b ep8", {16, 2048, 768, WST_DTYPE_BF16}},
    {"deepseek-v3 ep32", {8, 7168, 2048, WST_DTYPE_BF16}},
};

void check_repack(struct gcheck *g)
{
    const struct wst_repack_loader *loaders[2] = {
        wst_repack_loader_trtllm_bf16(), wst_repack_loader_checkpoint()};

    for (int l = 0; l < 2; l++)
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
            check_one(g, loaders[l], shapes[s].label, shapes[s].shape, 0);
    check_one(g, loaders[0], "small", shapes[0].shape, 2);
    check_one(g, loaders[0], "qwen3-30b-a3b ep8", shapes[1].shape, 2);
    check_one(g, loaders[1], "f32",
              (struct wst_expert_shape){3, 96, 40, WST_DTYPE_F32}, 0);
}

struct repack_arg {
    const struct wst_repack_loader *ld;
    struct wst_expert_shape shape;
    struct layer_bufs b;
};

static int run_repack(void *arg, wst_gpu_stream_t stream)
{
    struct repack_arg *a = arg;
    unsigned char **d = a->b.d_base;

    return a->ld->load_layer_device(a->ld, &a->shape, d[0], d[1], d[2], d[3],
                                    d[4], stream, NULL, 0) != WST_OK;
}

void bench_repack(struct gcheck *g, double copy_gbs)
{
    const struct wst_repack_loader *loaders[2] = {
        wst_repack_loader_trtllm_bf16(), wst_repack_loader_checkpoint()};

    for (size_t s = 1; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        for (int l = 0; l < 2; l++) {
            struct repack_arg a = {.ld = loaders[l], .shape = shapes[s].shape};
            char name[128];
            if (bufs_alloc(g, &a.b, &a.shape) != 0) {
                bufs_free(&a.b);
                continue;
            }
            wst_gpu_copy(g->log, a.b.d_base[0], a.b.h_gate, a.b.w2);
            wst_gpu_copy(g->log, a.b.d_base[1], a.b.h_up, a.b.w2);
            wst_gpu_copy(g->log, a.b.d_base[2], a.b.h_down, a.b.w2);
            double ms = gbench_median_ms(g, run_repack, &a, 5, 50);
            double layer = (double)(a.b.w13 + a.b.w2);
            snprintf(name, sizeof(name), "repack %s, %s layer", a.ld->name,
                     shapes[s].label);
            gbench_row(name, 2 * layer, ms, copy_gbs);
            if (l == 0) {
                /* The same layer's bytes over one 400 Gb/s NIC: the repack
                 * must hide behind this. */
                snprintf(name, sizeof(name), "  %s layer at 50 GB/s (computed)",
                         shapes[s].label);
                gbench_row(name, layer, layer / 50e9 * 1e3, 0);
            }
            bufs_free(&a.b);
        }
    }
}
