/* test_topology.c - RDMA ports, GPUs and their PCIe distances read from
 * sysfs fixture trees, and the NICs chosen per GPU (common/topology.h,
 * common/pci_path.h, common/nic_choice.h).
 *
 * Each case writes its fixture tree from a description
 * (tests/unit/fixtures/topology/<name>.topo, by mktree.sh there) into a
 * temporary directory, so the trees' symlinks need not live in git. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nic_choice.h"
#include "pci_path.h"
#include "topo_verbs.h"
#include "topology.h"
#include "worker.h"

#ifndef WST_TOPO_FIXTURES
#error "WST_TOPO_FIXTURES: the fixture descriptions' directory"
#endif

struct tree {
    char dir[256];
    char log[8192]; /* every line logged, one per line */
    struct wst_logger lg;
    struct wst_topology topo;
};

static void capture(void *arg, int level, const char *line)
{
    struct tree *t = arg;
    size_t len = strlen(t->log);

    (void)level;
    snprintf(t->log + len, sizeof(t->log) - len, "%s\n", line);
}

static int setup(void **state)
{
    const char *desc = *state, *base = getenv("TMPDIR");
    struct tree *t = calloc(1, sizeof(*t));
    char cmd[1024];

    if (t == NULL)
        return -1;
    snprintf(t->dir, sizeof(t->dir), "%s/test_topology.XXXXXX",
             base != NULL ? base : "/tmp");
    if (mkdtemp(t->dir) == NULL) {
        free(t);
        return -1;
    }
    snprintf(cmd, sizeof(cmd), "sh '%s/mktree.sh' '%s/%s' '%s/sys'",
             WST_TOPO_FIXTURES, WST_TOPO_FIXTURES, desc, t->dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "setup: '%s' failed\n", cmd);
        free(t);
        return -1;
    }
    strcat(t->dir, "/sys");
    wst_logger_init(&t->lg, "test", WST_LOG_DEBUG);
    t->lg.sink = capture;
    t->lg.sink_arg = t;
    *state = t;
    return 0;
}

static int teardown(void **state)
{
    struct tree *t = *state;
    char cmd[600];

    wst_topology_free(&t->topo);
    t->dir[strlen(t->dir) - 4] = '\0'; /* drop "/sys" */
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "teardown: '%s' failed\n", cmd);
    free(t);
    return 0;
}

