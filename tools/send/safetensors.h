/* safetensors.h - one safetensors file, parsed and checked against its size.
 *
 * The format (Hugging Face safetensors):
 *
 *   [ u64 N, little-endian ][ N bytes: JSON header ][ data region ........ ]
 *
 *   {"__metadata__": {"k": "v", ...},                         optional
 *    "<tensor>": {"dtype": "BF16", "shape": [4096, 11008],
 *                 "data_offsets": [begin, end]}, ...}
 *
 * Offsets count from the first byte of the data region. Nothing in the file
 * is trusted: N must fit in the file and under WST_ST_HEADER_MAX; the header
 * must be one strict, UTF-8 JSON object (trailing whitespace allowed: the
 * writers pad it with spaces) whose "__metadata__" maps strings to strings;
 * every other key is a tensor whose dtype has a wstream equivalent, whose shape
 * is at most WST_MAX_DIMS integers >= 0 with product x element size == end -
 * begin (overflow-checked), and whose [begin, end) lies in the data region
 * without overlapping another tensor's. No name may appear twice (nor
 * "__metadata__"). Bytes no tensor covers are allowed.
 *
 * Errors are written to 'err' naming the file (and the tensor), and the
 * status says what kind of problem it is:
 *   WST_ERR_IO           the file cannot be opened, read or mapped;
 *   WST_ERR_INTEGRITY    the file is malformed (truncated, bad JSON,
 *                        offsets outside the data region, shape and byte
 *                        count disagree, overlapping tensors, a name
 *                        listed twice, ...);
 *   WST_ERR_TOO_LARGE    the header is larger than WST_ST_HEADER_MAX, or
 *                        the file holds more than WST_ST_MAX_TENSORS;
 *   WST_ERR_UNSUPPORTED  valid safetensors that wstream cannot carry: a
 *                        dtype with no enum wst_dtype (BOOL, I16, U32, an
 *                        unknown name), more than WST_MAX_DIMS dimensions,
 *                        a name of WST_NAME_MAX bytes or more;
 *   WST_ERR_NO_MEMORY.
 */
#ifndef WST_SEND_SAFETENSORS_H
#define WST_SEND_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "manifest.h"
#include <wstream/status.h>

/* Limits, per file. The largest public checkpoints list about 92,000
 * tensors in all (DeepSeek-V3, 671B parameters, over 163 shards), at about
 * 120 header bytes a tensor; the limits take a whole model of that size in
 * one file with room to spare (x2.8 the tensors, 128 bytes a tensor), and
 * bound what a hostile header costs: the length field is checked before
 * the file is mapped, the tensors are counted before anything is allocated
 * for them, and each entry is then parsed on its own (st_scan.h), so an
 * accepted header costs its mapping and a few hundred bytes a tensor. */
#define WST_ST_MAX_TENSORS ((size_t)1 << 18)   /* 262,144 */
#define WST_ST_HEADER_MAX ((uint64_t)32 << 20) /* bytes of JSON header */

struct wst_st_tensor {
    char *name;             /* owned; 1..WST_NAME_MAX-1 bytes, no NUL */
    const char *file_dtype; /* the file's spelling ("BF16"); static */
    enum wst_dtype dtype;
    uint32_t ndim; /* 0..WST_MAX_DIMS, as in the file (0: a scalar) */
    uint64_t shape[WST_MAX_DIMS];
    uint64_t begin; /* data_offsets, relative to the data region */
    uint64_t end;
    /* Its first byte, inside the file's bytes; valid while the
     * struct wst_safetensors that holds it is. */
    const void *data;
};

/* One parsed file. 'tensors' is sorted by 'begin'. */
struct wst_safetensors {
    char *path;                 /* owned copy, for messages */
    const unsigned char *bytes; /* the whole file (see open and parse) */
    uint64_t size;
    int mapped; /* nonzero: 'bytes' is our mapping, unmapped at close */
    uint64_t header_len; /* N */
    size_t n_tensors;
    struct wst_st_tensor *tensors; /* owned */
    uint64_t tensor_bytes;         /* sum of end - begin */
};

/* Parses 'size' bytes at 'bytes' (borrowed: they must outlive 'out') as a
 * safetensors file called 'path' in messages. On success fills *out, which
 * the caller releases with wst_safetensors_close; on failure *out is zeroed
 * and 'err' (may be NULL) says why. */
wst_status_t wst_safetensors_parse(const char *path, const void *bytes,
                                   uint64_t size, struct wst_safetensors *out,
                                   char *err, size_t errlen);

/* Opens 'path' relative to directory 'dirfd' (AT_FDCWD: the working
 * directory; symbolic links are followed, as in a Hugging Face cache),
 * maps it read-only (MAP_PRIVATE, PROT_READ) and parses it. 'label' names
 * the file in messages (NULL: 'path'). On success *out owns the mapping. */
wst_status_t wst_safetensors_open(int dirfd, const char *path,
                                  const char *label,
                                  struct wst_safetensors *out, char *err,
                                  size_t errlen);

/* Frees the tensors and unmaps the file if open mapped it; zeroes 'f'.
 * NULL and zeroed structs are fine. */
void wst_safetensors_close(struct wst_safetensors *f);

/* The file's spelling of a wstream dtype ("BF16"), or NULL. */
const char *wst_safetensors_dtype_name(enum wst_dtype dtype);

#endif
