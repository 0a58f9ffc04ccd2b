/* array.h - growing a heap array by doubling.
 *
 * An array here is a pointer, a count and a capacity kept by the caller
 * (struct { T *v; size_t n, cap; }); wst_array_grow() makes room, the
 * caller stores and counts, and frees the pointer when done (then sets
 * both count and capacity back to 0).
 */
#ifndef WST_ARRAY_H
#define WST_ARRAY_H

#include <stddef.h>

#include <wstream/status.h>

/* Makes room for at least NEED elements of ELEM bytes. ARRAY_P is the
 * address of the array's pointer (a T **, NULL array allowed) and CAP_P of
 * its capacity in elements. When need > *cap_p the capacity doubles (from
 * 8) until it holds NEED and the array is reallocated; elements already
 * there are kept, new ones are not initialised. WST_ERR_NO_MEMORY, with
 * *array_p and *cap_p untouched, when out of memory or when the size would
 * overflow; WST_ERR_INVALID for elem 0. */
wst_status_t wst_array_grow(void *array_p, size_t *cap_p, size_t need,
                            size_t elem);

#endif
