/* planner_internal.h - what planner.c and plan_index.c share: the
 * planner's state while one plan is built, and the few functions one file
 * calls in the other. Not installed; nothing outside the planner includes
 * it. Every pointer in struct planner is owned by the planner for the
 * duration of wst_plan_build (in, lg and err are the caller's, borrowed).
 */
#ifndef WST_PLANNER_INTERNAL_H
#define WST_PLANNER_INTERNAL_H

#include "planner.h"

#include <stddef.h>
#include <stdint.h>

struct layout {
    uint64_t base; /* elements; may wrap around (flat haves) */
    uint64_t origin[WST_MAX_DIMS];
    uint64_t stride[WST_MAX_DIMS]; /* elements */
};

struct sub_have {
    struct wst_box box;
    struct layout lay;
};

/* A have, with its dim-0 range copied so that the haves a sharded want
 * misses are skipped without touching them ([0, UINT64_MAX) for flat
 * haves, which are never skipped). */
struct have_ref {
    uint32_t sender;
    uint32_t have;
    uint64_t lo0, hi0;
};

/* One distinct tensor name among the haves: its refs are
 * refs[first[group] .. first[group + 1]). */
struct name_slot {
    uint64_t hash;
    const char *name; /* NULL: a free slot */
    uint32_t group;
};

struct box_vec {
    struct wst_box *v;
    size_t n, cap;
};

struct item_vec {
    struct wst_plan_item *v;
    size_t n, cap;
};

/* Where runs go. Runs are made twice: a first pass only counts each
 * sender's (after merging neighbours), then the plan's array is allocated
 * at its exact size and the second pass writes each sender's runs into
 * its own slice. No array grows, nothing is copied or sorted across
 * senders, and the plan is written once (at a few hundred thousand items,
 * page faults and copies of a growing array cost more than finding the
 * runs). */
struct run_sink {
    struct wst_plan_item *out;  /* NULL while counting; else [total] */
    struct wst_plan_item *last; /* [n_senders] each sender's open run */
    size_t *count;              /* [n_senders] runs so far, open included */
    size_t *start; /* [n_senders + 1] first slot in out; [n_senders]: total */
    int overflow;  /* the writing pass made more runs than were counted */
};

struct planner {
    const struct wst_plan_input *in;
    const struct wst_logger *lg;
    char *err;
    size_t errlen;
    struct have_ref *refs; /* grouped by name, each group in rank order */
    size_t n_refs;
    struct name_slot *slots; /* open addressing, n_slots a power of 2 */
    size_t n_slots, n_groups;
    size_t *first;            /* [n_groups + 1] */
    struct box_vec cur, next; /* uncovered boxes of the current want */
    struct run_sink runs;
    uint32_t n_layers;
};

/* Logs the reason once and copies it into the caller's buffer; returns
 * status. */
__attribute__((format(printf, 3, 4))) wst_status_t
wst_plan_fail(struct planner *p, wst_status_t status, const char *fmt, ...);

/* Tensor names may arrive unterminated: the bytes to print of one. */
int wst_plan_name_len(const char *name);

/* plan_index.c: asks for transparent huge pages on a large array about
 * to be written (a hint; NULL is fine). */
void wst_plan_advise_huge(void *v, size_t len);

/* plan_index.c: builds p->refs, p->first and p->slots from every sender's
 * haves (refusing a have whose name is not terminated), in time linear in
 * the haves. */
wst_status_t wst_plan_index_haves(struct planner *p);

/* plan_validate.c: the input arrays and every want (the haves are checked
 * as they are indexed); then, before any intersection, the expert wants'
 * layouts, so that a refused layout moves no byte. WST_OK, or the
 * failure through wst_plan_fail. */
wst_status_t wst_plan_validate_input(struct planner *p);
wst_status_t wst_plan_check_expert_wants(struct planner *p);

/* The refs of tensor 'name': p->refs[*lo_p .. *hi_p), in rank order
 * (empty when no sender has it). */
void wst_plan_find_refs(const struct planner *p, const char *name, size_t *lo_p,
                        size_t *hi_p);

/* The have a ref names. */
const struct wst_have *wst_plan_ref_have(const struct planner *p,
                                         const struct have_ref *r);

#endif
