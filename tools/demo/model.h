/* model.h - synthetic models for the demo and tests: checkpoint tensors,
 * engine (receiver) layouts, trainer (sender) shards, deterministic data and
 * an independent verifier.
 *
 * Data is a pure function of (seed, tensor name, version, global flat element
 * index), so any process can fill any shard and any receiver can check any
 * byte without talking to anyone. Layouts follow REFIT_LAYOUTS.md sections 1,
 * 2 and 5; the verifier reads only the layout, never the planner.
 */
#ifndef WST_MODEL_H
#define WST_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "layout_file.h"
#include "manifest.h"
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
    uint32_t dense_cols; /* "dense:<MiB>" only: columns of its [rows, cols]
                          * tensors; 0 for the transformer presets */
    size_t n_tensors;
    struct wst_tensor_desc *tensors; /* owned, malloc'd */
};

/* Builds preset 'name' ("tiny", "qwen3-30b-a3b" or "dense:<MiB>") with
 * 'n_layers' layers (0 = the preset's default; 4 for dense). "dense:<MiB>"
 * is a sized synthetic model for benchmarks: two bf16 [rows, 4096] tensors
 * per layer ("model.layers.<l>.dense.w<0|1>.weight") totalling exactly MiB
 * mebibytes (rows spread as evenly as possible, the first tensors taking the
 * remainder); its engine layout splits every tensor on dim 0 over the TP
 * ranks (ceil chunks), one region per tensor. On success *m owns its tensor
 * array (release with wst_model_release); on failure *m is untouched and 'err'
 * says why (WST_ERR_INVALID for an unknown preset). */
wst_status_t wst_model_preset(const char *name, uint32_t n_layers,
                              struct wst_model *m, char *err, size_t errlen);

/* Frees the tensor array and zeroes *m. NULL is fine. */
void wst_model_release(struct wst_model *m);

/* Total checkpoint bytes of all tensors. */
uint64_t wst_model_bytes(const struct wst_model *m);

/* Engine layout of TP rank 'tp_rank' of 'tp' (REFIT_LAYOUTS.md section 2):
 * one region per live parameter, back to back at 64-byte aligned offsets in
 * one shm of out->shm_bytes. out->shm is left "" for the caller to name.
 * On success *out owns its arrays (wst_layout_release); on failure it is
 * untouched: WST_ERR_UNSUPPORTED_LAYOUT when tp does not divide the heads
 * (or the kv rule), hidden or inter; WST_ERR_INVALID for tp_rank >= tp. */
wst_status_t wst_model_engine_layout(const struct wst_model *m,
                                     uint32_t tp_rank, uint32_t tp,
                                     struct wst_layout *out, char *err,
                                     size_t errlen);

/* FSDP shards of rank 'rank' of 'world': one entry per tensor, in tensor
 * order. N-D tensors split on dim 0 in ceil(len/world) chunks; 1-D tensors
 * as flat shards, ceil-chunked over the elements. Trailing ranks may get
 * empty boxes (still listed). On success *haves_p is a malloc'd array of
 * *n_p entries the caller frees; WST_ERR_INVALID for rank >= world. */
wst_status_t wst_model_trainer_shards(const struct wst_model *m, uint32_t rank,
                                      uint32_t world, struct wst_have **haves_p,
                                      size_t *n_p);

/* Bytes of the shard buffer for 'h': box elements times the element size. */
uint64_t wst_model_shard_bytes(const struct wst_have *h);

/* Fills 'buf' (wst_model_shard_bytes(h) bytes: dense row-major box, or the
 * flat range) with the data of (seed, h->tensor.name, version). */
void wst_model_fill_shard(const struct wst_have *h, uint64_t seed,
                          uint64_t version, void *buf);

/* Checks every element of every want of 'l' at shm_base + region offset +
 * want offset (row-major, honouring row_pitch) against the generator.
 * 'shm_base' is borrowed: the mapping holding all regions. On the first
 * mismatch returns WST_ERR_INTEGRITY with the tensor, element index and
 * expected/got bytes in 'err'. *bytes_checked_p (may be NULL) gets the bytes
 * compared. */
wst_status_t wst_model_verify(const struct wst_layout *l, const void *shm_base,
                              uint64_t seed, uint64_t version,
                              uint64_t *bytes_checked_p, char *err,
                              size_t errlen);

#endif
