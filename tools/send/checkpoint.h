/* checkpoint.h - a checkpoint on disk: one safetensors file, or the shards
 * a Hugging Face index names.
 *
 * What wst_checkpoint_open accepts:
 *   - a directory: its model.safetensors.index.json, or else its
 *     model.safetensors;
 *   - a file whose name ends in ".json": an index; its shards are files in
 *     the index's directory;
 *   - any other file: one safetensors file.
 *
 * The index is {"metadata": {...}, "weight_map": {"<tensor>": "<shard>"}}.
 * Every shard it names must be a plain file name (no '/', not "." or "..":
 * nothing outside the directory) of a regular file (a symbolic link to one
 * is fine: Hugging Face caches are made of them); every tensor it lists
 * must be in the shard it names; every tensor of every shard must be listed
 * under that shard; no tensor may be in two shards. Shards the index does
 * not name are not read. Each file is checked as safetensors.h describes.
 *
 * Errors name the file and the tensor, with the statuses of safetensors.h;
 * an inconsistent index is WST_ERR_INTEGRITY, a missing shard WST_ERR_IO.
 */
#ifndef WST_SEND_CHECKPOINT_H
#define WST_SEND_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"
#include <wstream/status.h>

#define WST_CHECKPOINT_INDEX_MAX ((uint64_t)100 << 20) /* bytes of index */
#define WST_CHECKPOINT_MAX_FILES ((size_t)100000)
/* In all the shards: a sender's have manifest carries at most this many
 * (WST_MAX_HAVES in proto/codec.h), so more could never be sent. Counted
 * as the shards are opened. */
#define WST_CHECKPOINT_MAX_TENSORS ((size_t)1 << 20)

struct wst_checkpoint {
    char *index; /* owned: the index file read, or NULL for one file */
    size_t n_files;
    struct wst_safetensors *files; /* owned, with their mappings */
    size_t n_tensors;
    /* owned array of pointers borrowed from 'files': file by file, each in
     * the order of its data */
    const struct wst_st_tensor **tensors;
    uint64_t bytes; /* every tensor's bytes */
};

/* Opens, maps and checks the checkpoint at 'path' (borrowed for the call).
 * On success fills *out, which the caller releases with
 * wst_checkpoint_close; on failure *out is zeroed and 'err' says why. */
wst_status_t wst_checkpoint_open(const char *path, struct wst_checkpoint *out,
                                 char *err, size_t errlen);

/* Unmaps every file and frees everything; zeroes 'c'. NULL is fine. */
void wst_checkpoint_close(struct wst_checkpoint *c);

#endif
