/* model.h - synthetic models for the demo and tests: checkpoint tensors,
 * engine (receiver) layouts, trainer (sender) shards, deterministic data and
 * an independent verifier.
 *
 * Data is a pure function of (seed, tensor name, version, global flat element
 * index), so any process can fill any shard and any receiver can check any
 * byte without talking to anyone. Layouts follow REFIT_LAYOUTS.md sections 1,
 * 2 and 5; the verifier reads only the layout, never the planner, and
 * computes what each MoE loader must have written on its own, never through
 * kernels/.
 */
#ifndef WST_MODEL_H
#define WST_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "layout_file.h"
#include "manifest.h"
#include <wstream/sender.h>
#include <wstream/status.h>

struct wst_model {
    char preset[32];
    uint32_t hidden;
    uint32_t inter; /* dense MLP intermediate; 0 = no dense MLP */
    uint32_t n_layers;
    uint32_t vocab;
    uint32_t heads; /* query heads */
    uint32_t kv_heads;
    uint32_t head_dim;
    uint32_t n_experts;  /* router rows (mlp.gate.weight); 0 = no router */
    uint32_t moe_inter;  /* I per routed expert; 0 = no routed experts */
    uint32_t dense_cols; /* "dense:<MiB>" only: columns of its [rows, cols]
                          * tensors; 0 for the transformer presets */
    /* Multi-head latent attention (DeepSeek-V3) when kv_lora != 0: the
     * attention tensors are q_a_proj [q_lora, H], q_a_layernorm [q_lora],
     * q_b_proj [heads*(qk_nope+qk_rope), q_lora], kv_a_proj_with_mqa
     * [kv_lora+qk_rope, H], kv_a_layernorm [kv_lora], kv_b_proj
     * [heads*(qk_nope+v_head), kv_lora], o_proj [H, heads*v_head]; no
     * k/v/q_norm. head_dim and kv_heads are then unused. */
    uint32_t q_lora, kv_lora, qk_nope, qk_rope, v_head;
    uint32_t dense_layers; /* first layers with the dense MLP (inter) and
                            * no experts; 0: every layer as the preset */
    uint32_t shared_inter; /* a shared expert (mlp.shared_experts.*) of
                            * this intermediate in MoE layers; 0: none.
                            * MLA presets also carry the fp32 router bias
                            * mlp.gate.e_score_correction_bias [E]. */
    size_t n_tensors;
    struct wst_tensor_desc *tensors; /* owned, malloc'd */
};

/* Builds preset 'name' ("tiny", "tiny-moe", "qwen3-30b-a3b",
 * "deepseek-v3-narrow" or
 * "dense:<MiB>") with 'n_layers' layers (0 = the preset's default; 4 for
 * dense). Presets with moe_inter != 0 ("tiny-moe": H=1024, I=256, E=16, no
 * dense MLP; "qwen3-30b-a3b": I=768, E=128) add, after each layer's router,
 * three grouped bf16 expert tensors "model.layers.<l>.mlp.experts.<proj>.
 * weight", proj gate_proj and up_proj [E, I, H], then down_proj [E, H, I];
 * dim 0 is the global expert id. "dense:<MiB>"
 * is a sized synthetic model for benchmarks: two bf16 [rows, 4096] tensors
 * per layer ("model.layers.<l>.dense.w<0|1>.weight") totalling exactly MiB
 * mebibytes (rows spread as evenly as possible, the first tensors taking the
 * remainder); its engine layout splits every tensor on dim 0 over the TP
 * ranks (ceil chunks), one region per tensor. On success *m owns its tensor
 * array (release with wst_model_release); on failure *m is untouched and 'err'
 * says why (WST_ERR_INVALID for an unknown preset). */
/* "deepseek-v3-narrow" is DeepSeek-V3 with every tensor name and count
 * kept and the widths cut: 61 layers, the first 3 with a dense MLP, 58
 * with 256 routed experts, a shared expert, the router and its fp32 bias;
 * MLA with 128 heads. Widths: H 64, q_lora 48, kv_lora 32, qk_nope 8,
 * qk_rope 4, v_head 8, dense I 384, expert and shared I 16, vocab 2020
 * (7168, 1536, 512, 128, 64, 128, 18432, 2048 and 129280 in the real
 * model): 1025 tensors, about 117 MB. Its experts are narrower than the
 * trtllm-bf16 loader's 64-element blocks: use the checkpoint loader. */
wst_status_t wst_model_preset(const char *name, uint32_t n_layers,
                              struct wst_model *m, char *err, size_t errlen);

/* wst_model_preset with the routed experts per MoE layer set to
 * 'n_experts' (0: the preset's); WST_ERR_INVALID for a preset without
 * routed experts. */
wst_status_t wst_model_preset_experts(const char *name, uint32_t n_layers,
                                      uint32_t n_experts, struct wst_model *m,
                                      char *err, size_t errlen);

/* Frees the tensor array and zeroes *m. NULL is fine. */
void wst_model_release(struct wst_model *m);

/* Total checkpoint bytes of all tensors. */
uint64_t wst_model_bytes(const struct wst_model *m);

/* How the engine holds routed experts (wst_model_engine_layout_moe). A
 * zeroed struct, or NULL, is the default: loader "checkpoint", linear expert
 * parallelism over the TP ranks. */
struct wst_moe_options {
    const char *loader; /* "checkpoint" (NULL = this) or "trtllm-bf16" */
    int round_robin;    /* expert_ids: rank r holds r, r+ep, r+2ep, ... (the
                         * receiver refuses it) */
    int shard_inter;    /* experts TP-sharded on the intermediate dim instead
                         * of EP (the receiver refuses it) */
};

