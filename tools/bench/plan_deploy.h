/* plan_deploy.h - where a model's tensors live in a trainer and in an
 * inference engine: each trainer rank's have manifest and each engine
 * rank's want manifest, as wstream-plan-bench feeds them to the planner.
 *
 * Trainers (senders):
 *  - megatron: TP x PP x DP ranks, TP fastest, PP slowest (Megatron's
 *    default order). Stage s holds layers [s*L/pp, (s+1)*L/pp); the
 *    embeddings go with stage 0, the final norm and lm_head with the last.
 *    Column and vocab tensors are cut on dim 0 by TP, row tensors on dim 1,
 *    the rest whole; every DP replica lists its copy. Routed experts: EP
 *    within a stage, expert-TP 1 (rank ep = stage index mod ep), and each
 *    local expert is its own buffer (TEGroupedMLP's weight{i}), so a have
 *    per expert and projection: box [e, e+1) x whole.
 *  - fsdp: FSDP2 over all ranks: every dense tensor in dim-0 chunks of
 *    ceil(rows / n) (empty ones not listed); routed experts grouped
 *    [E/ep, rows, cols] per EP rank (rank / (n/ep)) and cut on dim 1 over
 *    its n/ep FSDP ranks (torchtitan's Shard(1) for experts).
 * Engine (receiver), as vLLM with --tensor-parallel-size tp and expert
 * parallelism ep (tp x data parallel): rank r is TP rank r mod tp and EP
 * rank r mod ep. TP cuts as above (MLA down-projections and norms whole);
 * routed experts are grouped wants of the linear EP range, staged. One
 * region per live parameter; fused ones (fused_qkv_a_proj, gate_up_proj)
 * take their checkpoint tensors one after the other.
 */
#ifndef WST_BENCH_PLAN_DEPLOY_H
#define WST_BENCH_PLAN_DEPLOY_H

#include "plan_model.h"

enum pd_trainer_kind { PD_MEGATRON, PD_FSDP };

struct pd_trainer {
    enum pd_trainer_kind kind;
    uint32_t n, tp, pp, ep; /* tp, pp: megatron only */
};

struct pd_engine {
    uint32_t n, tp, ep;
};

/* Checks that the layouts fit the model (divisibility of ranks, heads,
 * experts); on failure writes why to err. */
wst_status_t pd_check(const struct pm_model *m, const struct pd_trainer *t,
                      const struct pd_engine *e, char *err, size_t errlen);

/* Sender 'rank's have manifest: *haves_p (owned by the caller, free()),
 * *n_p entries. */
wst_status_t pd_sender_haves(const struct pm_model *m,
                             const struct pd_trainer *t, uint32_t rank,
                             struct wst_have **haves_p, size_t *n_p);

/* Engine 'rank's wants and regions (both owned by the caller). */
struct pd_wants {
    struct wst_want *wants;
    size_t n_wants;
    struct wst_region_desc *regions;
    size_t n_regions;
};

wst_status_t pd_receiver_wants(const struct pm_model *m,
                               const struct pd_engine *e, uint32_t rank,
                               struct pd_wants *out);

void pd_wants_free(struct pd_wants *w);

#endif
