/* lanes.h - the lanes UCX chose for a data endpoint. */
#ifndef WST_LANES_H
#define WST_LANES_H

#include <stddef.h>
#include <ucp/api/ucp.h>

/* Describes ep's lanes in 'out' (e.g. "posix/memory[am,am_bw]
 * cma/memory[rma_bw]"; truncated to outlen) and sets *rma_real_p to whether
 * puts run on a real RMA lane. */
void wst_lanes_describe(ucp_ep_h ep, char *out, size_t outlen, int *rma_real_p);

#endif
