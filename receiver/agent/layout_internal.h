/* layout_internal.h - what the layout file's pieces share (private).
 *
 * The layout file module (layout_file.h is its public header) is cut by
 * purpose: layout_fields.c reads checked JSON values, layout_parse.c and
 * layout_parse_experts.c turn a document into a struct wst_layout,
 * layout_allocs.c holds the allocations (their list, "allocations" and
 * its rules), layout_rules.c the other checks that parse and save both
 * apply, and
 * layout_save.c writes a struct wst_layout back out. Every function here
 * reports a refusal through wst_layout_fail, which writes the message into
 * the caller's buffer and returns the status.
 */
#ifndef WST_LAYOUT_INTERNAL_H
#define WST_LAYOUT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "layout_file.h"
#include <wstream/status.h>

struct json_object;

/* Where a refusal's message goes: 'err' ('errlen' bytes), borrowed from the
 * caller of wst_layout_parse, _load or _save; NULL err: no message. */
struct parse_ctx {
    char *err;
    size_t errlen;
};

/* Formats the message into c->err (when there is one); returns 'status'. */
wst_status_t wst_layout_fail(struct parse_ctx *c, wst_status_t status,
                             const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- field readers (layout_fields.c) ------------------------------------ */

/* Reads a JSON integer in [0, INT64_MAX) from 'v'. */
wst_status_t wst_layout_read_u64(struct parse_ctx *c, struct json_object *v,
                                 const char *where, const char *key,
                                 uint64_t *out);

/* Reads key 'key' of object 'obj' as an integer. A missing key is an error
 * when 'required', otherwise *out is left alone. */
wst_status_t wst_layout_get_u64(struct parse_ctx *c, struct json_object *obj,
                                const char *where, const char *key,
                                int required, uint64_t *out);

/* Copies string field 'key' into 'dst' ('size' bytes): non-empty, no
 * embedded NUL, fits with its terminator. */
wst_status_t wst_layout_get_string(struct parse_ctx *c, struct json_object *obj,
                                   const char *where, const char *key,
                                   char *dst, size_t size);

/* wst_layout_get_string into a WST_NAME_MAX buffer: tensor, region and dtype
 * names. */
wst_status_t wst_layout_get_name(struct parse_ctx *c, struct json_object *obj,
                                 const char *where, const char *key, char *dst);

/* wst_layout_get_u64 for a 32-bit field: the value must also fit in
 * uint32_t. */
wst_status_t wst_layout_get_u32(struct parse_ctx *c, struct json_object *obj,
                                const char *where, const char *key,
                                int required, uint32_t *out);

/* Gets array field 'key' with at most 'max' elements. */
wst_status_t wst_layout_get_array(struct parse_ctx *c, struct json_object *obj,
                                  const char *where, const char *key,
                                  size_t max, struct json_object **arr_p,
                                  size_t *n_p);

/* Reads an integer array field of exactly 'n' entries when n != 0, or of
 * 1..WST_MAX_DIMS entries (stored in *n_p) when n == 0. */
wst_status_t wst_layout_get_dims(struct parse_ctx *c, struct json_object *obj,
                                 const char *where, const char *key, uint32_t n,
                                 uint64_t *dims, uint32_t *n_p);

/* The "cuda_ipc" string 'v': exactly WST_LAYOUT_CUDA_IPC_HEX lowercase hex
 * digits, decoded into 'handle' (layout_parse.c). */
wst_status_t
wst_layout_read_ipc(struct parse_ctx *c, struct json_object *v,
                    const char *where,
                    unsigned char handle[WST_LAYOUT_CUDA_IPC_BYTES]);

/* ---- allocations (layout_allocs.c) -------------------------------------- */

/* The top-level "allocations": refused next to "shm" or "cuda_ipc" (parse
 * them first). Absent: *by_name_p NULL. Present: l->allocations filled
 * (NULL when empty), checked, and *by_name_p a malloc'd name-sorted index
 * of them (the caller frees it) for wst_layout_find_name. */
wst_status_t wst_layout_parse_allocs(struct parse_ctx *c,
                                     struct json_object *root,
                                     struct wst_layout *l, size_t **by_name_p);

/* One entry's rules: name, kind, shm name, bytes, device. The name and shm
 * name checks only fire on save: the parser cannot produce those values. */
wst_status_t wst_layout_check_alloc(struct parse_ctx *c, wst_status_t bad,
                                    const char *where,
                                    const struct wst_layout_allocation *a);

/* The rules across entries: names unique, no shm object or handle twice,
 * every cuda_ipc entry on one device. 'by_name' (n entries) gets the
 * name-sorted index. */
wst_status_t wst_layout_check_allocs(struct parse_ctx *c, wst_status_t bad,
                                     const struct wst_layout_allocation *x,
                                     size_t n, size_t *by_name);

/* Bytes of entry k of wst_layout_alloc_count's list, and how a message
 * names it: with 'limit', the field that bounds its regions ("shm_bytes",
 * "cuda_bytes", "allocation "x" bytes"), else the block itself ("the
 * shm", "the cuda_ipc allocation", "allocation "x""). */
uint64_t wst_layout_alloc_bytes(const struct wst_layout *l, size_t k);
void wst_layout_alloc_label(const struct wst_layout *l, size_t k, int limit,
                            char *buf, size_t len);

/* ---- rules (layout_rules.c) --------------------------------------------- */

/* Index of the entry named 'name' among n entries of 'stride' bytes at
 * 'items', whose name (a NUL-terminated char array) is their first member
 * (regions, allocations), through their name-sorted index 'by_name'; or
 * SIZE_MAX. */
size_t wst_layout_find_name(const void *items, size_t stride,
                            const size_t *by_name, size_t n, const char *name);

/* Duplicate names, placement inside each region's allocation (the shm,
 * the cuda_ipc allocation or an entry of "allocations") and overlaps
 * within one allocation. 'by_name' gets the name-sorted index (n entries)
 * for want lookups. */
wst_status_t wst_layout_check_regions(struct parse_ctx *c,
                                      const struct wst_layout *l,
                                      size_t *by_name);

/* Every dim of the shape is nonzero and the box lies inside it. */
wst_status_t wst_layout_want_box_check(struct parse_ctx *c, const char *where,
                                       const struct wst_want *w);

/* wst_want_check against the regions, with a message that says why. */
wst_status_t wst_layout_check_want(struct parse_ctx *c, size_t i,
                                   const struct wst_want *w,
                                   const struct wst_region_desc *descs,
                                   size_t n_regions);

/* "expert_ids" must hold one id per local expert: experts/ep_size of them.
 * Needs ep_size != 0 (wst_layout_check_experts runs first). */
wst_status_t wst_layout_check_ids_count(struct parse_ctx *c, wst_status_t bad,
                                        const char *where,
                                        const struct wst_layout_experts *e,
                                        size_t n);

/* 'id' is 64-bit so the parser can name a value that fits no uint32_t. */
wst_status_t wst_layout_check_id(struct parse_ctx *c, wst_status_t bad,
                                 const char *where,
                                 const struct wst_layout_experts *e, uint32_t i,
                                 uint64_t id);

/* Everything about one entry except duplicate layers (wst_layout_check_layers).
 * The loader, dtype and id-pointer checks only fire on save: the parser cannot
 * produce those values. */
wst_status_t wst_layout_check_experts(struct parse_ctx *c, wst_status_t bad,
                                      const char *where,
                                      const struct wst_layout_region *regions,
                                      size_t n_regions,
                                      const struct wst_layout_experts *e);

/* At most one entry per layer, checked on a sorted index (2^20 entries). */
wst_status_t wst_layout_check_layers(struct parse_ctx *c, wst_status_t bad,
                                     const struct wst_layout_experts *x,
                                     size_t n);

/* ---- "experts" (layout_parse_experts.c) --------------------------------- */

/* The optional top-level "experts". An absent or empty array leaves
 * l->experts NULL. */
wst_status_t wst_layout_parse_experts(struct parse_ctx *c,
                                      struct json_object *root,
                                      struct wst_layout *l,
                                      const size_t *by_name);

#endif
