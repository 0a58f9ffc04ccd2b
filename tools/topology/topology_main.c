/* topology_main.c - wstream-topology: prints this host's RDMA devices and
 * ports (state, speed, link layer, PCI function), its GPUs, the PCIe
 * distance class between each GPU and each port, and the ports chosen
 * per GPU as a UCX_NET_DEVICES value (common/nic_choice.h).
 *
 *   wstream-topology [--sysfs DIR] [--gpu BUS_ID]... [--no-verbs]
 *                    [--log-level LEVEL]
 *
 * --sysfs reads a fixture tree instead of /sys (tests); --gpu limits the
 * GPUs to those bus ids (nvidia-smi's form is taken; a PCI device that
 * is not an NVIDIA display device is taken as a GPU when named so);
 * --no-verbs skips
 * the libibverbs cross-check (never made on a tree other than /sys:
 * ibverbs sees this host's devices, not the tree's). On a host without RDMA
 * devices it says "no RDMA device: UCX chooses".
 *
 * Exit codes: 0 printed; 1 bad usage; otherwise -status of the failure
 * (a malformed sysfs tree: WST_ERR_IO, 15; an unknown --gpu:
 * WST_ERR_NOT_FOUND, 26), logged on stderr naming what was refused.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "nic_choice.h"
#include "pci_path.h"
#include "topo_verbs.h"
#include "topology.h"

#define MAX_GPU_ARGS 64

struct opts {
    const char *sysfs;
    const char *gpus[MAX_GPU_ARGS];
    int n_gpus;
    int no_verbs;
};

static void usage(FILE *out)
{
    fprintf(out, "usage: wstream-topology [--sysfs DIR] [--gpu BUS_ID]... "
                 "[--no-verbs] [--log-level error|warn|info|debug|trace]\n");
}

static void print_ports(const struct wst_topology *topo)
{
    const struct wst_rdma_port *p;
    size_t i;

    if (topo->n_devices == 0) {
        printf("no RDMA device: UCX chooses\n");
        return;
    }
    printf("rdma ports: %zu on %zu device(s)\n", topo->n_ports,
           topo->n_devices);
    for (i = 0; i < topo->n_ports; i++) {
        p = &topo->ports[i];
        printf("  NIC%-3zu %s:%u  %-6s  %g Gb/s  %s  pci %s  numa %d\n", i,
               p->device, p->port, p->state_name, p->rate_gbps, p->link_layer,
               p->pci.depth > 0 ? wst_pci_path_bdf(&p->pci) : "none",
               p->pci.numa_node);
    }
}

/* One GPU: its row of distances to every port, and its choice. */
static void print_gpu(const struct wst_topology *topo,
                      const struct wst_gpu *gpu, const struct wst_logger *lg)
{
    struct wst_nic_choice choice;
    size_t i;

    printf("  %s  numa %2d", gpu->bdf, gpu->pci.numa_node);
    for (i = 0; i < topo->n_ports; i++)
        printf(" %-5s", wst_pci_dist_name(
                            wst_pci_distance(&gpu->pci, &topo->ports[i].pci)));
    if (wst_nic_choose(topo, gpu, lg, &choice) == WST_OK)
        printf("  UCX_NET_DEVICES=%s (%s)\n", choice.net_devices,
               wst_pci_dist_name(choice.dist));
    else
        printf("  UCX chooses\n");
}

static void print_gpus_header(const struct wst_topology *topo, size_t n)
{
    size_t i;
    char col[32];

    printf("gpus: %zu\n", n);
    if (n == 0)
        return;
    printf("  %-12s  %-7s", "gpu", "numa");
    for (i = 0; i < topo->n_ports; i++) {
        snprintf(col, sizeof(col), "NIC%zu", i);
        printf(" %-5s", col);
    }
    printf("  choice\n");
}

static void print_verbs(const struct wst_topology *topo,
                        const struct wst_logger *lg)
{
    size_t n_devices, n_differ;

    if (wst_topology_verbs_check(topo, lg, &n_devices, &n_differ) != WST_OK) {
        printf("ibverbs: not built in (sysfs only)\n");
        return;
    }
    printf("ibverbs: %zu device(s) listed, %zu difference(s) from sysfs%s\n",
           n_devices, n_differ, n_differ > 0 ? " (see the log)" : "");
}

static int parse(int argc, char **argv, struct opts *o, struct wst_logger *lg)
{
    static const struct option longopts[] = {
        {"sysfs", required_argument, NULL, 's'},
        {"gpu", required_argument, NULL, 'g'},
        {"no-verbs", no_argument, NULL, 'n'},
        {"log-level", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int c, level;

    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            o->sysfs = optarg;
            break;
        case 'g':
            if (o->n_gpus == MAX_GPU_ARGS) {
                fprintf(stderr, "wstream-topology: more than %d --gpu\n",
                        MAX_GPU_ARGS);
                return -1;
            }
            o->gpus[o->n_gpus++] = optarg;
            break;
        case 'n':
            o->no_verbs = 1;
            break;
        case 'l':
            level = wst_log_level_parse(optarg);
            if (level < 0) {
                fprintf(stderr,
                        "wstream-topology: --log-level '%s' is not "
                        "error|warn|info|debug|trace\n",
                        optarg);
                return -1;
            }
            lg->level = (enum wst_log_level)level;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "wstream-topology: unexpected argument '%s'\n",
                argv[optind]);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {.sysfs = "/sys"};
    struct wst_topology topo;
    const struct wst_gpu *gpu;
    struct wst_logger lg;
    wst_status_t status;
    size_t i;
    int g;

    wst_logger_init(&lg, "topology", WST_LOG_WARN);
    if (parse(argc, argv, &o, &lg) != 0)
        return 1;
    status = wst_topology_scan(o.sysfs, &lg, &topo);
    if (status != WST_OK) {
        fprintf(stderr,
                "wstream-topology: cannot read the topology under "
                "%s: %s\n",
                o.sysfs, wst_status_string(status));
        return -status;
    }
    /* --gpu ids are all taken before anything is printed */
    for (g = 0; g < o.n_gpus; g++) {
        if (wst_topology_gpu_add(&topo, o.sysfs, o.gpus[g], &lg) == NULL) {
            status = WST_ERR_NOT_FOUND;
            goto out_free_topology;
        }
    }
    printf("sysfs: %s\n", o.sysfs);
    print_ports(&topo);
    if (strcmp(o.sysfs, "/sys") != 0)
        printf("ibverbs: not asked (a sysfs tree other than /sys)\n");
    else if (!o.no_verbs)
        print_verbs(&topo, &lg);
    print_gpus_header(&topo, o.n_gpus > 0 ? (size_t)o.n_gpus : topo.n_gpus);
    if (o.n_gpus > 0) {
        for (g = 0; g < o.n_gpus; g++) {
            gpu = wst_topology_gpu(&topo, o.gpus[g], &lg);
            print_gpu(&topo, gpu, &lg);
        }
    } else {
        for (i = 0; i < topo.n_gpus; i++)
            print_gpu(&topo, &topo.gpus[i], &lg);
    }

out_free_topology:
    wst_topology_free(&topo);
    return status == WST_OK ? 0 : -status;
}
