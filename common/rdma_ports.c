/* rdma_ports.c - the RDMA devices' ports, read from
 * <root>/class/infiniband (topology.h). */
#include "topology.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "array.h"
#include "sysfs_file.h"

/* snprintf into a path buffer; -1 (logged, naming what was cut) when it
 * does not fit. */
static int join(char *out, size_t len, const struct wst_logger *lg,
                const char *a, const char *b)
{
    int n = snprintf(out, len, "%s/%s", a, b);

    if (n < 0 || (size_t)n >= len) {
        WST_ERROR(lg, "%s/%s: path too long", a, b);
        return -1;
    }
    return 0;
}

/* "4: ACTIVE" */
static wst_status_t read_state(const char *dir, const struct wst_logger *lg,
                               struct wst_rdma_port *port)
{
    char line[64], *end;
    long state;

    if (wst_sysfs_read_attr(dir, "state", line, sizeof(line)) != 0) {
        WST_ERROR(lg, "%s/state: cannot read the port state: %s", dir,
                  strerror(errno));
        return WST_ERR_IO;
    }
    errno = 0;
    state = strtol(line, &end, 10);
    if (errno != 0 || end == line || *end != ':' || state < 0 || state > 16) {
        WST_ERROR(lg, "%s/state: port state '%s' is not '<n>: <NAME>'", dir,
                  line);
        return WST_ERR_IO;
    }
    end++;
    while (*end == ' ')
        end++;
    port->state = (int)state;
    snprintf(port->state_name, sizeof(port->state_name), "%s", end);
    return WST_OK;
}

/* "400 Gb/sec (4X NDR)"; a port that is not ACTIVE may have none. */
static wst_status_t read_rate(const char *dir, const struct wst_logger *lg,
                              struct wst_rdma_port *port)
{
    char line[64], *end;
    int active = port->state == WST_TOPO_PORT_ACTIVE;
    double rate;

    port->rate_gbps = 0;
    if (wst_sysfs_read_attr(dir, "rate", line, sizeof(line)) != 0) {
        if (!active)
            return WST_OK;
        WST_ERROR(lg, "%s/rate: cannot read the rate of an ACTIVE port: %s",
                  dir, strerror(errno));
        return WST_ERR_IO;
    }
    errno = 0;
    rate = strtod(line, &end);
    if (errno != 0 || end == line || !(rate >= 0 && rate < 1e6) ||
        strncmp(end, " Gb/sec", 7) != 0) {
        if (!active)
            return WST_OK;
        WST_ERROR(lg, "%s/rate: rate '%s' is not '<number> Gb/sec'", dir, line);
        return WST_ERR_IO;
    }
    port->rate_gbps = rate;
    return WST_OK;
}

static wst_status_t read_port(const char *dev_dir, const char *dev,
                              const char *port_name,
                              const struct wst_logger *lg,
                              struct wst_rdma_port *port)
{
    char ports[PATH_MAX], dir[PATH_MAX], *end;
    unsigned long n;
    wst_status_t status;

    memset(port, 0, sizeof(*port));
    errno = 0;
    n = strtoul(port_name, &end, 10);
    if (errno != 0 || end == port_name || *end != '\0' || n == 0 || n > 255) {
        WST_ERROR(lg, "%s/ports/%s: not a port number", dev_dir, port_name);
        return WST_ERR_IO;
    }
    port->port = (unsigned)n;
    if (strlen(dev) >= sizeof(port->device)) {
        WST_ERROR(lg, "%s: RDMA device name longer than %zu bytes", dev_dir,
                  sizeof(port->device) - 1);
        return WST_ERR_IO;
    }
    strcpy(port->device, dev);
    if (join(ports, sizeof(ports), lg, dev_dir, "ports") != 0 ||
        join(dir, sizeof(dir), lg, ports, port_name) != 0)
        return WST_ERR_IO;
    status = read_state(dir, lg, port);
    if (status != WST_OK)
        return status;
    status = read_rate(dir, lg, port);
    if (status != WST_OK)
        return status;
    if (wst_sysfs_read_attr(dir, "link_layer", port->link_layer,
                            sizeof(port->link_layer)) != 0)
        snprintf(port->link_layer, sizeof(port->link_layer), "unknown");
    return WST_OK;
}

struct device_scan {
    const char *root;
    const char *dev_dir, *dev; /* the device being read */
    struct wst_pci_path pci;
    const struct wst_logger *lg;
    struct wst_topology *topo;
};

/* One entry of <device>/ports: the port is added to the topology. */
static wst_status_t scan_port(void *arg, const char *ports_dir,
                              const char *name)
{
    struct device_scan *sc = arg;
    struct wst_topology *topo = sc->topo;
    struct wst_rdma_port *port;
    wst_status_t status;

    (void)ports_dir;
    status = wst_array_grow(&topo->ports, &topo->cap_ports, topo->n_ports + 1,
                            sizeof(*topo->ports));
    if (status != WST_OK)
        return status;
    port = &topo->ports[topo->n_ports];
    status = read_port(sc->dev_dir, sc->dev, name, sc->lg, port);
    if (status != WST_OK)
        return status;
    port->pci = sc->pci;
    topo->n_ports++;
    return WST_OK;
}

/* One entry of <root>/class/infiniband: the device's ports; its PCI path
 * (depth 0 when none) goes with each. */
static wst_status_t scan_device(void *arg, const char *class_dir,
                                const char *dev)
{
    const struct device_scan *scan = arg;
    struct device_scan sc = *scan;
    char dev_dir[PATH_MAX], ports_dir[PATH_MAX + 8], link[PATH_MAX + 8];
    const struct wst_logger *lg = sc.lg;
    wst_status_t status = WST_OK;
    struct stat st;

    if (join(dev_dir, sizeof(dev_dir), lg, class_dir, dev) != 0)
        return WST_ERR_IO;
    sc.dev_dir = dev_dir;
    sc.dev = dev;
    sc.pci = (struct wst_pci_path){.depth = 0, .numa_node = -1};
    snprintf(link, sizeof(link), "%s/device", dev_dir);
    if (lstat(link, &st) != 0) {
        WST_WARN(lg,
                 "%s: no PCI device (a software RDMA device?): its "
                 "distance to GPUs is unknown",
                 dev_dir);
    } else {
        status = wst_pci_path_read(sc.root, link, lg, &sc.pci);
        if (status != WST_OK)
            return status;
    }
    snprintf(ports_dir, sizeof(ports_dir), "%s/ports", dev_dir);
    if (wst_sysfs_list(ports_dir, versionsort, scan_port, &sc, &status) != 0) {
        WST_ERROR(lg, "%s: cannot list the ports: %s", ports_dir,
                  strerror(errno));
        return WST_ERR_IO;
    }
    sc.topo->n_devices++;
    return status;
}

wst_status_t wst_rdma_ports_scan(const char *root, const struct wst_logger *lg,
                                 struct wst_topology *topo)
{
    struct device_scan sc = {.root = root, .lg = lg, .topo = topo};
    char class_dir[PATH_MAX];
    wst_status_t status = WST_OK;

    snprintf(class_dir, sizeof(class_dir), "%s/class/infiniband", root);
    if (wst_sysfs_list(class_dir, versionsort, scan_device, &sc, &status) !=
        0) {
        if (errno == ENOENT)
            return WST_OK; /* no RDMA stack loaded: no devices */
        WST_ERROR(lg, "%s: cannot list the RDMA devices: %s", class_dir,
                  strerror(errno));
        return WST_ERR_IO;
    }
    return status;
}
