/* layout_file.h - the agent's layout file: what a receiver wants and where
 * its live regions are.
 *
 * The file is JSON (format 1):
 *
 *   {
 *     "format": 1,
 *     "rank": 0,
 *     "shm": "/wstream-demo-1234-r0",   optional POSIX shm object
 *     "shm_bytes": 123456,              required with "shm"
 *     "regions": [ {"name": "...", "offset": 0, "bytes": 1048576} ],
 *     "wants": [ {"tensor": "...", "dtype": "bf16", "shape": [1024, 1024],
 *                 "start": [0, 0], "stop": [512, 1024], "region": "...",
 *                 "offset": 0, "row_pitch": 0,
 *                 "expert": {"ep_rank": 3, "ep_size": 8}} ]   optional
 *   }
 *
 * With "shm", every region lives at "offset" bytes inside the shm object and
 * regions may not overlap or run past "shm_bytes". Without it the agent
 * allocates each region itself and a region's "offset" is optional (0).
 * A want's "row_pitch" is optional (0 = dense). A want's "expert" marks a
 * grouped expert tensor ([E, rows, cols], dim 0 the global expert id; see
 * struct wst_want_expert): it needs both "ep_rank" < "ep_size" (>= 1) and a
 * shape of >= 2 dims; without it the want is dense. Placement rules (E
 * divisible by ep_size, box = the rank's dim-0 range) are refused by the
 * planner, with their own statuses, not here. Unknown keys are ignored.
 * Numbers must be JSON integers in [0, INT64_MAX); at most WST_LAYOUT_MAX
 * regions and wants.
 */
#ifndef WST_LAYOUT_FILE_H
#define WST_LAYOUT_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "manifest.h"
#include <wstream/status.h>

#define WST_LAYOUT_FORMAT 1
#define WST_LAYOUT_MAX ((size_t)1 << 20) /* regions, and wants */

struct wst_layout_region {
    char name[WST_NAME_MAX];
    uint64_t offset; /* bytes into the shm object (0 without shm) */
    uint64_t bytes;
};

/* A parsed layout. 'regions' and 'wants' are malloc'd arrays owned by the
 * struct; free them with wst_layout_release. want.region is an index into
 * 'regions'; want.tensor holds name, dtype and shape; want.box comes from
 * start/stop. */
struct wst_layout {
    uint32_t rank;
    char shm[WST_NAME_MAX]; /* "" if none */
    uint64_t shm_bytes;
    size_t n_regions;
    struct wst_layout_region *regions;
    size_t n_wants;
    struct wst_want *wants;
};

/* Reads and parses the layout file at 'path'. On success fills *out, which
 * the caller then owns (release with wst_layout_release). On failure *out
 * is untouched, 'err' (may be NULL) holds a message naming the file, field
 * and entry, and the status is WST_ERR_IO (unreadable file), WST_ERR_CONFIG
 * (bad content), WST_ERR_NO_MEMORY or WST_ERR_INVALID (bad arguments). */
wst_status_t wst_layout_load(const char *path, struct wst_layout *out,
                             char *err, size_t errlen);

/* As wst_layout_load, from 'len' bytes of JSON text (need not be
 * NUL-terminated; borrowed for the call only). */
wst_status_t wst_layout_parse(const char *json_text, size_t len,
                              struct wst_layout *out, char *err, size_t errlen);

/* Writes 'l' (borrowed) to 'path' atomically: a temporary file next to it,
 * fsync'd, then renamed over 'path'. Refuses (WST_ERR_INVALID) values the
 * loader would refuse to read back: numbers >= INT64_MAX, region indices out
 * of range, unknown dtypes. WST_ERR_IO when the file cannot be written. */
wst_status_t wst_layout_save(const char *path, const struct wst_layout *l,
                             char *err, size_t errlen);

/* Frees the arrays of 'l' and zeroes it. NULL and zeroed structs are fine. */
void wst_layout_release(struct wst_layout *l);

#endif
