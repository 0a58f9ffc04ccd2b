/* plan_oracle.h - the element-level truth planner tests check plans against.
 *
 * Independent of the planner: where element x of a tensor lies in a have's
 * shard buffer and in a want's destination, straight from manifest.h's
 * layout rules, one element at a time. Shared by test_planner and
 * test_plan_moe (linked into every unit test). */
#ifndef WST_TEST_PLAN_ORACLE_H
#define WST_TEST_PLAN_ORACLE_H

#include <stdint.h>

#include "manifest.h"
#include "planner.h"

/* Row-major index of x in the whole tensor. */
uint64_t oracle_flat_index(const struct wst_tensor_desc *t, const uint64_t *x);

/* Whether the have's box (N-D or flat) holds element x. */
int oracle_have_owns(const struct wst_have *h, const uint64_t *x);

/* Byte offset of element x in the have's shard buffer (x owned). */
uint64_t oracle_have_offset(const struct wst_have *h, const uint64_t *x);

/* Byte offset of element x in the want's region (x inside the box). */
uint64_t oracle_want_offset(const struct wst_want *w, const uint64_t *x);

/* Steps x to the next index of box b in row-major order; 0 after the last.
 * Start with x = b->start (b non-empty). */
int oracle_box_next(const struct wst_box *b, uint64_t *x);

/* The (sender, have) the planner's rule picks for element x of want wi of
 * 'in', as sender * 256 + have, or -1 when no have holds it: senders in
 * rank order rotated by receiver_rank + wi, each one's haves in order. */
int64_t oracle_chosen_source(const struct wst_plan_input *in, size_t wi,
                             const uint64_t *x);

/* Whether some element of some (non-empty) want has no source. */
int oracle_has_gap(const struct wst_plan_input *in);

#endif
