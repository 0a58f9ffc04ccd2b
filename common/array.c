/* array.c - growing a heap array by doubling. */
#include "array.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

wst_status_t wst_array_grow(void *array_p, size_t *cap_p, size_t need,
                            size_t elem)
{
    size_t cap = *cap_p ? *cap_p : 8;
    void *array, *grown;

    if (elem == 0)
        return WST_ERR_INVALID;
    if (need <= *cap_p)
        return WST_OK;
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            return WST_ERR_NO_MEMORY;
        cap *= 2;
    }
    if (cap > SIZE_MAX / elem)
        return WST_ERR_NO_MEMORY;
    /* array_p points at a T *, whatever T is: copy, not cast, the pointer */
    memcpy(&array, array_p, sizeof(array));
    grown = realloc(array, cap * elem);
    if (grown == NULL)
        return WST_ERR_NO_MEMORY;
    memcpy(array_p, &grown, sizeof(grown));
    *cap_p = cap;
    return WST_OK;
}
