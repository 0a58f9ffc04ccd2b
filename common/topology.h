/* topology.h - the RDMA ports and GPUs of a host, read from sysfs.
 *
 * What is read (all under a sysfs root: "/sys", or a fixture tree in
 * tests):
 *   class/infiniband/<dev>/ports/<n>/state       "4: ACTIVE"
 *   class/infiniband/<dev>/ports/<n>/rate        "400 Gb/sec (4X NDR)"
 *   class/infiniband/<dev>/ports/<n>/link_layer  "InfiniBand", "Ethernet"
 *   class/infiniband/<dev>/device                link to its PCI device
 *   bus/pci/devices/<bdf>/{vendor,class}         GPUs: vendor 0x10de,
 *                                                class 0x0300xx/0x0302xx
 * and, for each device, its place in the PCIe tree (pci_path.h).
 *
 * A host without class/infiniband (no RDMA stack) has no ports: that is
 * not an error. A port that is there but malformed (state or rate
 * missing or not parseable, where the port is ACTIVE) fails the whole
 * scan with WST_ERR_IO naming the file: a half-read topology would choose
 * wrongly without saying so. The kernel refuses to read the rate of some
 * ports that are down (RoCE without link); a port that is not ACTIVE
 * with no rate is kept with rate 0. A device without a PCI device
 * (software RDMA: rxe, siw) is kept with an unknown distance.
 */
#ifndef WST_TOPOLOGY_H
#define WST_TOPOLOGY_H

#include <stddef.h>

#include <wstream/status.h>

#include "log.h"
#include "pci_path.h"

#define WST_RDMA_NAME_MAX 64

/* One port of an RDMA device. */
struct wst_rdma_port {
    char device[WST_RDMA_NAME_MAX]; /* "mlx5_0" */
    unsigned port;                  /* 1-based, as UCX names it */
    int state;                      /* 4: ACTIVE (ib_port_state) */
    char state_name[24];            /* "ACTIVE", "DOWN", ... */
    double rate_gbps;               /* 400.0; 0 when unknown (down) */
    char link_layer[24];            /* "InfiniBand", "Ethernet" */
    struct wst_pci_path pci;        /* depth 0: no PCI device */
};

/* One GPU, found by vendor and class or given by bus id. */
struct wst_gpu {
    char bdf[WST_PCI_NAME_MAX]; /* "0000:1b:00.0" */
    struct wst_pci_path pci;
};

/* What a scan found. Owns its arrays; free with wst_topology_free. */
struct wst_topology {
    struct wst_rdma_port *ports; /* sorted by device name, then port */
    size_t n_ports, cap_ports;
    size_t n_devices;     /* RDMA devices seen (each has >= 0 ports) */
    struct wst_gpu *gpus; /* sorted by bus id */
    size_t n_gpus, cap_gpus;
};

#define WST_TOPO_PORT_ACTIVE 4

/* Scans the sysfs tree at 'root' ("/sys" when NULL) into *topo_p (which
 * the caller owns afterwards and frees with wst_topology_free). Failures
 * are logged on lg (may be NULL) naming the file; *topo_p is written only
 * on success. */
wst_status_t wst_topology_scan(const char *root, const struct wst_logger *lg,
                               struct wst_topology *topo_p);

/* Frees what a scan allocated and zeroes *topo. */
void wst_topology_free(struct wst_topology *topo);

/* The GPU with bus id 'bus_id' (any form wst_pci_bdf_normalize takes),
 * or NULL (logged on lg, naming it). Borrowed from topo. */
const struct wst_gpu *wst_topology_gpu(const struct wst_topology *topo,
                                       const char *bus_id,
                                       const struct wst_logger *lg);

/* The GPU with bus id 'bus_id' as above if the scan found it; otherwise
 * the PCI device with that bus id under the sysfs root 'root' ("/sys"
 * when NULL), whatever its vendor and class (a device the caller knows
 * is its GPU, e.g. from cudaDeviceGetPCIBusId), appended to topo->gpus.
 * NULL, logged on lg naming it, when the bus id is malformed, no PCI
 * device has it, or out of memory; topo unchanged then. Borrowed from
 * topo, valid until the next call that appends. */
const struct wst_gpu *wst_topology_gpu_add(struct wst_topology *topo,
                                           const char *root, const char *bus_id,
                                           const struct wst_logger *lg);

/* Reads the RDMA ports under root into topo (rdma_ports.c). */
wst_status_t wst_rdma_ports_scan(const char *root, const struct wst_logger *lg,
                                 struct wst_topology *topo);

#endif
