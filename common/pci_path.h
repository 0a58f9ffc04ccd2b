/* pci_path.h - where a PCI device sits in the PCIe tree, from sysfs, and
 * how far apart two devices are, in the classes nvidia-smi prints.
 *
 * Linux shows the PCIe tree as directories: a device's directory under
 * /sys/devices is nested in its upstream bridge's, which is nested in the
 * next bridge up, up to the host bridge ("pci0000:15"), and
 * /sys/bus/pci/devices/<bdf> links to it. So the path of a device is the
 * list of names from the host bridge down to the device itself:
 *
 *   pci0000:15 / 0000:15:01.0 / 0000:16:00.0 / 0000:17:01.0 / 0000:18:00.0
 *   host bridge  root port      switch up      switch down    the NIC
 *
 * (In Hyper-V VMs the host bridge sits below firmware and VMBus nodes:
 * "LNXSYSTM:00/.../VMBUS:01/<guid>/pci0001:00/0001:00:00.0"; the path
 * starts at the host bridge all the same.)
 * A PCIe switch shows as an upstream port with downstream ports under it.
 * Two devices meet at the deepest name their paths share:
 *   PIX   below one switch: the meeting point is a bridge and each device
 *         is at most two levels under it (downstream port, device);
 *   PXB   below the same bridge, through more than one switch level;
 *   PHB   only the host bridge is shared (the paths split at the root
 *         complex, through the CPU);
 *   NODE  different host bridges of one NUMA node;
 *   SYS   different NUMA nodes (across the sockets' interconnect).
 * Lower is nearer; UNKNOWN (no PCI path, e.g. a software RDMA device) is
 * farther than all.
 */
#ifndef WST_PCI_PATH_H
#define WST_PCI_PATH_H

#include <stddef.h>

#include <wstream/status.h>

#include "log.h"

#define WST_PCI_DEPTH_MAX 16
#define WST_PCI_NAME_MAX 32 /* "0000:18:00.0", "pci0000:15" */

enum wst_pci_dist {
    WST_PCI_PIX = 1,
    WST_PCI_PXB = 2,
    WST_PCI_PHB = 3,
    WST_PCI_NODE = 4,
    WST_PCI_SYS = 5,
    WST_PCI_UNKNOWN = 6,
};

/* A device's place in the tree. depth 0: not known. */
struct wst_pci_path {
    char name[WST_PCI_DEPTH_MAX][WST_PCI_NAME_MAX]; /* [0]: host bridge */
    int depth;
    int numa_node; /* the device's numa_node; -1 when the kernel has none */
};

/* Reads the path of the device that sysfs_link leads to (a symlink such
 * as "<root>/bus/pci/devices/0000:18:00.0" or
 * "<root>/class/infiniband/mlx5_0/device"), relative to the sysfs root
 * 'root', and its numa_node. *path_p is written only on success.
 * WST_ERR_NOT_FOUND when the link does not resolve, WST_ERR_IO when it
 * leads to no host bridge under "<root>/devices/" or deeper than
 * WST_PCI_DEPTH_MAX below it;
 * each logged on lg (may be NULL) naming the link. */
wst_status_t wst_pci_path_read(const char *root, const char *sysfs_link,
                               const struct wst_logger *lg,
                               struct wst_pci_path *path_p);

/* The device's own name: the last of its path ("0000:18:00.0"), or "" */
const char *wst_pci_path_bdf(const struct wst_pci_path *path);

/* How far apart a and b are (the classes above). */
enum wst_pci_dist wst_pci_distance(const struct wst_pci_path *a,
                                   const struct wst_pci_path *b);

/* "PIX", "PXB", "PHB", "NODE", "SYS" or "?" (static strings). */
const char *wst_pci_dist_name(enum wst_pci_dist dist);

/* Writes bus id 'in' in sysfs's form, "dddd:bb:dd.f" lowercase, into
 * out[0..outlen): accepts nvidia-smi's "00000000:1B:00.0" (8-digit
 * domain), "0000:1b:00.0" and "1b:00.0" (domain 0). WST_ERR_INVALID for
 * anything else, out untouched. */
wst_status_t wst_pci_bdf_normalize(const char *in, char *out, size_t outlen);

#endif
