/* nic_choice.h - which RDMA ports a GPU's lanes should use: the nearest
 * ACTIVE ones in the PCIe tree, as a UCX_NET_DEVICES value.
 *
 * The rule: among the ACTIVE ports, those at the smallest distance class
 * from the GPU (pci_path.h: PIX < PXB < PHB < NODE < SYS < unknown) are
 * all chosen, fastest first (then by device name and port). A port that
 * is down is never chosen, so a GPU whose own NIC is down falls back to
 * the next nearest. With no ACTIVE port the choice is empty and UCX
 * keeps its own (UCX_NET_DEVICES left alone).
 *
 * Consumers (the lanes of issue 17 item 2) take one port per lane from
 * 'ports' in order, or give a lane the whole 'net_devices' string.
 */
#ifndef WST_NIC_CHOICE_H
#define WST_NIC_CHOICE_H

#include <stddef.h>

#include <wstream/status.h>

#include "log.h"
#include "topology.h"

#define WST_NIC_CHOICE_MAX 16

struct wst_nic_choice {
    enum wst_pci_dist dist;          /* the chosen ports' class */
    size_t n;                        /* ports chosen; 0: UCX chooses */
    size_t port[WST_NIC_CHOICE_MAX]; /* indexes into topo->ports */
    char net_devices[WST_NIC_CHOICE_MAX * (WST_RDMA_NAME_MAX + 5)];
    /* "mlx5_0:1,mlx5_1:1"; "" when n is 0 */
};

/* Chooses gpu's ports among topo's into *choice_p (always written).
 * WST_OK with n > 0; WST_ERR_NOT_FOUND with n = 0 when no port is ACTIVE,
 * logged at info on lg ("no RDMA device: UCX chooses" when there is no
 * device at all). More than WST_NIC_CHOICE_MAX equally near ports: the
 * fastest WST_NIC_CHOICE_MAX are kept. */
wst_status_t wst_nic_choose(const struct wst_topology *topo,
                            const struct wst_gpu *gpu,
                            const struct wst_logger *lg,
                            struct wst_nic_choice *choice_p);

/* The lane_devices list (common/worker.h) for the GPU with bus id
 * 'bus_id': its nearest ACTIVE ports (wst_nic_choose) under the sysfs
 * tree 'root' ("/sys" when NULL), into out[outlen]; "" with WST_OK when it
 * has none (UCX chooses), said on lg. An error (logged) when the tree
 * cannot be read or has no PCI device with that bus id. */
wst_status_t wst_nic_lane_devices(const char *root, const char *bus_id,
                                  const struct wst_logger *lg, char *out,
                                  size_t outlen);

#endif
