/* topo_verbs.h - cross-checking a sysfs topology against libibverbs.
 *
 * sysfs is the testable core (a fixture tree stands in for /sys);
 * libibverbs cannot be pointed at a fixture, so here it only confirms,
 * on a real host, that the devices and port states read from sysfs are
 * the ones the verbs library sees (a device whose user-space provider is
 * missing is in sysfs but not in ibv_get_device_list, and UCX cannot use
 * it). Built from topo_verbs.c when CMake finds libibverbs, from
 * topo_verbs_stub.c otherwise.
 */
#ifndef WST_TOPO_VERBS_H
#define WST_TOPO_VERBS_H

#include <stddef.h>

#include <wstream/status.h>

#include "log.h"
#include "topology.h"

/* Lists the devices libibverbs sees, queries each port's state and
 * compares with topo: each difference (a port or device one side lacks,
 * a different state) is logged as a warning on lg naming it and counted
 * in *n_differ_p; *n_devices_p gets the number of devices ibverbs
 * listed. WST_ERR_UNSUPPORTED (logged at info) when built without
 * libibverbs; both outputs are written only on WST_OK. */
wst_status_t wst_topology_verbs_check(const struct wst_topology *topo,
                                      const struct wst_logger *lg,
                                      size_t *n_devices_p, size_t *n_differ_p);

#endif
