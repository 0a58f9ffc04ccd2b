/* model_sources.h - where wstream-model reads measured inputs from.
 *
 *  - Key/value files (wst_rm_pairs_read): the output of wstream-bench
 *    (its "wstream-bench: k=v ..." line and its "csv," header and row,
 *    that first column dropped), or any CSV with a header row and data
 *    rows: each column becomes a pair. Later pairs of the same key win,
 *    so the last row of a CSV that runs append to (wstream-demo --csv) is
 *    the one taken.
 *  - The GPU benchmark table of tests/gpu/run.sh (summary.txt or
 *    kernels.txt; wst_rm_gpu_table_read): the repack, digest and pinned
 *    copy rows.
 *  - A model's config.json (wst_rm_config_read), and its
 *    model.safetensors.index.json (wst_rm_index_read) to compare with.
 */
#ifndef WST_MODEL_SOURCES_H
#define WST_MODEL_SOURCES_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "refit_model.h"

#define WST_RM_PAIRS_MAX 256

struct wst_rm_pairs {
    size_t n;
    struct {
        char key[64];
        char value[256];
    } kv[WST_RM_PAIRS_MAX];
};

/* Adds the pairs of file 'path' to *p (which the caller zeroes first).
 * WST_ERR_IO when the file cannot be read, WST_ERR_INVALID when it holds
 * no pair at all or a CSV row with more columns than its header. */
wst_status_t wst_rm_pairs_read(const char *path, struct wst_rm_pairs *p,
                               char *err, size_t errlen);

/* The value of 'key', or NULL. */
const char *wst_rm_pairs_get(const struct wst_rm_pairs *p, const char *key);

/* What the GPU table gave; 0 where a row was missing. */
struct wst_rm_gpu_table {
    double repack_gbps; /* layer bytes per second: the slowest trtllm-bf16
                           repack row (its MB column counts read + write) */
    double digest_gbps; /* the slowest GPU digest row */
    double copy_gbps;   /* the slower pinned copy at 8 MiB chunks */
    char repack_row[128], digest_row[128];
};

wst_status_t wst_rm_gpu_table_read(const char *path, struct wst_rm_gpu_table *g,
                                   char *err, size_t errlen);

/* An architecture from a Hugging Face config.json (DeepSeek-V3, Kimi-K2,
 * Qwen3, Qwen3-MoE and Llama-like keys). */
wst_status_t wst_rm_config_read(const char *path, struct wst_rm_arch *a,
                                char *err, size_t errlen);

/* The index's tensor count and metadata.total_size (0 when absent). */
wst_status_t wst_rm_index_read(const char *path, uint64_t *tensors,
                               uint64_t *total_size, char *err, size_t errlen);

#endif
