/* put.h - the put mover: ucp_put_nbx into the receiver's registered
 * regions with their remote keys, then a flush, the only thing that makes
 * puts visible at the target. Zero copy, for lanes that do RMA in hardware
 * (RDMA; shared memory through cma). Its sending half is chunks.h over the
 * put wire (wire.h); its receiving half has nothing to do: the receiver
 * cannot see one-sided bytes arrive, and takes a layer as visible when the
 * sender reports it after its flush.
 */
#ifndef WST_MOVERS_PUT_H
#define WST_MOVERS_PUT_H

#include "rx.h"

/* On success *rx_p is owned by the caller (wst_rx_destroy). */
wst_status_t wst_rx_put_create(const struct wst_rx_plan *plan,
                               struct wst_rx **rx_p);

#endif
