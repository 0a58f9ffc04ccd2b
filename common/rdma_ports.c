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

static int not_dot(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

/* "4: ACTIVE" */
static wst_status_t read_state(const char *dir, const struct wst_logger *lg,
                               struct wst_rdma_port *port)
{
    char file[PATH_MAX + 16], line[64], *end;
    long state;

    snprintf(file, sizeof(file), "%s/state", dir);
    if (wst_sysfs_read_line(file, line, sizeof(line)) != 0) {
        WST_ERROR(lg, "%s: cannot read the port state: %s", file,
                  strerror(errno));
        return WST_ERR_IO;
    }
    errno = 0;
    state = strtol(line, &end, 10);
    if (errno != 0 || end == line || *end != ':' || state < 0 || state > 16) {
        WST_ERROR(lg, "%s: port state '%s' is not '<n>: <NAME>'", file, line);
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
    char file[PATH_MAX + 16], line[64], *end;
    int active = port->state == WST_TOPO_PORT_ACTIVE;
    double rate;

    port->rate_gbps = 0;
    snprintf(file, sizeof(file), "%s/rate", dir);
    if (wst_sysfs_read_line(file, line, sizeof(line)) != 0) {
        if (!active)
            return WST_OK;
        WST_ERROR(lg, "%s: cannot read the rate of an ACTIVE port: %s", file,
                  strerror(errno));
        return WST_ERR_IO;
    }
    errno = 0;
    rate = strtod(line, &end);
    if (errno != 0 || end == line || !(rate >= 0 && rate < 1e6) ||
        strncmp(end, " Gb/sec", 7) != 0) {
        if (!active)
            return WST_OK;
        WST_ERROR(lg, "%s: rate '%s' is not '<number> Gb/sec'", file, line);
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
    char ports[PATH_MAX], dir[PATH_MAX], file[PATH_MAX + 16], *end;
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
    snprintf(file, sizeof(file), "%s/link_layer", dir);
    if (wst_sysfs_read_line(file, port->link_layer, sizeof(port->link_layer)) !=
        0)
        snprintf(port->link_layer, sizeof(port->link_layer), "unknown");
    return WST_OK;
}

/* Reads one device's ports; pci is its PCI path (depth 0 when none). */
static wst_status_t read_device(const char *root, const char *class_dir,
                                const char *dev, const struct wst_logger *lg,
                                struct wst_topology *topo)
{
    char dev_dir[PATH_MAX], ports_dir[PATH_MAX + 8], link[PATH_MAX + 8];
    struct wst_pci_path pci = {.depth = 0, .numa_node = -1};
    struct dirent **ents = NULL;
    struct wst_rdma_port *port;
    wst_status_t status = WST_OK;
    struct stat st;
    int n, i;

    if (join(dev_dir, sizeof(dev_dir), lg, class_dir, dev) != 0)
        return WST_ERR_IO;
    snprintf(link, sizeof(link), "%s/device", dev_dir);
    if (lstat(link, &st) != 0) {
        WST_WARN(lg,
                 "%s: no PCI device (a software RDMA device?): its "
                 "distance to GPUs is unknown",
                 dev_dir);
    } else {
        status = wst_pci_path_read(root, link, lg, &pci);
        if (status != WST_OK)
            return status;
    }
    snprintf(ports_dir, sizeof(ports_dir), "%s/ports", dev_dir);
    n = scandir(ports_dir, &ents, not_dot, versionsort);
    if (n < 0) {
        WST_ERROR(lg, "%s: cannot list the ports: %s", ports_dir,
                  strerror(errno));
        return WST_ERR_IO;
    }
    for (i = 0; i < n && status == WST_OK; i++) {
        status = wst_array_grow(&topo->ports, &topo->cap_ports,
                                topo->n_ports + 1, sizeof(*topo->ports));
        if (status != WST_OK)
            break;
        port = &topo->ports[topo->n_ports];
        status = read_port(dev_dir, dev, ents[i]->d_name, lg, port);
        if (status != WST_OK)
            break;
        port->pci = pci;
        topo->n_ports++;
    }
    for (i = 0; i < n; i++)
        free(ents[i]);
    free(ents);
    topo->n_devices++;
    return status;
}

wst_status_t wst_rdma_ports_scan(const char *root, const struct wst_logger *lg,
                                 struct wst_topology *topo)
{
    char class_dir[PATH_MAX];
    struct dirent **ents = NULL;
    wst_status_t status = WST_OK;
    int n, i;

    snprintf(class_dir, sizeof(class_dir), "%s/class/infiniband", root);
    n = scandir(class_dir, &ents, not_dot, versionsort);
    if (n < 0) {
        if (errno == ENOENT)
            return WST_OK; /* no RDMA stack loaded: no devices */
        WST_ERROR(lg, "%s: cannot list the RDMA devices: %s", class_dir,
                  strerror(errno));
        return WST_ERR_IO;
    }
    for (i = 0; i < n && status == WST_OK; i++)
        status = read_device(root, class_dir, ents[i]->d_name, lg, topo);
    for (i = 0; i < n; i++)
        free(ents[i]);
    free(ents);
    return status;
}
