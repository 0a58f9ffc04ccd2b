/* pci_path.c - where a PCI device sits in the PCIe tree, from sysfs, and
 * how far apart two devices are (pci_path.h). */
#include "pci_path.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sysfs_file.h"

/* Splits rel ("pci0000:15/0000:15:01.0/...") into path's names. */
static wst_status_t split_path(const char *rel, struct wst_pci_path *path)
{
    const char *p = rel;
    size_t n;

    path->depth = 0;
    while (*p != '\0') {
        n = strcspn(p, "/");
        if (n == 0 || n >= WST_PCI_NAME_MAX || path->depth == WST_PCI_DEPTH_MAX)
            return WST_ERR_IO;
        memcpy(path->name[path->depth], p, n);
        path->name[path->depth][n] = '\0';
        path->depth++;
        p += n;
        if (*p == '/')
            p++;
    }
    if (path->depth == 0 || strncmp(path->name[0], "pci", 3) != 0)
        return WST_ERR_IO;
    return WST_OK;
}

/* The first name in rel that is a host bridge, "pci<domain>:<bus>": right
 * at the start on bare metal, below firmware and VMBus nodes in Hyper-V
 * VMs ("LNXSYSTM:00/.../VMBUS:01/<guid>/pci0001:00/0001:00:00.0").
 * NULL when there is none. */
static const char *host_bridge(const char *rel)
{
    const char *p = rel;
    unsigned domain, bus;
    int n;

    while (*p != '\0') {
        n = 0;
        if (sscanf(p, "pci%x:%x%n", &domain, &bus, &n) == 2 &&
            (p[n] == '/' || p[n] == '\0'))
            return p;
        p += strcspn(p, "/");
        if (*p == '/')
            p++;
    }
    return NULL;
}

wst_status_t wst_pci_path_read(const char *root, const char *sysfs_link,
                               const struct wst_logger *lg,
                               struct wst_pci_path *path_p)
{
    char root_real[PATH_MAX], dev_real[PATH_MAX], numa[32];
    const char *hb = NULL;
    struct wst_pci_path path;
    size_t root_len;
    char *end;
    long node;

    if (realpath(root, root_real) == NULL) {
        WST_ERROR(lg, "sysfs root %s: %s", root, strerror(errno));
        return WST_ERR_NOT_FOUND;
    }
    if (realpath(sysfs_link, dev_real) == NULL) {
        WST_ERROR(lg, "%s: %s", sysfs_link, strerror(errno));
        return WST_ERR_NOT_FOUND;
    }
    root_len = strlen(root_real);
    if (strcmp(root_real, "/") == 0)
        root_len = 0;
    if (strncmp(dev_real, root_real, root_len) == 0 &&
        strncmp(dev_real + root_len, "/devices/", 9) == 0)
        hb = host_bridge(dev_real + root_len + 9);
    if (hb == NULL || split_path(hb, &path) != WST_OK) {
        WST_ERROR(lg,
                  "%s leads to %s, not to a PCI device under a host bridge "
                  "%s/devices/.../pci*, at most %d levels below it",
                  sysfs_link, dev_real, root_real, WST_PCI_DEPTH_MAX);
        return WST_ERR_IO;
    }
    path.numa_node = -1;
    if (wst_sysfs_read_attr(dev_real, "numa_node", numa, sizeof(numa)) == 0) {
        errno = 0;
        node = strtol(numa, &end, 10);
        if (errno == 0 && end != numa && *end == '\0' && node >= -1 &&
            node <= INT_MAX)
            path.numa_node = (int)node;
        else
            WST_WARN(lg, "%s/numa_node: '%s' is not a number: taken as -1",
                     dev_real, numa);
    }
    *path_p = path;
    return WST_OK;
}

const char *wst_pci_path_bdf(const struct wst_pci_path *path)
{
    return path->depth > 0 ? path->name[path->depth - 1] : "";
}

enum wst_pci_dist wst_pci_distance(const struct wst_pci_path *a,
                                   const struct wst_pci_path *b)
{
    int shared = 0, below_a, below_b;

    if (a->depth == 0 || b->depth == 0)
        return WST_PCI_UNKNOWN;
    while (shared < a->depth && shared < b->depth &&
           strcmp(a->name[shared], b->name[shared]) == 0)
        shared++;
    if (shared == 0)
        return a->numa_node == b->numa_node ? WST_PCI_NODE : WST_PCI_SYS;
    if (shared == 1)
        return WST_PCI_PHB;
    /* they meet at a bridge: one switch when neither is more than a
     * downstream port and itself below it */
    below_a = a->depth - shared;
    below_b = b->depth - shared;
    return below_a <= 2 && below_b <= 2 ? WST_PCI_PIX : WST_PCI_PXB;
}

const char *wst_pci_dist_name(enum wst_pci_dist dist)
{
    switch (dist) {
    case WST_PCI_PIX:
        return "PIX";
    case WST_PCI_PXB:
        return "PXB";
    case WST_PCI_PHB:
        return "PHB";
    case WST_PCI_NODE:
        return "NODE";
    case WST_PCI_SYS:
        return "SYS";
    case WST_PCI_UNKNOWN:
        break;
    }
    return "?";
}

wst_status_t wst_pci_bdf_normalize(const char *in, char *out, size_t outlen)
{
    unsigned long domain = 0;
    unsigned bus, dev, fn;
    char tail;
    int n = 0;

    if (strlen(in) > 16)
        return WST_ERR_INVALID;
    if (sscanf(in, "%lx:%x:%x.%x%n%c", &domain, &bus, &dev, &fn, &n, &tail) !=
            4 ||
        in[n] != '\0') {
        domain = 0;
        n = 0;
        if (sscanf(in, "%x:%x.%x%n%c", &bus, &dev, &fn, &n, &tail) != 3 ||
            in[n] != '\0')
            return WST_ERR_INVALID;
    }
    if (domain > 0xffff || bus > 0xff || dev > 0x1f || fn > 7 || outlen < 13)
        return WST_ERR_INVALID;
    snprintf(out, outlen, "%04lx:%02x:%02x.%x", domain, bus, dev, fn);
    return WST_OK;
}
