/* topo_verbs.c - cross-checking a sysfs topology against libibverbs
 * (topo_verbs.h). */
#include "topo_verbs.h"

#include <errno.h>
#include <string.h>

#include <infiniband/verbs.h>

static const struct wst_rdma_port *find_port(const struct wst_topology *topo,
                                             const char *dev, unsigned port)
{
    size_t i;

    for (i = 0; i < topo->n_ports; i++)
        if (topo->ports[i].port == port &&
            strcmp(topo->ports[i].device, dev) == 0)
            return &topo->ports[i];
    return NULL;
}

static int verbs_lists(struct ibv_device **list, int n, const char *dev)
{
    int i;

    for (i = 0; i < n; i++)
        if (strcmp(ibv_get_device_name(list[i]), dev) == 0)
            return 1;
    return 0;
}

/* Compares one device's ports; returns how many differ. */
static size_t check_device(const struct wst_topology *topo,
                           struct ibv_device *dev, const struct wst_logger *lg)
{
    const char *name = ibv_get_device_name(dev);
    const struct wst_rdma_port *sys;
    struct ibv_device_attr attr;
    struct ibv_port_attr pattr;
    struct ibv_context *ctx;
    size_t differ = 0;
    unsigned p;

    ctx = ibv_open_device(dev);
    if (ctx == NULL) {
        WST_WARN(lg, "ibverbs: cannot open %s: %s: its ports not checked", name,
                 strerror(errno));
        return 1;
    }
    if (ibv_query_device(ctx, &attr) != 0) {
        WST_WARN(lg, "ibverbs: cannot query %s: its ports not checked", name);
        differ++;
        goto out_close_device;
    }
    for (p = 1; p <= attr.phys_port_cnt; p++) {
        sys = find_port(topo, name, p);
        if (ibv_query_port(ctx, (uint8_t)p, &pattr) != 0) {
            WST_WARN(lg, "ibverbs: cannot query %s port %u", name, p);
            differ++;
        } else if (sys == NULL) {
            WST_WARN(lg, "ibverbs: %s port %u is not in sysfs", name, p);
            differ++;
        } else if ((int)pattr.state != sys->state) {
            WST_WARN(lg,
                     "ibverbs: %s port %u is %s, sysfs says %d: %s (it "
                     "changed in between?)",
                     name, p, ibv_port_state_str(pattr.state), sys->state,
                     sys->state_name);
            differ++;
        }
    }

out_close_device:
    ibv_close_device(ctx);
    return differ;
}

wst_status_t wst_topology_verbs_check(const struct wst_topology *topo,
                                      const struct wst_logger *lg,
                                      size_t *n_devices_p, size_t *n_differ_p)
{
    struct ibv_device **list;
    size_t differ = 0, i;
    int n = 0, d;

    list = ibv_get_device_list(&n);
    if (list == NULL) {
        /* no RDMA stack at all: ibverbs sees nothing, like sysfs */
        WST_DEBUG(lg, "ibverbs: no device list: %s", strerror(errno));
        n = 0;
    }
    for (d = 0; d < n; d++)
        differ += check_device(topo, list[d], lg);
    for (i = 0; i < topo->n_ports; i++) {
        if (i > 0 &&
            strcmp(topo->ports[i].device, topo->ports[i - 1].device) == 0)
            continue; /* one line per device: its ports are adjacent */
        if (!verbs_lists(list, n, topo->ports[i].device)) {
            WST_WARN(lg,
                     "ibverbs: %s is in sysfs but not listed (no user-space "
                     "provider?): UCX cannot use it",
                     topo->ports[i].device);
            differ++;
        }
    }
    if (list != NULL)
        ibv_free_device_list(list);
    *n_devices_p = (size_t)n;
    *n_differ_p = differ;
    return WST_OK;
}
