/* topology.c - the RDMA ports and GPUs of a host, read from sysfs
 * (topology.h); the ports themselves are read in rdma_ports.c. */
#include "topology.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "sysfs_file.h"

#define WST_PCI_VENDOR_NVIDIA 0x10deUL

/* A hex number file such as vendor ("0x10de") or class ("0x030200");
 * -1 when missing or malformed. */
static long read_hex(const char *dir, const char *name)
{
    char line[32], *end;
    unsigned long v;

    if (wst_sysfs_read_attr(dir, name, line, sizeof(line)) != 0)
        return -1;
    errno = 0;
    v = strtoul(line, &end, 16);
    if (errno != 0 || end == line || *end != '\0' || v > 0xffffffUL)
        return -1;
    return (long)v;
}

static int is_gpu(const char *dev_dir)
{
    long vendor = read_hex(dev_dir, "vendor");
    long class = read_hex(dev_dir, "class");

    if (vendor != (long)WST_PCI_VENDOR_NVIDIA || class < 0)
        return 0;
    /* display controller: VGA (0x0300) or 3D (0x0302), any prog-if */
    return (class >> 8) == 0x0300 || (class >> 8) == 0x0302;
}

struct gpu_scan {
    const char *root;
    const struct wst_logger *lg;
    struct wst_topology *topo;
};

/* One entry of <root>/bus/pci/devices: a GPU is added to the topology. */
static wst_status_t scan_pci_device(void *arg, const char *bus_dir,
                                    const char *name)
{
    struct gpu_scan *sc = arg;
    struct wst_topology *topo = sc->topo;
    char dev_dir[PATH_MAX + 64];
    struct wst_gpu *gpu = NULL;
    wst_status_t status;
    int len;

    len = snprintf(dev_dir, sizeof(dev_dir), "%s/%s", bus_dir, name);
    if (len < 0 || (size_t)len >= sizeof(dev_dir) ||
        strlen(name) >= sizeof(gpu->bdf) || !is_gpu(dev_dir))
        return WST_OK; /* not a bus id, so not a GPU */
    status = wst_array_grow(&topo->gpus, &topo->cap_gpus, topo->n_gpus + 1,
                            sizeof(*topo->gpus));
    if (status != WST_OK)
        return status;
    gpu = &topo->gpus[topo->n_gpus];
    memset(gpu, 0, sizeof(*gpu));
    strcpy(gpu->bdf, name); /* length checked above */
    status = wst_pci_path_read(sc->root, dev_dir, sc->lg, &gpu->pci);
    if (status == WST_OK)
        topo->n_gpus++;
    return status;
}

static wst_status_t scan_gpus(const char *root, const struct wst_logger *lg,
                              struct wst_topology *topo)
{
    struct gpu_scan sc = {.root = root, .lg = lg, .topo = topo};
    char bus_dir[PATH_MAX];
    wst_status_t status = WST_OK;

    snprintf(bus_dir, sizeof(bus_dir), "%s/bus/pci/devices", root);
    if (wst_sysfs_list(bus_dir, alphasort, scan_pci_device, &sc, &status) !=
        0) {
        if (errno == ENOENT) {
            WST_INFO(lg, "%s: none: no PCI bus, no GPUs", bus_dir);
            return WST_OK;
        }
        WST_ERROR(lg, "%s: cannot list the PCI devices: %s", bus_dir,
                  strerror(errno));
        return WST_ERR_IO;
    }
    return status;
}

wst_status_t wst_topology_scan(const char *root, const struct wst_logger *lg,
                               struct wst_topology *topo_p)
{
    struct wst_topology topo;
    wst_status_t status;

    memset(&topo, 0, sizeof(topo));
    if (root == NULL)
        root = "/sys";
    status = wst_rdma_ports_scan(root, lg, &topo);
    if (status != WST_OK)
        goto err_free_topology;
    status = scan_gpus(root, lg, &topo);
    if (status != WST_OK)
        goto err_free_topology;
    *topo_p = topo;
    return WST_OK;

err_free_topology:
    wst_topology_free(&topo);
    return status;
}

void wst_topology_free(struct wst_topology *topo)
{
    free(topo->ports);
    free(topo->gpus);
    memset(topo, 0, sizeof(*topo));
}

/* Normalizes bus_id into bdf (logged when malformed: -1) and finds the
 * GPU with it in topo (*gpu_p, NULL when none). */
static int find_gpu(const struct wst_topology *topo, const char *bus_id,
                    const struct wst_logger *lg, char *bdf, size_t bdf_len,
                    const struct wst_gpu **gpu_p)
{
    size_t i;

    *gpu_p = NULL;
    if (wst_pci_bdf_normalize(bus_id, bdf, bdf_len) != WST_OK) {
        WST_ERROR(lg, "gpu bus id '%s' is not 'dddd:bb:dd.f'", bus_id);
        return -1;
    }
    for (i = 0; i < topo->n_gpus; i++)
        if (strcmp(topo->gpus[i].bdf, bdf) == 0)
            *gpu_p = &topo->gpus[i];
    return 0;
}

const struct wst_gpu *wst_topology_gpu(const struct wst_topology *topo,
                                       const char *bus_id,
                                       const struct wst_logger *lg)
{
    char bdf[WST_PCI_NAME_MAX];
    const struct wst_gpu *found;

    if (find_gpu(topo, bus_id, lg, bdf, sizeof(bdf), &found) != 0)
        return NULL;
    if (found == NULL)
        WST_ERROR(lg, "gpu %s: no NVIDIA display device with that bus id", bdf);
    return found;
}

const struct wst_gpu *wst_topology_gpu_add(struct wst_topology *topo,
                                           const char *root, const char *bus_id,
                                           const struct wst_logger *lg)
{
    char bdf[WST_PCI_NAME_MAX], link[PATH_MAX];
    const struct wst_gpu *found;
    struct wst_gpu gpu;

    if (find_gpu(topo, bus_id, lg, bdf, sizeof(bdf), &found) != 0)
        return NULL;
    if (found != NULL)
        return found;
    if (root == NULL)
        root = "/sys";
    snprintf(link, sizeof(link), "%s/bus/pci/devices/%s", root, bdf);
    memset(&gpu, 0, sizeof(gpu));
    strcpy(gpu.bdf, bdf);
    if (wst_pci_path_read(root, link, lg, &gpu.pci) != WST_OK) {
        WST_ERROR(lg, "gpu %s: no PCI device with that bus id", bdf);
        return NULL;
    }
    if (wst_array_grow(&topo->gpus, &topo->cap_gpus, topo->n_gpus + 1,
                       sizeof(*topo->gpus)) != WST_OK) {
        WST_ERROR(lg, "gpu %s: out of memory", bdf);
        return NULL;
    }
    WST_INFO(lg, "gpu %s: taken by its bus id (not an NVIDIA display device)",
             bdf);
    topo->gpus[topo->n_gpus] = gpu;
    return &topo->gpus[topo->n_gpus++];
}
