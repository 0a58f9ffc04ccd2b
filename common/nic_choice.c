/* nic_choice.c - the nearest ACTIVE RDMA ports of a GPU (nic_choice.h). */
#include "nic_choice.h"

#include <stdio.h>
#include <string.h>

/* Nonzero when port a goes before port b among equally near ones. */
static int goes_before(const struct wst_rdma_port *a,
                       const struct wst_rdma_port *b)
{
    int c;

    if (a->rate_gbps != b->rate_gbps)
        return a->rate_gbps > b->rate_gbps;
    c = strverscmp(a->device, b->device);
    if (c != 0)
        return c < 0;
    return a->port < b->port;
}

/* Inserts port index 'idx' into the choice, in order; drops the last
 * when full. */
static void insert(const struct wst_topology *topo,
                   struct wst_nic_choice *choice, size_t idx)
{
    const struct wst_rdma_port *p = &topo->ports[idx];
    size_t at = 0, i;

    while (at < choice->n && !goes_before(p, &topo->ports[choice->port[at]]))
        at++;
    if (at == WST_NIC_CHOICE_MAX)
        return;
    if (choice->n < WST_NIC_CHOICE_MAX)
        choice->n++;
    for (i = choice->n - 1; i > at; i--)
        choice->port[i] = choice->port[i - 1];
    choice->port[at] = idx;
}

static void format(const struct wst_topology *topo,
                   struct wst_nic_choice *choice)
{
    size_t i, len = 0;
    const struct wst_rdma_port *p;

    choice->net_devices[0] = '\0';
    for (i = 0; i < choice->n; i++) {
        p = &topo->ports[choice->port[i]];
        len += (size_t)snprintf(choice->net_devices + len,
                                sizeof(choice->net_devices) - len, "%s%s:%u",
                                i > 0 ? "," : "", p->device, p->port);
    }
}

wst_status_t wst_nic_lane_devices(const char *root, const char *bus_id,
                                  const struct wst_logger *lg, char *out,
                                  size_t outlen)
{
    struct wst_topology topo;
    struct wst_nic_choice choice;
    const struct wst_gpu *gpu;
    wst_status_t st;

    out[0] = '\0';
    st = wst_topology_scan(root, lg, &topo);
    if (st != WST_OK)
        return st;
    gpu = wst_topology_gpu_add(&topo, root, bus_id, lg);
    if (gpu == NULL) {
        st = WST_ERR_NOT_FOUND;
        goto out_free;
    }
    st = wst_nic_choose(&topo, gpu, lg, &choice);
    if (st == WST_ERR_NOT_FOUND) {
        st = WST_OK; /* no port: UCX chooses (logged) */
        goto out_free;
    }
    if (st != WST_OK)
        goto out_free;
    if (strlen(choice.net_devices) >= outlen) {
        WST_ERROR(lg, "gpu %s: its ports' list is too long: %s", gpu->bdf,
                  choice.net_devices);
        st = WST_ERR_INVALID;
        goto out_free;
    }
    snprintf(out, outlen, "%s", choice.net_devices);
    WST_INFO(lg, "gpu %s: data lanes on its nearest RDMA ports %s (%s)",
             gpu->bdf, out, wst_pci_dist_name(choice.dist));
out_free:
    wst_topology_free(&topo);
    return st;
}

wst_status_t wst_nic_choose(const struct wst_topology *topo,
                            const struct wst_gpu *gpu,
                            const struct wst_logger *lg,
                            struct wst_nic_choice *choice_p)
{
    struct wst_nic_choice choice;
    enum wst_pci_dist d;
    size_t i;

    memset(&choice, 0, sizeof(choice));
    choice.dist = WST_PCI_UNKNOWN;
    for (i = 0; i < topo->n_ports; i++) {
        if (topo->ports[i].state != WST_TOPO_PORT_ACTIVE)
            continue;
        d = wst_pci_distance(&gpu->pci, &topo->ports[i].pci);
        if (choice.n > 0 && d > choice.dist)
            continue;
        if (choice.n > 0 && d < choice.dist)
            choice.n = 0;
        choice.dist = d;
        insert(topo, &choice, i);
    }
    format(topo, &choice);
    *choice_p = choice;
    if (choice.n > 0) {
        WST_DEBUG(lg, "gpu %s: UCX_NET_DEVICES=%s (%s)", gpu->bdf,
                  choice.net_devices, wst_pci_dist_name(choice.dist));
        return WST_OK;
    }
    if (topo->n_devices == 0)
        WST_INFO(lg, "gpu %s: no RDMA device: UCX chooses", gpu->bdf);
    else
        WST_INFO(lg,
                 "gpu %s: no ACTIVE port on %zu RDMA device(s): UCX chooses",
                 gpu->bdf, topo->n_devices);
    return WST_ERR_NOT_FOUND;
}
