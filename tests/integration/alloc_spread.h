/* alloc_spread.h - a model layout's regions spread over several
 * allocations ("allocations", layout_file.h), and the check of what refits
 * left in them, for the tests that serve such a layout (integration and
 * GPU).
 *
 * it_spread gives region i allocation i % n, each region after a gap of
 * IT_SPREAD_GAP bytes from the previous one of its allocation (and from the
 * start), one more gap at the end; the gaps must stay poison. The check is
 * independent of the receiver: it copies each region out of the contents
 * of its allocation into one flat buffer, as if the layout had one shm
 * object, and runs the model's own verifier (model.h) over it.
 */
#ifndef WST_IT_ALLOC_SPREAD_H
#define WST_IT_ALLOC_SPREAD_H

#include <stddef.h>
#include <stdint.h>

#include "layout_file.h"

#define IT_SPREAD_GAP 4096
#define IT_SPREAD_ALIGN 256 /* every region's offset */

/* Rewrites 'l' (regions in the top-level shm, or in none) into n >= 1
 * allocations: l->allocations (malloc'd, owned by l) named "part<k>", with
 * their bytes, kind WST_LAYOUT_ALLOC_SHM and no shm name -- the caller
 * fills in each one's kind and object. The top-level shm is dropped. 0, or
 * -1 without memory (l unchanged). */
int it_spread(struct wst_layout *l, size_t n);

/* Checks allocation contents[k] (l->allocations[k].bytes each, borrowed)
 * after a refit of 'version' with seed 'seed': every gap byte is 'poison',
 * every want holds the generator's data. 0, or -1 with the first mismatch
 * in err. */
int it_spread_check(const struct wst_layout *l, const void *const *contents,
                    uint64_t seed, uint64_t version, unsigned char poison,
                    char *err, size_t errlen);

#endif
