/* topology_main.c - wstream-topology: prints this host's RDMA devices and
 * ports (state, speed, link layer, PCI function), its GPUs, the PCIe
 * distance class between each GPU and each port, and the ports chosen
 * per GPU as a UCX_NET_DEVICES value (common/nic_choice.h).
 *
 *   wstream-topology [--sysfs DIR] [--gpu BUS_ID[,BUS_ID]...] [--no-verbs]
 *                    [--log-level LEVEL] [--print-config] [--help]
 *
 * Options come from one table (common/config.h), so each also reads a
 * WST_<NAME> environment variable. --sysfs reads a fixture tree instead
 * of /sys (tests); --gpu limits the GPUs to those bus ids, comma-separated
 * (nvidia-smi's form is taken; a PCI device that is not an NVIDIA display
 * device is taken as a GPU when named so); --no-verbs skips the
 * libibverbs cross-check (never made on a tree other than /sys: ibverbs
 * sees this host's devices, not the tree's). On a host without RDMA
 * devices it says "no RDMA device: UCX chooses".
 *
 * Exit codes: 0 printed; 2 bad usage (as every wstream program);
 * otherwise -status of the failure (a malformed sysfs tree: WST_ERR_IO,
 * 15; an unknown --gpu: WST_ERR_NOT_FOUND, 26), logged on stderr naming
 * what was refused.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "nic_choice.h"
#include "pci_path.h"
#include "topo_verbs.h"
#include "topology.h"

#define MAX_GPU_ARGS 64
#define PROG "wstream-topology"

struct settings {
    char *sysfs;
    char *gpu; /* comma-separated bus ids; "" for every GPU */
    int no_verbs;
    int log_level;
};

static const struct wst_config_entry topology_config[] = {
    {"sysfs", WST_CONFIG_STRING, "/sys",
     "read this sysfs tree (a test fixture) instead of /sys",
     offsetof(struct settings, sysfs), NULL, NULL},
    {"gpu", WST_CONFIG_STRING, "",
     "only these GPUs, by PCI bus id (nvidia-smi's form too), "
     "comma-separated; a device that is not an NVIDIA display device is "
     "taken when named",
     offsetof(struct settings, gpu), NULL, NULL},
    {"no-verbs", WST_CONFIG_BOOL, "no",
     "skip the libibverbs cross-check of /sys",
     offsetof(struct settings, no_verbs), NULL, NULL},
    {"log-level", WST_CONFIG_ENUM, "warn", "log level (on stderr)",
     offsetof(struct settings, log_level), wst_log_level_names, NULL},
    WST_CONFIG_END,
};

struct opts {
    const char *sysfs;
    const char *gpus[MAX_GPU_ARGS];
    int n_gpus;
    int no_verbs;
};

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

/* Splits set->gpu (modified in place) into o->gpus. A repeated --gpu
 * would keep only its last value (the table stores one string), so it is
 * refused rather than dropping GPUs unseen. -1 (said on stderr) on bad
 * usage. */
static int take_gpus(int argc, char **argv, struct settings *set,
                     struct opts *o)
{
    char *save = NULL, *id;
    int n_flags = 0;

    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        n_flags +=
            strcmp(argv[i], "--gpu") == 0 || strncmp(argv[i], "--gpu=", 6) == 0;
    if (n_flags > 1) {
        fprintf(stderr,
                PROG ": --gpu given %d times: give the bus ids once, "
                     "comma-separated\n",
                n_flags);
        return -1;
    }
    if (set->gpu[0] == '\0')
        return 0;
    if (set->gpu[0] == ',' || set->gpu[strlen(set->gpu) - 1] == ',' ||
        strstr(set->gpu, ",,") != NULL) {
        fprintf(stderr, PROG ": --gpu '%s': an empty bus id\n", set->gpu);
        return -1;
    }
    for (id = strtok_r(set->gpu, ",", &save); id != NULL;
         id = strtok_r(NULL, ",", &save)) {
        if (o->n_gpus == MAX_GPU_ARGS) {
            fprintf(stderr, PROG ": --gpu: more than %d bus ids\n",
                    MAX_GPU_ARGS);
            return -1;
        }
        o->gpus[o->n_gpus++] = id;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct settings set;
    struct opts o = {0};
    struct wst_topology topo;
    const struct wst_gpu *gpu;
    struct wst_logger lg;
    wst_status_t status;
    size_t i;
    int g, rc;

    memset(&set, 0, sizeof(set));
    wst_config_cli(topology_config, &set, argc, argv, PROG,
                   PROG " [--sysfs DIR] [--gpu BUS_ID[,BUS_ID]...] "
                        "[--no-verbs] [--log-level LEVEL]\n\n"
                        "exit codes: 0 printed; 2 bad usage; otherwise the\n"
                        "  negated wst_status_t (15 a malformed sysfs tree,\n"
                        "  26 an unknown --gpu)",
                   &rc);
    if (rc >= 0)
        goto out_release;
    rc = 2;
    if (take_gpus(argc, argv, &set, &o) != 0)
        goto out_release;
    o.sysfs = set.sysfs;
    o.no_verbs = set.no_verbs;
    wst_logger_init(&lg, "topology", (enum wst_log_level)set.log_level);
    status = wst_topology_scan(o.sysfs, &lg, &topo);
    if (status != WST_OK) {
        fprintf(stderr,
                PROG ": cannot read the topology under "
                     "%s: %s\n",
                o.sysfs, wst_status_string(status));
        rc = -status;
        goto out_release;
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
    rc = status == WST_OK ? 0 : -status;
out_release:
    wst_config_release(topology_config, &set);
    return rc;
}
