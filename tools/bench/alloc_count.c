/* alloc_count.c - the wrapped allocator calls (alloc_count.h). */
#include "alloc_count.h"

#include <malloc.h>
#include <stddef.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);

/* Single-threaded bench: plain counters. */
static int64_t in_use, peak;

static void count(void *p, int sign)
{
    if (p == NULL)
        return;
    in_use += sign * (int64_t)malloc_usable_size(p);
    if (in_use > peak)
        peak = in_use;
}

void *__wrap_malloc(size_t n)
{
    void *p = __real_malloc(n);

    count(p, 1);
    return p;
}

void *__wrap_calloc(size_t n, size_t size)
{
    void *p = __real_calloc(n, size);

    count(p, 1);
    return p;
}

void *__wrap_realloc(void *p, size_t n)
{
    int64_t before = p != NULL ? (int64_t)malloc_usable_size(p) : 0;
    void *q = __real_realloc(p, n);

    if (q == NULL) {
        if (n == 0)
            in_use -= before; /* glibc freed p */
        return NULL;          /* otherwise p is untouched */
    }
    in_use -= before;
    count(q, 1);
    return q;
}

void __wrap_free(void *p)
{
    count(p, -1);
    __real_free(p);
}

int64_t ac_in_use(void)
{
    return in_use;
}

void ac_peak_reset(void)
{
    peak = in_use;
}

int64_t ac_peak(void)
{
    return peak;
}
