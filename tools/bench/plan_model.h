/* plan_model.h - full-size MLA + MoE model shapes for wstream-plan-bench.
 *
 * Every checkpoint tensor of DeepSeek-V3 or Kimi-K2 (as wstream carries
 * them: routed experts grouped per projection, [E, rows, cols], DESIGN.md
 * section 2), each tagged with how tensor parallelism cuts it, so the
 * trainer and engine layouts (plan_deploy.h) can be derived from one list.
 * Shapes come from the models' config.json; the multi-token-prediction
 * layer is left out (RL trainers drop it). --layers can shorten a model for
 * the quick test; tensor shapes stay full size.
 */
#ifndef WST_BENCH_PLAN_MODEL_H
#define WST_BENCH_PLAN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "manifest.h"

/* How a tensor is cut by tensor parallelism (Megatron and vLLM agree). */
enum pm_cut {
    PM_REPLICATED, /* norms, router, MLA down-projections */
    PM_COLUMN,     /* dim 0: q_b, kv_b, gate, up */
    PM_ROW,        /* dim 1: o_proj, down */
    PM_VOCAB,      /* dim 0: embeddings, lm_head */
    PM_EXPERTS,    /* grouped routed experts: dim 0 by expert parallelism */
};

/* A live engine parameter fed by several checkpoint tensors, one after the
 * other (vLLM's fused_qkv_a_proj, gate_up_proj): 'fuse' is the index of the
 * first tensor of the group, the tensor's own index otherwise. */
struct pm_tensor {
    struct wst_tensor_desc t;
    enum pm_cut cut;
    uint32_t layer; /* UINT32_MAX for global tensors */
    size_t fuse;
};

struct pm_shape {
    const char *name;
    uint32_t layers, first_dense, experts, heads;
    uint64_t hidden, moe_inter, dense_inter, vocab;
};

struct pm_model {
    const struct pm_shape *shape;
    uint32_t layers;     /* may be fewer than shape->layers */
    struct pm_tensor *v; /* owned */
    size_t n, cap;
};

/* The shape called 'name' ("deepseek-v3", "kimi-k2"), or NULL. */
const struct pm_shape *pm_shape_find(const char *name);

/* Fills m with every tensor of the first 'layers' layers of s (0: all) and
 * the global ones. WST_ERR_NO_MEMORY leaves m empty. */
wst_status_t pm_model_build(struct pm_model *m, const struct pm_shape *s,
                            uint32_t layers);

void pm_model_free(struct pm_model *m);

#endif