/* Writes 'text' to <tree>/<rel>, replacing what was there. */
static void put_file(struct tree *t, const char *rel, const char *text)
{
    char path[600];
    FILE *fp;

    snprintf(path, sizeof(path), "%s/%s", t->dir, rel);
    fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void remove_file(struct tree *t, const char *rel)
{
    char path[600];

    snprintf(path, sizeof(path), "%s/%s", t->dir, rel);
    assert_int_equal(unlink(path), 0);
}

static void scan(struct tree *t)
{
    wst_topology_free(&t->topo);
    assert_int_equal(wst_topology_scan(t->dir, &t->lg, &t->topo), WST_OK);
}

static const struct wst_rdma_port *port_of(const struct tree *t,
                                           const char *dev, unsigned n)
{
    size_t i;

    for (i = 0; i < t->topo.n_ports; i++)
        if (t->topo.ports[i].port == n &&
            strcmp(t->topo.ports[i].device, dev) == 0)
            return &t->topo.ports[i];
    fail_msg("no port %s:%u", dev, n);
    return NULL;
}

static const struct wst_gpu *gpu_of(struct tree *t, const char *bus_id)
{
    const struct wst_gpu *gpu = wst_topology_gpu(&t->topo, bus_id, &t->lg);

    if (gpu == NULL)
        fail_msg("no gpu %s; log:\n%s", bus_id, t->log);
    return gpu;
}

/* Asserts the choice for one GPU. */
static void expect_choice(struct tree *t, const char *bus_id,
                          const char *net_devices, enum wst_pci_dist dist)
{
    struct wst_nic_choice c;

    assert_int_equal(wst_nic_choose(&t->topo, gpu_of(t, bus_id), &t->lg, &c),
                     WST_OK);
    assert_string_equal(c.net_devices, net_devices);
    assert_string_equal(wst_pci_dist_name(c.dist), wst_pci_dist_name(dist));
}

static enum wst_pci_dist dist_of(struct tree *t, const char *bus_id,
                                 const char *dev)
{
    return wst_pci_distance(&gpu_of(t, bus_id)->pci, &port_of(t, dev, 1)->pci);
}

static void test_topology_dgx_enumerates(void **state)
{
    static const char *const devs[] = {
        "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4",  "mlx5_5",
        "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9", "mlx5_10", "mlx5_11"};
    static const char *const gpus[] = {
        "0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0",
        "0000:9d:00.0", "0000:c3:00.0", "0000:d1:00.0", "0000:df:00.0"};
    struct tree *t = *state;
    const struct wst_rdma_port *p;
    size_t i;

    scan(t);
    assert_int_equal(t->topo.n_devices, 12);
    assert_int_equal(t->topo.n_ports, 12);
    for (i = 0; i < 12; i++) {
        p = &t->topo.ports[i];
        assert_string_equal(p->device, devs[i]);
        assert_int_equal(p->port, 1);
        assert_int_equal(p->state, WST_TOPO_PORT_ACTIVE);
        assert_string_equal(p->state_name, "ACTIVE");
    }
    p = port_of(t, "mlx5_0", 1);
    assert_true(p->rate_gbps == 400.0);
    assert_string_equal(p->link_layer, "InfiniBand");
    assert_string_equal(wst_pci_path_bdf(&p->pci), "0000:18:00.0");
    assert_int_equal(p->pci.numa_node, 0);
    assert_int_equal(p->pci.depth, 5);
    p = port_of(t, "mlx5_8", 1);
    assert_true(p->rate_gbps == 200.0);
    assert_string_equal(p->link_layer, "Ethernet");
    assert_string_equal(wst_pci_path_bdf(&p->pci), "0000:a7:00.1");
    assert_int_equal(p->pci.numa_node, 1);
    /* the NVSwitch function is NVIDIA but not a display device */
    assert_int_equal(t->topo.n_gpus, 8);
    for (i = 0; i < 8; i++) {
        assert_string_equal(t->topo.gpus[i].bdf, gpus[i]);
        assert_int_equal(t->topo.gpus[i].pci.numa_node, i < 4 ? 0 : 1);
    }
}

static void test_topology_dgx_choice_per_gpu(void **state)
{
    struct tree *t = *state;

    scan(t);
    expect_choice(t, "0000:1b:00.0", "mlx5_0:1", WST_PCI_PXB);
    expect_choice(t, "0000:43:00.0", "mlx5_3:1", WST_PCI_PXB);
    expect_choice(t, "0000:52:00.0", "mlx5_4:1", WST_PCI_PXB);
    expect_choice(t, "0000:61:00.0", "mlx5_5:1", WST_PCI_PXB);
    expect_choice(t, "0000:9d:00.0", "mlx5_6:1", WST_PCI_PXB);
    expect_choice(t, "0000:c3:00.0", "mlx5_9:1", WST_PCI_PXB);
    expect_choice(t, "0000:d1:00.0", "mlx5_10:1", WST_PCI_PXB);
    /* nvidia-smi's form of the bus id */
    expect_choice(t, "00000000:DF:00.0", "mlx5_11:1", WST_PCI_PXB);
}

static void test_topology_dgx_distance_classes(void **state)
{
    struct tree *t = *state;
    const struct wst_gpu *g0, *g1, *g4;

    scan(t);
    /* GPU0's row of the matrix: its NIC, the same socket's, the other's */
    assert_int_equal(dist_of(t, "0000:1b:00.0", "mlx5_0"), WST_PCI_PXB);
    assert_int_equal(dist_of(t, "0000:1b:00.0", "mlx5_1"), WST_PCI_NODE);
    assert_int_equal(dist_of(t, "0000:1b:00.0", "mlx5_2"), WST_PCI_NODE);
    assert_int_equal(dist_of(t, "0000:1b:00.0", "mlx5_3"), WST_PCI_NODE);
    assert_int_equal(dist_of(t, "0000:1b:00.0", "mlx5_5"), WST_PCI_NODE);
    assert_int_equal(dist_of(t, "0000:1b:00.0", "mlx5_6"), WST_PCI_SYS);
    assert_int_equal(dist_of(t, "0000:1b:00.0", "mlx5_7"), WST_PCI_SYS);
    assert_int_equal(dist_of(t, "0000:1b:00.0", "mlx5_11"), WST_PCI_SYS);
    /* GPU7's */
    assert_int_equal(dist_of(t, "0000:df:00.0", "mlx5_11"), WST_PCI_PXB);
    assert_int_equal(dist_of(t, "0000:df:00.0", "mlx5_8"), WST_PCI_NODE);
    assert_int_equal(dist_of(t, "0000:df:00.0", "mlx5_0"), WST_PCI_SYS);
    /* GPU to GPU over PCIe (NVLink is not the PCIe tree's business) */
    g0 = gpu_of(t, "0000:1b:00.0");
    g1 = gpu_of(t, "0000:43:00.0");
    g4 = gpu_of(t, "0000:9d:00.0");
    assert_int_equal(wst_pci_distance(&g0->pci, &g1->pci), WST_PCI_NODE);
    assert_int_equal(wst_pci_distance(&g0->pci, &g4->pci), WST_PCI_SYS);
    assert_int_equal(wst_pci_distance(&g0->pci, &g0->pci), WST_PCI_PIX);
}

/* The choice for the GPU with bus id 'bus_id' is empty: UCX chooses,
 * with 'bdf' named in the log line. */
static void expect_ucx_chooses(struct tree *t, const char *bus_id,
                               const char *bdf)
{
    struct wst_nic_choice c;
    char line[128];

    assert_int_equal(wst_nic_choose(&t->topo, gpu_of(t, bus_id), &t->lg, &c),
                     WST_ERR_NOT_FOUND);
    assert_int_equal(c.n, 0);
    assert_string_equal(c.net_devices, "");
    snprintf(line, sizeof(line), "gpu %s: no RDMA device: UCX chooses", bdf);
    assert_non_null(strstr(t->log, line));
}

static void test_topology_no_rdma_leaves_ucx(void **state)
{
    struct tree *t = *state;

    scan(t);
    assert_int_equal(t->topo.n_devices, 0);
    assert_int_equal(t->topo.n_ports, 0);
    /* the HDMI audio functions are NVIDIA but not GPUs */
    assert_int_equal(t->topo.n_gpus, 2);
    assert_string_equal(t->topo.gpus[0].bdf, "0000:01:00.0");
    assert_string_equal(t->topo.gpus[1].bdf, "0000:02:00.0");
    assert_int_equal(t->topo.gpus[0].pci.numa_node, -1);
    expect_ucx_chooses(t, "01:00.0", "0000:01:00.0");
}

static void test_topology_empty_class_dir_has_no_devices(void **state)
{
    struct tree *t = *state;
    char path[600];

    snprintf(path, sizeof(path), "%s/class", t->dir);
    assert_int_equal(mkdir(path, 0755), 0);
    strcat(path, "/infiniband");
    assert_int_equal(mkdir(path, 0755), 0);
    scan(t);
    assert_int_equal(t->topo.n_devices, 0);
    assert_int_equal(t->topo.n_gpus, 2);
}

/* The project's H200 machine, as its sysfs showed it: a VM with the RDMA
 * stack loaded and no device. */
static void test_topology_h200_vm_leaves_ucx(void **state)
{
    struct tree *t = *state;

    scan(t);
    assert_int_equal(t->topo.n_devices, 0);
    assert_int_equal(t->topo.n_gpus, 1);
    assert_string_equal(t->topo.gpus[0].bdf, "0000:00:06.0");
    assert_int_equal(t->topo.gpus[0].pci.depth, 2);
    expect_ucx_chooses(t, "00000000:00:06.0", "0000:00:06.0");
}

/* A GPU as Hyper-V VMs show it, its host bridge below firmware and VMBus
 * nodes: the path starts at the host bridge all the same. */
static void test_topology_vmbus_host_bridge(void **state)
{
    struct tree *t = *state;
    const struct wst_gpu *g;
    char cmd[1400];

    snprintf(cmd, sizeof(cmd),
             "cd '%s' && d=devices/LNXSYSTM:00/VMBUS:01/"
             "00000001-0000-0000-0000-000000000000/pci0001:00/0001:00:00.0 && "
             "mkdir -p $d && echo 0x10de >$d/vendor && "
             "echo 0x030200 >$d/class && echo 0 >$d/numa_node && "
             "ln -s ../../../$d bus/pci/devices/0001:00:00.0",
             t->dir);
    assert_int_equal(system(cmd), 0);
    scan(t);
    assert_int_equal(t->topo.n_gpus, 2);
    g = gpu_of(t, "0001:00:00.0");
    assert_int_equal(g->pci.depth, 2);
    assert_string_equal(g->pci.name[0], "pci0001:00");
    assert_int_equal(g->pci.numa_node, 0);
    assert_int_equal(wst_pci_distance(&g->pci, &t->topo.gpus[0].pci),
                     WST_PCI_SYS); /* numa 0 against -1 */
}

static void test_topology_port_down_falls_back(void **state)
{
    struct tree *t = *state;
    const struct wst_rdma_port *p;
    struct wst_nic_choice c;

    scan(t);
    assert_int_equal(t->topo.n_devices, 4);
    p = port_of(t, "mlx5_0", 1);
    assert_int_equal(p->state, 1);
    assert_string_equal(p->state_name, "DOWN");
    assert_true(p->rate_gbps == 0.0); /* no rate file: down, so kept */
    assert_int_equal(port_of(t, "rxe0", 1)->pci.depth, 0);
    assert_non_null(strstr(t->log, "rxe0: no PCI device"));
    assert_int_equal(dist_of(t, "0000:03:00.0", "mlx5_0"), WST_PCI_PIX);
    assert_int_equal(dist_of(t, "0000:03:00.0", "rxe0"), WST_PCI_UNKNOWN);
    /* its own NIC is down: the next nearest, not the faster far one */
    expect_choice(t, "0000:03:00.0", "mlx5_1:1", WST_PCI_PHB);
    expect_choice(t, "0000:07:00.0", "mlx5_1:1", WST_PCI_PIX);

    put_file(t, "class/infiniband/mlx5_1/ports/1/state", "1: DOWN\n");
    scan(t);
    expect_choice(t, "0000:03:00.0", "mlx5_2:1", WST_PCI_SYS);
    put_file(t, "class/infiniband/mlx5_2/ports/1/state", "2: INIT\n");
    scan(t);
    expect_choice(t, "0000:07:00.0", "rxe0:1", WST_PCI_UNKNOWN);
    put_file(t, "class/infiniband/rxe0/ports/1/state", "1: DOWN\n");
    scan(t);
    assert_int_equal(
        wst_nic_choose(&t->topo, gpu_of(t, "0000:07:00.0"), &t->lg, &c),
        WST_ERR_NOT_FOUND);
    assert_string_equal(c.net_devices, "");
    assert_non_null(strstr(
        t->log,
        "gpu 0000:07:00.0: no ACTIVE port on 4 RDMA device(s): UCX chooses"));
}

static void test_topology_two_nics_both_chosen(void **state)
{
    struct tree *t = *state;

    scan(t);
    assert_int_equal(t->topo.n_ports, 4);
    assert_int_equal(dist_of(t, "0000:03:00.0", "mlx5_2"), WST_PCI_PHB);
    /* both under the GPU's switch, the faster first; mlx5_1's second port
     * is down */
    expect_choice(t, "0000:03:00.0", "mlx5_1:1,mlx5_0:1", WST_PCI_PIX);
    /* equally fast: by name */
    put_file(t, "class/infiniband/mlx5_0/ports/1/rate",
             "400 Gb/sec (4X NDR)\n");
    scan(t);
    expect_choice(t, "0000:03:00.0", "mlx5_0:1,mlx5_1:1", WST_PCI_PIX);
    /* the second port up too: three ports */
    put_file(t, "class/infiniband/mlx5_1/ports/2/state", "4: ACTIVE\n");
    scan(t);
    expect_choice(t, "0000:03:00.0", "mlx5_0:1,mlx5_1:1,mlx5_1:2", WST_PCI_PIX);
}

/* The agent's --lane-devices auto: the GPU's nearest ports as a lane list
 * (one lane per NIC, nic_choice.h); none: "" and UCX chooses; a bus id no
 * PCI device has: an error. */
static void test_topology_two_nics_lane_devices(void **state)
{
    struct tree *t = *state;
    char out[256], dev[WST_WORKER_DEVICE_MAX], err[256];

    assert_int_equal(
        wst_nic_lane_devices(t->dir, "0000:03:00.0", &t->lg, out, sizeof(out)),
        WST_OK);
    assert_string_equal(out, "mlx5_1:1,mlx5_0:1");
    /* a list the worker takes: lane 1 on the second NIC */
    assert_int_equal(wst_worker_lane_device_pick(out, 1, dev, err, sizeof(err)),
                     WST_OK);
    assert_string_equal(dev, "mlx5_0:1");
    assert_int_equal(
        wst_nic_lane_devices(t->dir, "0000:7f:00.0", &t->lg, out, sizeof(out)),
        WST_ERR_NOT_FOUND);
    assert_string_equal(out, "");
    assert_int_equal(
        wst_nic_lane_devices(t->dir, "0000:03:00.0", &t->lg, out, 8),
        WST_ERR_INVALID);
}

static void test_topology_no_rdma_lane_devices(void **state)
{
    struct tree *t = *state;
    char out[256] = "x";

    assert_int_equal(
        wst_nic_lane_devices(t->dir, "0000:01:00.0", &t->lg, out, sizeof(out)),
        WST_OK);
    assert_string_equal(out, "");
    if (strstr(t->log, "UCX chooses") == NULL)
        fail_msg("expected 'UCX chooses' in the log:\n%s", t->log);
}

/* A scan of a malformed tree fails with 'status', logs 'msg', and leaves
 * the caller's topology as it was. */
static void expect_refused(struct tree *t, wst_status_t status, const char *msg)
{
    struct wst_topology topo = {.n_ports = 12345};

    t->log[0] = '\0';
    assert_int_equal(wst_topology_scan(t->dir, &t->lg, &topo), status);
    assert_int_equal(topo.n_ports, 12345);
    assert_null(topo.ports);
    if (strstr(t->log, msg) == NULL)
        fail_msg("expected '%s' in the log:\n%s", msg, t->log);
}

static void test_topology_malformed_refused(void **state)
{
    struct tree *t = *state;
    char path[600];

    /* the rate of an ACTIVE port (mlx5_1) */
    remove_file(t, "class/infiniband/mlx5_1/ports/1/rate");
    expect_refused(t, WST_ERR_IO,
                   "mlx5_1/ports/1/rate: cannot read the rate of an ACTIVE "
                   "port: No such file");
    put_file(t, "class/infiniband/mlx5_1/ports/1/rate", "fast\n");
    expect_refused(t, WST_ERR_IO,
                   "mlx5_1/ports/1/rate: rate 'fast' is not '<number> "
                   "Gb/sec'");
    remove_file(t, "class/infiniband/mlx5_1/ports/1/rate");
    snprintf(path, sizeof(path), "%s/class/infiniband/mlx5_1/ports/1/rate",
             t->dir);
    assert_int_equal(mkdir(path, 0755), 0); /* there, but unreadable */
    expect_refused(t, WST_ERR_IO,
                   "mlx5_1/ports/1/rate: cannot read the rate of an ACTIVE "
                   "port: Is a directory");
    assert_int_equal(rmdir(path), 0);
    put_file(t, "class/infiniband/mlx5_1/ports/1/rate",
             "200 Gb/sec (4X HDR)\n");
    /* a DOWN port's rate may be anything: not used */
    put_file(t, "class/infiniband/mlx5_0/ports/1/rate", "fast\n");

    /* the state (mlx5_2) */
    put_file(t, "class/infiniband/mlx5_2/ports/1/state", "ACTIVE\n");
    expect_refused(t, WST_ERR_IO,
                   "mlx5_2/ports/1/state: port state 'ACTIVE' is not "
                   "'<n>: <NAME>'");
    remove_file(t, "class/infiniband/mlx5_2/ports/1/state");
    expect_refused(t, WST_ERR_IO,
                   "mlx5_2/ports/1/state: cannot read the port state");
    put_file(t, "class/infiniband/mlx5_2/ports/1/state", "4: ACTIVE\n");

    /* the PCI function gone from under the device, or not a PCI one */
    snprintf(path, sizeof(path), "%s/class/infiniband/mlx5_2/device", t->dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(symlink("../../../0000:99:00.0", path), 0);
    expect_refused(t, WST_ERR_NOT_FOUND, "mlx5_2/device: No such file");
    assert_int_equal(unlink(path), 0);
    assert_int_equal(symlink("../../../../../../bus", path), 0);
    expect_refused(t, WST_ERR_IO, "not to a PCI device under a host bridge");
    assert_int_equal(unlink(path), 0);
    assert_int_equal(symlink("../../../0000:81:00.0", path), 0);

    /* no ports directory */
    snprintf(path, sizeof(path), "rm -r '%s/class/infiniband/rxe0/ports/'",
             t->dir);
    assert_int_equal(system(path), 0);
    expect_refused(t, WST_ERR_IO, "rxe0/ports: cannot list the ports");
    snprintf(path, sizeof(path), "%s/class/infiniband/rxe0/ports", t->dir);
    assert_int_equal(mkdir(path, 0755), 0);
    strcat(path, "/1");
    assert_int_equal(mkdir(path, 0755), 0);
    put_file(t, "class/infiniband/rxe0/ports/1/state", "1: DOWN\n");

    /* whole again: the scan works */
    scan(t);
    assert_int_equal(t->topo.n_ports, 4);
    assert_true(port_of(t, "mlx5_0", 1)->rate_gbps == 0.0);
    expect_choice(t, "0000:07:00.0", "mlx5_1:1", WST_PCI_PIX);
}

static void test_topology_bus_ids(void **state)
{
    struct tree *t = *state;
    char out[32] = "untouched";

    assert_int_equal(
        wst_pci_bdf_normalize("00000000:1B:00.0", out, sizeof(out)), WST_OK);
    assert_string_equal(out, "0000:1b:00.0");
    assert_int_equal(wst_pci_bdf_normalize("1b:00.0", out, sizeof(out)),
                     WST_OK);
    assert_string_equal(out, "0000:1b:00.0");
    assert_int_equal(wst_pci_bdf_normalize("0001:c3:1f.7", out, sizeof(out)),
                     WST_OK);
    assert_string_equal(out, "0001:c3:1f.7");
    strcpy(out, "untouched");
    assert_int_equal(wst_pci_bdf_normalize("", out, sizeof(out)),
                     WST_ERR_INVALID);
    assert_int_equal(wst_pci_bdf_normalize("gpu0", out, sizeof(out)),
                     WST_ERR_INVALID);
    assert_int_equal(wst_pci_bdf_normalize("1b:00.8", out, sizeof(out)),
                     WST_ERR_INVALID);
    assert_int_equal(wst_pci_bdf_normalize("1b:00.0 ", out, sizeof(out)),
                     WST_ERR_INVALID);
    assert_int_equal(wst_pci_bdf_normalize("100:00.0", out, sizeof(out)),
                     WST_ERR_INVALID);
    assert_string_equal(out, "untouched");

    scan(t);
    assert_null(wst_topology_gpu(&t->topo, "0000:04:00.0", &t->lg));
    assert_non_null(strstr(
        t->log, "gpu 0000:04:00.0: no NVIDIA display device with that bus id"));
    assert_null(wst_topology_gpu(&t->topo, "gpu0", &t->lg));
    assert_non_null(strstr(t->log, "gpu bus id 'gpu0' is not 'dddd:bb:dd.f'"));
}

/* A GPU given by bus id: one the scan found is not added twice; another
 * PCI device is taken as the caller says; a bus id nothing has is
 * refused and changes nothing. */
static void test_topology_gpu_by_bus_id(void **state)
{
    struct tree *t = *state;
    const struct wst_gpu *g;
    struct wst_nic_choice c;

    scan(t);
    g = wst_topology_gpu_add(&t->topo, t->dir, "00000000:03:00.0", &t->lg);
    assert_non_null(g);
    assert_int_equal(t->topo.n_gpus, 1);
    /* the root port above mlx5_2, as if it were a GPU */
    g = wst_topology_gpu_add(&t->topo, t->dir, "0000:00:02.0", &t->lg);
    assert_non_null(g);
    assert_int_equal(t->topo.n_gpus, 2);
    assert_string_equal(g->bdf, "0000:00:02.0");
    assert_non_null(strstr(t->log, "gpu 0000:00:02.0: taken by its bus id"));
    assert_int_equal(wst_nic_choose(&t->topo, g, &t->lg, &c), WST_OK);
    assert_string_equal(c.net_devices, "mlx5_2:1");
    assert_string_equal(wst_pci_dist_name(c.dist), "PIX");
    assert_null(wst_topology_gpu_add(&t->topo, t->dir, "0000:09:00.0", &t->lg));
    assert_non_null(
        strstr(t->log, "gpu 0000:09:00.0: no PCI device with that bus id"));
    assert_null(wst_topology_gpu_add(&t->topo, t->dir, "09.0", &t->lg));
    assert_int_equal(t->topo.n_gpus, 2);
}

/* This host's own /sys: whatever it has, the scan reads it and the verbs
 * cross-check (where built) runs over it. Differences are printed, not
 * failed: a device without a user-space provider, or a port changing state
 * in between, is the host's, not the scan's (the fixtures check the
 * scan). Its own CTest entry (--host) exits 77 without libibverbs, so
 * that CTest shows it skipped. */
static void test_topology_this_host(void **state)
{
    struct tree *t = *state;
    size_t n_devices = 0, n_differ = 0, i;
    wst_status_t status;

    assert_int_equal(wst_topology_scan("/sys", &t->lg, &t->topo), WST_OK);
    status = wst_topology_verbs_check(&t->topo, &t->lg, &n_devices, &n_differ);
    assert_int_equal(status, WST_OK);
    print_message("this host: %zu RDMA device(s) in sysfs, %zu listed by "
                  "ibverbs, %zu difference(s), %zu gpu(s)\n",
                  t->topo.n_devices, n_devices, n_differ, t->topo.n_gpus);
    for (i = 0; i < t->topo.n_ports; i++)
        print_message("  %s:%u %s\n", t->topo.ports[i].device,
                      t->topo.ports[i].port, t->topo.ports[i].state_name);
}

#define FIXTURE(f, desc)                                                       \
    cmocka_unit_test_prestate_setup_teardown(f, setup, teardown, (desc))

/* Whether the verbs cross-check was built (the stub says unsupported). */
static int verbs_built(void)
{
    struct wst_topology none;
    struct wst_logger lg;
    size_t n_devices = 0, n_differ = 0;

    memset(&none, 0, sizeof(none));
    wst_logger_init(&lg, "test", WST_LOG_ERROR);
    return wst_topology_verbs_check(&none, &lg, &n_devices, &n_differ) !=
           WST_ERR_UNSUPPORTED;
}

/* test_topology: the fixtures; test_topology --host: this host's /sys,
 * exit 77 (skipped) when built without libibverbs. */
int main(int argc, char **argv)
{
    const struct CMUnitTest host[] = {
        FIXTURE(test_topology_this_host, "no-rdma.topo"),
    };
    const struct CMUnitTest tests[] = {
        FIXTURE(test_topology_dgx_enumerates, "dgx-h100.topo"),
        FIXTURE(test_topology_dgx_choice_per_gpu, "dgx-h100.topo"),
        FIXTURE(test_topology_dgx_distance_classes, "dgx-h100.topo"),
        FIXTURE(test_topology_no_rdma_leaves_ucx, "no-rdma.topo"),
        FIXTURE(test_topology_empty_class_dir_has_no_devices, "no-rdma.topo"),
        FIXTURE(test_topology_h200_vm_leaves_ucx, "h200-vm.topo"),
        FIXTURE(test_topology_vmbus_host_bridge, "h200-vm.topo"),
        FIXTURE(test_topology_port_down_falls_back, "port-down.topo"),
        FIXTURE(test_topology_two_nics_both_chosen, "two-nics.topo"),
        FIXTURE(test_topology_two_nics_lane_devices, "two-nics.topo"),
        FIXTURE(test_topology_no_rdma_lane_devices, "no-rdma.topo"),
        FIXTURE(test_topology_malformed_refused, "port-down.topo"),
        FIXTURE(test_topology_bus_ids, "two-nics.topo"),
        FIXTURE(test_topology_gpu_by_bus_id, "two-nics.topo"),
    };

    if (argc > 1 && strcmp(argv[1], "--host") == 0) {
        if (!verbs_built()) {
            fprintf(stderr, "SKIPPED: built without libibverbs: this "
                            "host's RDMA ports are not cross-checked\n");
            return 77;
        }
        return cmocka_run_group_tests(host, NULL, NULL);
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
