/* plan_check.h - an exactness check of a plan, independent of the planner.
 *
 * From manifest.h's layout rules alone (N-D haves, dense wants with
 * row_pitch 0, as plan_deploy.h makes them): the items of every region,
 * sorted by destination offset, tile [0, region length) with no gap and no
 * overlap; every item lies inside one want, comes from a have of the same
 * tensor that holds the item's first and last element, and its source
 * offset and end are where that have's shard holds them; layer and staged
 * flag are the want's. The first failure is described in err.
 */
#ifndef WST_BENCH_PLAN_CHECK_H
#define WST_BENCH_PLAN_CHECK_H

#include "planner.h"

wst_status_t pc_plan_check(const struct wst_plan_input *in,
                           const struct wst_plan *plan, char *err,
                           size_t errlen);

#endif
