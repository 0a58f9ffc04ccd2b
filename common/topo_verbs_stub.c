/* topo_verbs_stub.c - wst_topology_verbs_check without libibverbs
 * (topo_verbs.h). */
#include "topo_verbs.h"

wst_status_t wst_topology_verbs_check(const struct wst_topology *topo,
                                      const struct wst_logger *lg,
                                      size_t *n_devices_p, size_t *n_differ_p)
{
    (void)topo;
    (void)n_devices_p;
    (void)n_differ_p;
    WST_INFO(lg, "built without libibverbs: sysfs only, no cross-check");
    return WST_ERR_UNSUPPORTED;
}