/* Engine layout of TP rank 'tp_rank' of 'tp' (REFIT_LAYOUTS.md section 2):
 * one region per live parameter, back to back at 64-byte aligned offsets in
 * one shm of out->shm_bytes. out->shm is left "" for the caller to name.
 *
 * Each MoE layer (moe_inter != 0) gets two more regions after its router,
 * "model.layers.<l>.mlp.experts.w13_weight" (L*2I*H bf16) and "...w2_weight"
 * (L*H*I), and one out->experts entry pointing at them (offsets 0) with
 * ep_rank = tp_rank, ep_size = tp, L = ceil(E/tp) (the receiver refuses
 * E % tp != 0 itself, at plan time); the expert tensors get no wants, the
 * receiver stages them itself. opt->round_robin adds a malloc'd expert_ids
 * [r, r+tp, ...] (ids < E); opt->shard_inter makes ep 0 of 1, inter_tp
 * tp_rank of tp, regions for E experts of ceil(I/tp). 'opt' (may be NULL) is
 * borrowed for the call. Dense presets ("dense:<MiB>") ignore it.
 *
 * On success *out owns its arrays, experts' expert_ids included
 * (wst_layout_release); on failure it is untouched: WST_ERR_UNSUPPORTED_LAYOUT
 * when tp does not divide the heads (or the kv rule), hidden or a nonzero
 * dense inter; WST_ERR_INVALID for tp_rank >= tp, an unknown loader or both
 * round_robin and shard_inter; WST_ERR_NO_MEMORY. */
wst_status_t wst_model_engine_layout_moe(const struct wst_model *m,
                                         uint32_t tp_rank, uint32_t tp,
                                         const struct wst_moe_options *opt,
                                         struct wst_layout *out, char *err,
                                         size_t errlen);

/* wst_model_engine_layout_moe with the default options (opt NULL). */
wst_status_t wst_model_engine_layout(const struct wst_model *m,
                                     uint32_t tp_rank, uint32_t tp,
                                     struct wst_layout *out, char *err,
                                     size_t errlen);

/* FSDP shards of rank 'rank' of 'world': one entry per tensor, in tensor
 * order. N-D tensors split on dim 0 in ceil(len/world) chunks, every other
 * dim whole (for grouped expert tensors that is trainer EP: a range of
 * global experts); 1-D tensors as flat shards, ceil-chunked over the
 * elements. Trailing ranks may get empty boxes (still listed). On success
 * *haves_p is a malloc'd array of *n_p entries the caller frees;
 * WST_ERR_INVALID for rank >= world. */
wst_status_t wst_model_trainer_shards(const struct wst_model *m, uint32_t rank,
                                      uint32_t world, struct wst_have **haves_p,
                                      size_t *n_p);

/* Megatron-style trainer shards of rank 'rank' of 'world' with tensor
 * parallelism 'tp' (dividing world; data-parallel replicas world/tp):
 * grouped expert tensors by EP over all 'world' ranks (dim-0 ceil chunks,
 * as above); column-parallel tensors (q/k/v_proj, q_b_proj, kv_b_proj,
 * gate_proj, up_proj, embed_tokens, lm_head, dense:<MiB>'s) split on dim 0
 * and row-parallel ones (o_proj, down_proj) on dim 1 over the tp ranks
 * (tp rank = rank % tp, ceil chunks); every other tensor (norms, router,
 * q_a_proj, kv_a_proj_with_mqa) whole. Each piece of a split tensor is
 * thus held by world/tp ranks at once and a whole one by every rank, as
 * trainers hold them. tp 0 is
 * wst_model_trainer_shards (FSDP). Output and errors as there, and
 * WST_ERR_INVALID when tp does not divide world. */
wst_status_t wst_model_trainer_shards_tp(const struct wst_model *m,
                                         uint32_t rank, uint32_t world,
                                         uint32_t tp, struct wst_have **haves_p,
                                         size_t *n_p);

/* The sender's description of 'h' held in host memory at 'data' (both
 * borrowed by the result, which wst_sender_register copies). */
struct wst_shard wst_model_shard(const struct wst_have *h, const void *data);

/* Bytes of the shard buffer for 'h': box elements times the element size. */
uint64_t wst_model_shard_bytes(const struct wst_have *h);

/* Fills 'buf' (wst_model_shard_bytes(h) bytes: dense row-major box of any
 * rank, or the flat range) with the data of (seed, h->tensor.name, version).
 * Grouped expert tensors carry the expert tag (model.c) in each element's
 * high byte. */
void wst_model_fill_shard(const struct wst_have *h, uint64_t seed,
                          uint64_t version, void *buf);

/* Checks every element of every want of 'l' at shm_base + region offset +
 * want offset (row-major, honouring row_pitch) against the generator, then
 * every 'experts' entry's live w13 and w2 against what its loader
 * ("checkpoint" or "trtllm-bf16") must have made of the generator's grouped
 * expert tensors for global experts [ep_rank*L, (ep_rank+1)*L), L =
 * E/ep_size. Entries the receiver refuses (a non-linear expert_ids,
 * inter_tp size > 1, ep_size not dividing E) are never written and are
 * skipped. 'shm_base' is borrowed: the mapping holding all regions. On the
 * first mismatch returns WST_ERR_INTEGRITY with, in 'err', the tensor,
 * element index and expected/got bytes; for experts also the live buffer,
 * the local and global expert and what the got value's tag says it came
 * from. WST_ERR_INVALID for a malformed entry, an unknown loader or a shape
 * its layout cannot hold. *bytes_checked_p (may be NULL) gets the bytes
 * compared. */
wst_status_t wst_model_verify(const struct wst_layout *l, const void *shm_base,
                              uint64_t seed, uint64_t version,
                              uint64_t *bytes_checked_p, char *err,
                              size_t errlen);

#endif
