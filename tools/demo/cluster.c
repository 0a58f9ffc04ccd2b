/* cluster.c - agent and sender processes for the demo, bench and faults.
 * (setns needs _GNU_SOURCE, which the build defines.) */
#include "cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wstream/sender.h>

#include "auth.h"
#include "clock.h"
#include "dtype.h"
#include "gpu.h"
#include "gpu_probe.h"
#include "log.h"
#include "shm.h"
#include "thread_cpu.h"

/* ---- sender processes ---- */

struct sender_ctx {
    const struct wst_cluster *c;
    uint32_t rank;
    struct wst_have *haves;
    size_t n_haves;
    void **bufs;  /* host: filled by the data generator */
    void **dbufs; /* with sender devices: the shards the sender reads */
    wst_gpu_stream_t stream;
    wst_gpu_event_t ready; /* recorded after the copies into dbufs */
    struct wst_logger gpu_log;
    wst_sender_t *sender;
};

/* Trainer shards on the GPU: the host fill is copied there as a training
 * step's output would be written, asynchronously, and the push waits for
 * it through the ready event (wst_sender_push_after). */
static int sender_device_copy(struct sender_ctx *x)
{
    const struct wst_logger *log = &x->gpu_log;

    for (size_t i = 0; i < x->n_haves; i++) {
        uint64_t bytes = wst_model_shard_bytes(&x->haves[i]);
        if (bytes > 0 && wst_gpu_copy_async(log, x->dbufs[i], x->bufs[i], bytes,
                                            x->stream) != WST_OK)
            return -1;
    }
    return wst_gpu_event_record(log, x->ready, x->stream) == WST_OK ? 0 : -1;
}

static int sender_device_setup(struct sender_ctx *x)
{
    const struct wst_logger *log = &x->gpu_log;

    x->dbufs = calloc(x->n_haves ? x->n_haves : 1, sizeof(*x->dbufs));
    if (x->dbufs == NULL ||
        wst_gpu_set_device(
            log, x->c->p.sender_devices[x->rank % x->c->p.n_sender_devices]) !=
            WST_OK ||
        wst_gpu_stream_create(log, &x->stream) != WST_OK ||
        wst_gpu_event_create(log, 0, &x->ready) != WST_OK)
        return -1;
    for (size_t i = 0; i < x->n_haves; i++) {
        uint64_t bytes = wst_model_shard_bytes(&x->haves[i]);
        if (wst_gpu_malloc(log, bytes ? bytes : 1, &x->dbufs[i]) != WST_OK)
            return -1;
    }
    return 0;
}

static void sender_device_free(struct sender_ctx *x)
{
    for (size_t i = 0; x->dbufs != NULL && i < x->n_haves; i++)
        wst_gpu_free(x->dbufs[i]);
    free(x->dbufs);
    wst_gpu_event_destroy(x->ready);
    wst_gpu_stream_destroy(x->stream);
}

/* What `ip netns exec` does, in this process: join the namespace, then
 * remount /sys in a private mount namespace. UCX lists TCP devices from
 * /sys/class/net, which otherwise still shows the root namespace's. */
static int join_netns(const char *name)
{
    char path[256];
    int fd;

    snprintf(path, sizeof(path), "/var/run/netns/%s", name);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0)
        goto err;
    close(fd);
    fd = -1;
    if (unshare(CLONE_NEWNS) != 0 ||
        mount("", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        umount2("/sys", MNT_DETACH) != 0 ||
        mount(name, "/sys", "sysfs", 0, NULL) != 0)
        goto err;
    return 0;

err:
    fprintf(stderr, "cluster: cannot enter network namespace %s: %s\n", name,
            strerror(errno));
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Allocates and registers every shard; *register_s gets the time spent in
 * wst_sender_register alone (the fill that touches the pages is not
 * registration). */
static int sender_register(struct sender_ctx *x, double *register_s)
{
    int on_device = x->c->p.n_sender_devices > 0;

    *register_s = 0;
    if (on_device && sender_device_setup(x) != 0)
        return -1;
    for (size_t i = 0; i < x->n_haves; i++) {
        const struct wst_have *h = &x->haves[i];
        uint64_t bytes = wst_model_shard_bytes(h);
        x->bufs[i] = malloc(bytes ? bytes : 1);
        if (x->bufs[i] == NULL)
            return -1;
        /* Touch every page now: first-touch faults are not refit work. */
        wst_model_fill_shard(h, x->c->p.seed, 0, x->bufs[i]);
        struct wst_shard sh = wst_model_shard(h, x->bufs[i]);
        if (on_device) {
            sh.data = x->dbufs[i];
            sh.mem_type = WST_MEM_CUDA;
        }
        double t0 = wst_now_s();
        wst_status_t st = wst_sender_register(x->sender, &sh);
        *register_s += wst_now_s() - t0;
        if (st != WST_OK)
            return -1;
    }
    return 0;
}

/* --fault kill-sender:LAYER: die as a trainer rank would, mid-layer; the
 * campaign's trigger: tell the caller, mid-layer, to inject its fault. */
static void sender_progress(void *arg, size_t receiver, uint32_t layer,
                            uint64_t version)
{
    const struct sender_ctx *x = arg;
    const struct wst_cluster_params *p = &x->c->p;

    (void)receiver;
    if (p->kill_version != 0 && x->rank == p->kill_sender &&
        layer == p->kill_layer && version == p->kill_version) {
        fprintf(stderr,
                "sender %u: fault injected: SIGKILL while streaming "
                "layer %u of version %llu\n",
                x->rank, layer, (unsigned long long)version);
        raise(SIGKILL);
    }
    if (p->trigger_version != 0 && x->rank == p->trigger_sender &&
        layer == p->trigger_layer && version == p->trigger_version) {
        static int fired;
        if (fired++)
            return;
        fprintf(stderr,
                "sender %u: fault trigger at layer %u of version %llu\n",
                x->rank, layer, (unsigned long long)version);
        if (write(p->trigger_fd, "T", 1) != 1)
            fprintf(stderr, "sender %u: trigger write: %s\n", x->rank,
                    strerror(errno));
        if (p->trigger_self_signal != 0)
            raise(p->trigger_self_signal);
    }
}

static int sender_setup(struct sender_ctx *x, double *register_s)
{
    const struct wst_cluster_params *p = &x->c->p;
    /* the sender copies them: freed once it is created */
    char(*addrs)[300] = calloc(p->n_receivers, sizeof(*addrs));
    const char **recv = calloc(p->n_receivers, sizeof(*recv));
    wst_status_t st;

    if (addrs == NULL || recv == NULL)
        goto err_free_addrs;
    for (uint32_t k = 0; k < p->n_receivers; k++) {
        snprintf(addrs[k], sizeof(addrs[k]), "%s:%u",
                 p->agent_host ? p->agent_host : "127.0.0.1",
                 x->c->agents[k].port);
        recv[k] = addrs[k];
    }
    if (wst_model_trainer_shards_tp(p->model, x->rank, p->n_senders,
                                    p->trainer_tp, &x->haves,
                                    &x->n_haves) != WST_OK)
        goto err_free_addrs;
    struct wst_sender_params sp = {
        .field_mask = WST_SENDER_PARAM_RANK | WST_SENDER_PARAM_WORLD_SIZE |
                      WST_SENDER_PARAM_RECEIVERS | WST_SENDER_PARAM_TIMEOUT |
                      WST_SENDER_PARAM_MOVER | WST_SENDER_PARAM_LOG |
                      WST_SENDER_PARAM_PROGRESS | WST_SENDER_PARAM_AUTH,
        .rank = x->rank,
        .world_size = p->n_senders,
        .receivers = recv,
        .n_receivers = p->n_receivers,
        .timeout_s = p->timeout_s,
        .mover = p->mover,
        .log_level = p->log_level,
        .shm_data = p->shm_data,
        .progress_fn = sender_progress,
        .progress_arg = x,
        .auth_secret_file = x->c->secret_file,
    };
    if (p->shm_data)
        sp.field_mask |= WST_SENDER_PARAM_SHM_DATA;
    if (p->window_bytes != 0) {
        sp.field_mask |= WST_SENDER_PARAM_WINDOW;
        sp.window_bytes = p->window_bytes;
    }
    if (p->lanes != 0) {
        sp.field_mask |= WST_SENDER_PARAM_LANES;
        sp.lanes = p->lanes;
    }
    if (p->sender_lane_devices != NULL) {
        sp.field_mask |= WST_SENDER_PARAM_LANE_DEVICES;
        sp.lane_devices = p->sender_lane_devices;
    }
    if (p->digest_threads != 0) {
        sp.field_mask |= WST_SENDER_PARAM_DIGEST_THREADS;
        sp.digest_threads = p->digest_threads;
    }
    if (p->device_path != NULL) {
        sp.field_mask |= WST_SENDER_PARAM_DEVICE_PATH;
        sp.device_path = p->device_path;
    }
    if (p->heartbeat_s > 0 && p->peer_timeout_s > 0) {
        sp.field_mask |= WST_SENDER_PARAM_HEARTBEAT;
        sp.heartbeat_s = p->heartbeat_s;
        sp.peer_timeout_s = p->peer_timeout_s;
    }
    st = wst_sender_create(&sp, &x->sender);
    free(addrs);
    free(recv);
    if (st != WST_OK)
        return -1;
    x->bufs = calloc(x->n_haves ? x->n_haves : 1, sizeof(*x->bufs));
    if (x->bufs == NULL)
        return -1;
    return sender_register(x, register_s);

err_free_addrs:
    free(addrs);
    free(recv);
    return -1;
}

/* The "connect" command: connections, manifests and plans with every
 * receiver, timed; one line "connected status seconds error". */
static void sender_connect(struct sender_ctx *x, FILE *out)
{
    double t0 = wst_now_s();
    wst_status_t st = wst_sender_connect(x->sender);

    fprintf(out, "connected %d %.6f %s\n", (int)st, wst_now_s() - t0,
            st == WST_OK ? "" : wst_sender_last_error(x->sender));
    fflush(out);
}

/* One line per version:
 * "status bytes seconds end_ns push_seconds mover|lanes|error" */
static void sender_push(struct sender_ctx *x, uint64_t version, FILE *out)
{
    const struct wst_cluster_params *p = &x->c->p;

    for (size_t i = 0; i < x->n_haves; i++)
        wst_model_fill_shard(&x->haves[i], p->seed, version, x->bufs[i]);
    wst_status_t st = WST_OK;
    if (p->n_sender_devices > 0 && sender_device_copy(x) != 0)
        st = WST_ERR_NO_DEVICE;
    /* The copies are enqueued, not done: the push waits for them. */
    double t0 = wst_now_s();
    if (st == WST_OK)
        st = wst_sender_push_after(x->sender, version,
                                   p->n_sender_devices > 0 ? x->ready : NULL);
    double push_s = wst_now_s() - t0;
    if (st == WST_OK)
        st = wst_sender_wait(x->sender, p->timeout_s);
    uint64_t end = wst_now_ns();
    const char *lanes = wst_sender_lanes(x->sender, 0);
    const char *mover = wst_sender_mover(x->sender, 0);
    fprintf(out, "%d %llu %.6f %llu %.6f %s|%s|%s\n", (int)st,
            (unsigned long long)wst_sender_bytes_moved(x->sender),
            (double)end / 1e9 - t0, (unsigned long long)end, push_s,
            mover ? mover : "-", lanes ? lanes : "-",
            st == WST_OK ? "" : wst_sender_last_error(x->sender));
    fflush(out);
}

static int sender_main(const struct wst_cluster *c, uint32_t rank, int cmd_fd,
                       int res_fd)
{
    struct sender_ctx x = {.c = c, .rank = rank};
    FILE *in = fdopen(cmd_fd, "r");
    FILE *out = fdopen(res_fd, "w");
    unsigned long long version;
    double reg_s = 0;

    if (in == NULL || out == NULL)
        return 1;
    wst_logger_init(&x.gpu_log, "demo-sender", WST_LOG_WARN);
    if ((c->p.sender_netns != NULL && join_netns(c->p.sender_netns) != 0) ||
        sender_setup(&x, &reg_s) != 0) {
        fprintf(out, "failed\n");
        fflush(out);
        return 1;
    }
    fprintf(out, "ready %.6f\n", reg_s);
    fflush(out);
    char cmd[64];
    while (fgets(cmd, sizeof(cmd), in) != NULL) {
        if (strcmp(cmd, "connect\n") == 0)
            sender_connect(&x, out);
        else if (sscanf(cmd, "%llu", &version) == 1)
            sender_push(&x, version, out);
        else
            break;
    }
    wst_sender_destroy(x.sender);
    sender_device_free(&x);
    for (size_t i = 0; i < x.n_haves; i++)
        free(x.bufs[i]);
    free(x.bufs);
    free(x.haves);
    return 0;
}

static int read_line(int fd, char *buf, size_t len, double timeout_s)
{
    uint64_t deadline = wst_deadline_ns(timeout_s);
    size_t n = 0;

    while (n + 1 < len) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        uint64_t now = wst_now_ns();
        int ms = now >= deadline ? 0 : (int)((deadline - now) / 1000000) + 1;
        if (poll(&pfd, 1, ms) <= 0)
            return -1;
        ssize_t r = read(fd, buf + n, 1);
        if (r <= 0)
            return -1;
        if (buf[n] == '\n')
            break;
        n++;
    }
    buf[n] = '\0';
    return 0;
}

static void close_other_senders(struct wst_cluster *c, uint32_t self)
{
    for (uint32_t j = 0; j < c->p.n_senders; j++) {
        if (j == self || c->senders[j].pid <= 0)
            continue;
        close(c->senders[j].cmd_fd);
        close(c->senders[j].res_fd);
    }
}

/* Forks sender r; sender_wait_ready then waits for its "ready". */
static int sender_fork(struct wst_cluster *c, uint32_t r)
{
    struct wst_cluster_sender *s = &c->senders[r];
    int cmd[2], res[2];

    /* Close-on-exec: an agent started later must not inherit a sender's
     * command pipe, or the sender never sees end-of-file. */
    if (pipe2(cmd, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(res, O_CLOEXEC) != 0) {
        close(cmd[0]);
        close(cmd[1]);
        return -1;
    }
    s->pid = fork();
    if (s->pid < 0)
        return -1;
    if (s->pid == 0) {
        close(cmd[1]);
        close(res[0]);
        close_other_senders(c, r);
        _exit(sender_main(c, r, cmd[0], res[1]));
    }
    close(cmd[0]);
    close(res[1]);
    s->cmd_fd = cmd[1];
    s->res_fd = res[0];
    return 0;
}

static int sender_wait_ready(struct wst_cluster *c, uint32_t r)
{
    struct wst_cluster_sender *s = &c->senders[r];
    char line[128];

    if (read_line(s->res_fd, line, sizeof(line), 120.0) != 0 ||
        sscanf(line, "ready %lf", &s->register_seconds) != 1) {
        fprintf(stderr, "cluster: sender %u failed to start\n", r);
        return -1;
    }
    return 0;
}

static int sender_spawn(struct wst_cluster *c, uint32_t r)
{
    return sender_fork(c, r) == 0 ? sender_wait_ready(c, r) : -1;
}

/* ---- agents ---- */

static int create_shm(struct wst_cluster_agent *a)
{
    char err[256];
    void *p = NULL;

    if (wst_shm_create(a->shm_name, a->layout.shm_bytes, &p, err,
                       sizeof(err)) != WST_OK) {
        fprintf(stderr, "cluster: %s\n", err);
        return -1;
    }
    a->shm = p;
    return 0;
}

/* Bytes of agent a's live memory: its shm, or its engine's device memory. */
static uint64_t live_size(const struct wst_cluster_agent *a)
{
    return a->layout.has_cuda_ipc ? a->layout.cuda_bytes : a->layout.shm_bytes;
}

static void engine_exec(const struct wst_cluster *c,
                        const struct wst_cluster_agent *a)
{
    char bytes[32], device[16], refuse[32];
    const char *argv[20];
    int n = 0;

    snprintf(bytes, sizeof(bytes), "%llu", (unsigned long long)live_size(a));
    snprintf(device, sizeof(device), "%u", a->layout.cuda_device);
    snprintf(refuse, sizeof(refuse), "%llu",
             (unsigned long long)c->p.refuse_version);
    /* Its chatter ("standin: got LAYER ...") is for debugging. */
    if (c->p.log_level < 3 && freopen("/dev/null", "w", stdout) == NULL)
        _exit(127);
    argv[n++] = c->p.engine_bin;
    argv[n++] = "--socket";
    argv[n++] = a->engine_socket;
    if (c->p.n_devices > 0) {
        argv[n++] = "--cuda-device";
        argv[n++] = device;
    } else {
        argv[n++] = "--shm";
        argv[n++] = a->shm_name;
    }
    argv[n++] = "--shm-bytes";
    argv[n++] = bytes;
    argv[n++] = "--create";
    argv[n++] = "--state-file";
    argv[n++] = a->engine_state;
    if (c->p.refuse_version != 0 && a == &c->agents[c->p.refuse_agent]) {
        argv[n++] = "--refuse-version";
        argv[n++] = refuse;
    }
    if (c->p.engine_no_ready_check)
        argv[n++] = "--ready-check=no";
    argv[n] = NULL;
    execv(argv[0], (char *const *)argv);
    fprintf(stderr, "cluster: exec %s: %s\n", c->p.engine_bin, strerror(errno));
    _exit(127);
}

/* The state file appears once the shm is created and poisoned: map it. */
static int engine_map_shm(struct wst_cluster_agent *a)
{
    void *p = NULL;

    if (wst_shm_map(a->shm_name, a->layout.shm_bytes, 1, &p, NULL, 0) != WST_OK)
        return -1;
    a->shm = p;
    return 0;
}

/* The engine writes its state file once its device memory is allocated,
 * poisoned and exported: take the handle into the agent's layout. */
static int engine_read_ipc(struct wst_cluster_agent *a)
{
    struct json_object *o = json_object_from_file(a->engine_state), *v;
    int rc = -1;

    if (o == NULL)
        return -1;
    if (json_object_object_get_ex(o, "cuda_ipc", &v) &&
        json_object_is_type(v, json_type_string) &&
        wst_layout_ipc_decode(json_object_get_string(v), a->layout.cuda_ipc) ==
            WST_OK)
        rc = 0;
    else
        fprintf(stderr, "cluster: %s: no valid \"cuda_ipc\"\n",
                a->engine_state);
    json_object_put(o);
    return rc;
}

/* Waits (bounded) for the stand-in engine's live memory: its shm, or with
 * device memory the IPC handle of its device memory. */
static int engine_wait_live(const struct wst_cluster *c,
                            struct wst_cluster_agent *a)
{
    /* Poisoning gigabytes of fresh shm takes a while here; a GPU needs
     * only its context and a memset. */
    uint64_t deadline = wst_deadline_ns(c->p.n_devices > 0 ? 30.0 : 120.0);

    while (wst_now_ns() < deadline) {
        if (access(a->engine_state, R_OK) == 0)
            return c->p.n_devices > 0 ? engine_read_ipc(a) : engine_map_shm(a);
        if (waitpid(a->engine_pid, NULL, WNOHANG) == a->engine_pid) {
            a->engine_pid = 0;
            break;
        }
        usleep(10000);
    }
    if (c->p.n_devices > 0)
        fprintf(stderr,
                "cluster: the stand-in engine did not export device memory "
                "on GPU %u\n",
                a->layout.cuda_device);
    else
        fprintf(stderr, "cluster: the stand-in engine did not create %s\n",
                a->shm_name);
    return -1;
}

/* The stand-in engine creates the live memory; wait until it exists. */
static int engine_spawn(struct wst_cluster *c, struct wst_cluster_agent *a)
{
    a->engine_pid = fork();
    if (a->engine_pid < 0)
        return -1;
    if (a->engine_pid == 0)
        engine_exec(c, a);
    return engine_wait_live(c, a);
}

/* Where agent a's live memory is: the shm this process or the engine
 * creates, or device memory the engine allocates (its handle comes later,
 * from the engine). */
static void place_live(const struct wst_cluster *c, struct wst_cluster_agent *a,
                       uint32_t k)
{
    struct wst_layout *l = &a->layout;

    if (c->p.n_devices > 0) {
        l->has_cuda_ipc = 1;
        l->cuda_bytes = l->shm_bytes;
        l->cuda_device = (uint32_t)c->p.devices[k % c->p.n_devices];
        l->shm_bytes = 0;
        l->shm[0] = '\0';
        return;
    }
    /* The pid alone is not unique over time: a crashed run's object may
     * still hold the name a reused pid gives. The clock's nanoseconds
     * make it this cluster's. */
    snprintf(a->shm_name, sizeof(a->shm_name), "/wstream-%d-%llx-r%u",
             (int)getpid(),
             (unsigned long long)(wst_now_ns() & 0xffffffffffull), k);
    snprintf(l->shm, sizeof(l->shm), "%s", a->shm_name);
}

static int agent_prepare(struct wst_cluster *c, uint32_t k)
{
    struct wst_cluster_agent *a = &c->agents[k];
    char err[512], state[sizeof(a->status_file) + 8];

    if (wst_model_engine_layout_moe(c->p.model, k, c->p.n_receivers, c->p.moe,
                                    &a->layout, err, sizeof(err)) != WST_OK) {
        fprintf(stderr, "cluster: engine layout: %s\n", err);
        return -1;
    }
    place_live(c, a, k);
    /* The agents are the tensor-parallel ranks of one engine: they commit
     * each version together or not at all. */
    snprintf(a->layout.group, sizeof(a->layout.group), "demo-engine");
    a->layout.group_size = c->p.n_receivers;
    a->layout.group_member = k;
    snprintf(a->engine_socket, sizeof(a->engine_socket), "%s/engine%u.sock",
             c->p.workdir, k);
    snprintf(a->engine_state, sizeof(a->engine_state), "%s/engine%u.state",
             c->p.workdir, k);
    unlink(a->engine_state);
    if (c->p.engine_bin != NULL ? engine_spawn(c, a) != 0 : create_shm(a) != 0)
        return -1;
    for (size_t i = 0; i < a->layout.n_wants; i++)
        c->live_bytes += wst_box_elems(&a->layout.wants[i].box) *
                         wst_dtype_size(a->layout.wants[i].tensor.dtype);
    /* Routed experts: the checkpoint bytes of the local experts. */
    for (size_t i = 0; i < a->layout.n_experts; i++) {
        const struct wst_layout_experts *x = &a->layout.experts[i];
        uint32_t tp = x->inter_tp_size > 1 ? x->inter_tp_size : 1;
        c->live_bytes += 3ull * (x->n_experts / x->ep_size) * (x->inter / tp) *
                         x->hidden * wst_dtype_size(x->dtype);
    }
    snprintf(a->layout_path, sizeof(a->layout_path), "%s/agent%u.json",
             c->p.workdir, k);
    snprintf(a->port_file, sizeof(a->port_file), "%s/agent%u.port",
             c->p.workdir, k);
    snprintf(a->status_file, sizeof(a->status_file), "%s/agent%u.status",
             c->p.workdir, k);
    /* The live memory is new: what an agent of an earlier run in this
     * workdir persisted (its default state file) is not about it. A
     * restart (wst_cluster_restart_agent) keeps it. */
    snprintf(state, sizeof(state), "%s.state", a->status_file);
    unlink(state);
    if (wst_layout_save(a->layout_path, &a->layout, err, sizeof(err)) !=
        WST_OK) {
        fprintf(stderr, "cluster: %s\n", err);
        return -1;
    }
    return 0;
}

static void agent_exec(const struct wst_cluster *c,
                       const struct wst_cluster_agent *a)
{
    char listen[300], timeout[32], hb[32], pt[32];
    const char *argv[40];
    int n = 0;

    snprintf(listen, sizeof(listen), "%s:%u",
             c->p.agent_host ? c->p.agent_host : "127.0.0.1", a->port);
    snprintf(timeout, sizeof(timeout), "%g", c->p.timeout_s);
    if (c->p.agent_netns != NULL) {
        argv[n++] = "ip";
        argv[n++] = "netns";
        argv[n++] = "exec";
        argv[n++] = c->p.agent_netns;
    }
    argv[n++] = c->p.agent_bin;
    argv[n++] = "--layout";
    argv[n++] = a->layout_path;
    argv[n++] = "--listen";
    argv[n++] = listen;
    argv[n++] = "--port-file";
    argv[n++] = a->port_file;
    argv[n++] = "--status-file";
    argv[n++] = a->status_file;
    argv[n++] = "--timeout";
    argv[n++] = timeout;
    argv[n++] = "--log-level";
    argv[n++] = wst_log_level_name(c->p.log_level);
    char slots[16];
    if (c->p.staging_slots != 0) {
        snprintf(slots, sizeof(slots), "%u", c->p.staging_slots);
        argv[n++] = "--staging-slots";
        argv[n++] = slots;
    }
    char lanes[16];
    if (c->p.lanes != 0) {
        snprintf(lanes, sizeof(lanes), "%u", c->p.lanes);
        argv[n++] = "--lanes";
        argv[n++] = lanes;
    }
    if (c->p.agent_lane_devices != NULL) {
        argv[n++] = "--lane-devices";
        argv[n++] = c->p.agent_lane_devices;
    }
    if (c->p.engine_bin != NULL) {
        argv[n++] = "--engine-socket";
        argv[n++] = a->engine_socket;
    }
    if (c->secret_file[0] != '\0') {
        argv[n++] = "--auth-secret-file";
        argv[n++] = c->secret_file;
    } else {
        argv[n++] = "--insecure";
    }
    if (c->p.heartbeat_s > 0 && c->p.peer_timeout_s > 0) {
        snprintf(hb, sizeof(hb), "%g", c->p.heartbeat_s);
        snprintf(pt, sizeof(pt), "%g", c->p.peer_timeout_s);
        argv[n++] = "--heartbeat";
        argv[n++] = hb;
        argv[n++] = "--peer-timeout";
        argv[n++] = pt;
    }
    argv[n] = NULL;
    execvp(argv[0], (char *const *)argv);
    fprintf(stderr, "cluster: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

int wst_cluster_wait_port(pid_t *pid, const char *port_file, double timeout_s,
                          uint16_t *port_p, int *wstatus_p)
{
    uint64_t deadline = wst_deadline_ns(timeout_s);

    while (wst_now_ns() < deadline) {
        FILE *f = fopen(port_file, "r");
        unsigned port = 0;
        if (f != NULL) {
            int ok = fscanf(f, "%u", &port) == 1;
            fclose(f);
            if (ok && port > 0 && port < 65536) {
                *port_p = (uint16_t)port;
                return 0;
            }
        }
        if (waitpid(*pid, wstatus_p, WNOHANG) == *pid) {
            *pid = 0;
            return -1;
        }
        usleep(10000);
    }
    return -1;
}

static int agent_wait_port(struct wst_cluster_agent *a, double timeout_s)
{
    if (wst_cluster_wait_port(&a->pid, a->port_file, timeout_s, &a->port,
                              NULL) == 0)
        return 0;
    if (a->pid == 0)
        fprintf(stderr, "cluster: an agent exited during start-up\n");
    else
        fprintf(stderr, "cluster: an agent did not start in %.0f s\n",
                timeout_s);
    return -1;
}

static int agent_spawn(struct wst_cluster *c, uint32_t k)
{
    struct wst_cluster_agent *a = &c->agents[k];

    unlink(a->port_file);
    a->pid = fork();
    if (a->pid < 0)
        return -1;
    if (a->pid == 0)
        agent_exec(c, a);
    return agent_wait_port(a, 30.0);
}

/* ---- public ---- */

static void transport_env(enum wst_transport t)
{
    /* Control always needs TCP (the sockaddr connection manager); "shm"
     * lets UCX put data on shared memory, "tcp" forbids it. */
    if (t == WST_TRANSPORT_TCP)
        setenv("UCX_TLS", "tcp", 1);
    else if (t == WST_TRANSPORT_SHM)
        setenv("UCX_TLS", "sm,tcp", 1);
    /* A restarted agent must rebind its port at once. */
    setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
}

/* The secret every agent and sender gets: the given file, or a fresh one
 * in the work folder; none when insecure. */
static int cluster_secret(struct wst_cluster *c)
{
    char err[1400];

    if (c->p.insecure)
        return 0;
    if (c->p.secret_file != NULL && c->p.secret_file[0] != '\0') {
        snprintf(c->secret_file, sizeof(c->secret_file), "%s",
                 c->p.secret_file);
        return 0;
    }
    snprintf(c->secret_file, sizeof(c->secret_file), "%s/secret", c->p.workdir);
    unlink(c->secret_file);
    if (wst_auth_secret_create(c->secret_file, err, sizeof(err)) != WST_OK) {
        fprintf(stderr, "cluster: %s\n", err);
        return -1;
    }
    return 0;
}

int wst_cluster_start(struct wst_cluster *c,
                      const struct wst_cluster_params *params)
{
    memset(c, 0, sizeof(*c));
    c->p = *params;
    if (c->p.n_senders == 0 || c->p.n_senders > WST_CLUSTER_MAX_SENDERS ||
        c->p.n_receivers == 0 || c->p.n_receivers > WST_CLUSTER_MAX_RECEIVERS)
        return -1;
    if (c->p.n_devices > 0 &&
        (c->p.engine_bin == NULL || c->p.n_devices > WST_CLUSTER_MAX_GPUS)) {
        fprintf(stderr, "cluster: device memory needs the stand-in engine, "
                        "which allocates it, and GPU ordinals\n");
        return -1;
    }
    if (c->p.n_sender_devices > WST_CLUSTER_MAX_GPUS) {
        fprintf(stderr, "cluster: device shards need GPU ordinals\n");
        return -1;
    }
    c->agents = calloc(c->p.n_receivers, sizeof(*c->agents));
    c->senders = calloc(c->p.n_senders, sizeof(*c->senders));
    if (c->agents == NULL || c->senders == NULL)
        return -1;
    transport_env(c->p.transport);
    if (cluster_secret(c) != 0)
        return -1;
    for (uint32_t k = 0; k < c->p.n_receivers; k++)
        if (agent_prepare(c, k) != 0 || agent_spawn(c, k) != 0)
            return -1;
    /* All forked, then all waited for: they register (fill and pin their
     * shards) at once, as a trainer's ranks would. */
    for (uint32_t r = 0; r < c->p.n_senders; r++)
        if (sender_fork(c, r) != 0)
            return -1;
    for (uint32_t r = 0; r < c->p.n_senders; r++)
        if (sender_wait_ready(c, r) != 0)
            return -1;
    return 0;
}

int wst_cluster_connect(struct wst_cluster *c, double timeout_s,
                        double *slowest_s, int *status_p)
{
    char line[1400];
    int rc = 0, st, used = 0;
    double s;

    *slowest_s = 0;
    *status_p = 0;
    for (uint32_t r = 0; r < c->p.n_senders; r++)
        if (c->senders[r].pid <= 0 ||
            write(c->senders[r].cmd_fd, "connect\n", 8) != 8)
            rc = -1;
    for (uint32_t r = 0; r < c->p.n_senders && rc == 0; r++) {
        if (read_line(c->senders[r].res_fd, line, sizeof(line), timeout_s) !=
                0 ||
            sscanf(line, "connected %d %lf %n", &st, &s, &used) != 2) {
            fprintf(stderr, "cluster: sender %u gave no connect result\n", r);
            rc = -1;
        } else if (st != WST_OK) {
            fprintf(stderr, "cluster: sender %u: connect: %s: %s\n", r,
                    wst_status_string((wst_status_t)st), line + used);
            *status_p = st;
            rc = -1;
        } else if (s > *slowest_s) {
            *slowest_s = s;
        }
    }
    return rc;
}

/* kB of 'field' ("RssAnon:") in /proc/PID/status; 0 when unreadable. */
static uint64_t proc_status_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    unsigned long long kb = 0;
    size_t n = strlen(field);
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, field, n) == 0 && sscanf(line + n, "%llu", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* utime + stime of /proc/PID/stat in seconds; 0 when unreadable. */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    unsigned long long ut = 0, st = 0;
    const char *p;
    size_t n;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* after "pid (comm) ": state is field 3, utime 14, stime 15 */
    p = strrchr(buf, ')');
    if (p == NULL || sscanf(p + 2,
                            "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
                            "%llu %llu",
                            &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Adds pid's threads' CPU to m's buckets by thread name. */
static void threads_add(struct wst_cluster_mem_side *m, pid_t pid)
{
    struct wst_thread_cpu_sample s; /* about 2 kB */
    double tick = (double)sysconf(_SC_CLK_TCK);

    if (wst_thread_cpu_sample(pid, &s) != WST_OK)
        return;
    for (size_t i = 0; i < s.n; i++) {
        uint32_t k = 0;
        while (k < m->n_kinds && strcmp(m->kinds[k].comm, s.t[i].comm) != 0)
            k++;
        if (k == m->n_kinds) {
            if (k == WST_CLUSTER_THREAD_KINDS)
                continue;
            snprintf(m->kinds[k].comm, sizeof(m->kinds[k].comm), "%s",
                     s.t[i].comm);
            m->n_kinds++;
        }
        m->kinds[k].cpu_s += (double)s.t[i].ticks / tick;
    }
}

static void mem_add(struct wst_cluster_mem_side *m, pid_t pid)
{
    uint64_t anon = proc_status_kb(pid, "RssAnon:") * 1024;

    if (pid <= 0)
        return;
    m->cpu_s += proc_cpu_s(pid);
    threads_add(m, pid);
    m->n++;
    m->anon_sum += anon;
    if (anon > m->anon_max)
        m->anon_max = anon;
}

void wst_cluster_memory(struct wst_cluster *c, struct wst_cluster_memory *m)
{
    memset(m, 0, sizeof(*m));
    for (uint32_t k = 0; k < c->p.n_receivers; k++)
        mem_add(&m->agents, c->agents[k].pid);
    for (uint32_t r = 0; r < c->p.n_senders; r++)
        mem_add(&m->senders, c->senders[r].pid);
}

int wst_cluster_push(struct wst_cluster *c, uint64_t version)
{
    char cmd[32];
    int n = snprintf(cmd, sizeof(cmd), "%llu\n", (unsigned long long)version);
    int rc = 0;

    for (uint32_t r = 0; r < c->p.n_senders; r++)
        if (c->senders[r].pid <= 0 ||
            write(c->senders[r].cmd_fd, cmd, (size_t)n) != n)
            rc = -1;
    return rc;
}

int wst_cluster_result(struct wst_cluster *c, uint32_t r, double timeout_s,
                       struct wst_sender_result *res)
{
    char line[1400];
    unsigned long long bytes, end;
    int used = 0;

    memset(res, 0, sizeof(*res));
    res->status = -1;
    if (c->senders[r].pid <= 0 ||
        read_line(c->senders[r].res_fd, line, sizeof(line), timeout_s) != 0)
        return -1;
    if (sscanf(line, "%d %llu %lf %llu %lf %n", &res->status, &bytes,
               &res->seconds, &end, &res->push_seconds, &used) != 5)
        return -1;
    res->bytes = bytes;
    res->end_ns = end;
    char *mover = line + used;
    char *lanes = strchr(mover, '|');
    char *error = lanes ? strchr(lanes + 1, '|') : NULL;
    if (lanes == NULL || error == NULL)
        return -1;
    *lanes++ = '\0';
    *error++ = '\0';
    snprintf(res->mover, sizeof(res->mover), "%s", mover);
    snprintf(res->lanes, sizeof(res->lanes), "%s", lanes);
    snprintf(res->error, sizeof(res->error), "%s", error);
    return 0;
}

/* Copies agent a's device memory into a->live_copy, importing the
 * engine's handle on first use. This process touches CUDA only here, long
 * after its senders were forked. */
static int device_snapshot(struct wst_cluster_agent *a)
{
    struct wst_logger log;
    uint64_t bytes = a->layout.cuda_bytes;
    int device = (int)a->layout.cuda_device;

    wst_logger_init(&log, "cluster", WST_LOG_WARN);
    if (a->ipc_base == NULL &&
        wst_gpu_ipc_import(&log, device, a->layout.cuda_ipc, &a->ipc_base) !=
            WST_OK) {
        a->ipc_base = NULL;
        fprintf(stderr,
                "cluster: cannot import the engine's device memory on GPU "
                "%d\n",
                device);
        return -1;
    }
    if (a->live_copy == NULL && (a->live_copy = malloc(bytes)) == NULL) {
        fprintf(stderr, "cluster: no memory for a %llu-byte copy\n",
                (unsigned long long)bytes);
        return -1;
    }
    if (wst_gpu_copy(&log, a->live_copy, a->ipc_base, bytes) != WST_OK) {
        fprintf(stderr, "cluster: cannot copy the engine's device memory\n");
        return -1;
    }
    return 0;
}

const void *wst_cluster_agent_live(struct wst_cluster *c, uint32_t k)
{
    struct wst_cluster_agent *a = &c->agents[k];

    if (!a->layout.has_cuda_ipc)
        return a->shm;
    return device_snapshot(a) == 0 ? a->live_copy : NULL;
}

int wst_cluster_verify_agent(struct wst_cluster *c, uint32_t k,
                             uint64_t version)
{
    struct wst_cluster_agent *a = &c->agents[k];
    const void *live = wst_cluster_agent_live(c, k);
    char err[512];

    if (live == NULL)
        return -1;
    if (wst_model_verify(&a->layout, live, c->p.seed, version, NULL, err,
                         sizeof(err)) == WST_OK)
        return 0;
    fprintf(stderr, "cluster: agent %u, version %llu: %s\n", k,
            (unsigned long long)version, err);
    return -1;
}

int wst_cluster_verify(struct wst_cluster *c, uint64_t version)
{
    for (uint32_t k = 0; k < c->p.n_receivers; k++)
        if (wst_cluster_verify_agent(c, k, version) != 0)
            return -1;
    return 0;
}

static double json_double(struct json_object *o, const char *key)
{
    struct json_object *v;

    return json_object_object_get_ex(o, key, &v) ? json_object_get_double(v)
                                                 : 0.0;
}

int wst_cluster_agent_status(struct wst_cluster *c, uint32_t k,
                             struct wst_agent_status *st)
{
    struct json_object *o = json_object_from_file(c->agents[k].status_file);
    struct json_object *v;

    memset(st, 0, sizeof(*st));
    if (o == NULL)
        return -1;
    if (json_object_object_get_ex(o, "committed_version", &v))
        st->committed_version = (uint64_t)json_object_get_int64(v);
    if (json_object_object_get_ex(o, "usable", &v))
        st->usable = json_object_get_boolean(v);
    if (json_object_object_get_ex(o, "refits_ok", &v))
        st->refits_ok = (uint64_t)json_object_get_int64(v);
    if (json_object_object_get_ex(o, "refits_failed", &v))
        st->refits_failed = (uint64_t)json_object_get_int64(v);
    if (json_object_object_get_ex(o, "time_ns", &v))
        st->time_ns = (uint64_t)json_object_get_int64(v);
    if (json_object_object_get_ex(o, "reason", &v))
        snprintf(st->reason, sizeof(st->reason), "%s",
                 json_object_get_string(v));
    if (json_object_object_get_ex(o, "refit", &v) &&
        json_object_is_type(v, json_type_object)) {
        struct json_object *f;
        st->refit_open = 1;
        if (json_object_object_get_ex(v, "version", &f))
            st->refit_version = (uint64_t)json_object_get_int64(f);
        if (json_object_object_get_ex(v, "phase", &f))
            snprintf(st->refit_phase, sizeof(st->refit_phase), "%s",
                     json_object_get_string(f));
    }
    st->plan_seconds = json_double(o, "plan_seconds");
    st->manifest_seconds = json_double(o, "manifest_seconds");
    st->plan_cpu_seconds = json_double(o, "plan_cpu_seconds");
    st->manifest_cpu_seconds = json_double(o, "manifest_cpu_seconds");
    if (json_object_object_get_ex(o, "manifest_bytes", &v))
        st->manifest_bytes = (uint64_t)json_object_get_int64(v);
    if (json_object_object_get_ex(o, "control_msgs_out", &v))
        st->control_msgs_out = (uint64_t)json_object_get_int64(v);
    if (json_object_object_get_ex(o, "control_bytes_out", &v))
        st->control_bytes_out = (uint64_t)json_object_get_int64(v);
    if (json_object_object_get_ex(o, "control_msgs_in", &v))
        st->control_msgs_in = (uint64_t)json_object_get_int64(v);
    if (json_object_object_get_ex(o, "control_bytes_in", &v))
        st->control_bytes_in = (uint64_t)json_object_get_int64(v);
    st->register_seconds = json_double(o, "register_seconds");
    st->last_refit_seconds = json_double(o, "last_refit_seconds");
    if (json_object_object_get_ex(o, "lanes", &v))
        st->lanes = (uint32_t)json_object_get_int64(v);
    if (json_object_object_get_ex(o, "last_refit_lane_bytes", &v) &&
        json_object_is_type(v, json_type_array))
        for (size_t i = 0;
             i < json_object_array_length(v) && i < WST_RECEIVER_LANES_MAX; i++)
            st->lane_bytes[i] = (uint64_t)json_object_get_int64(
                json_object_array_get_idx(v, i));
    json_object_put(o);
    return 0;
}

int wst_cluster_agent_timeline(struct wst_cluster *c, uint32_t k,
                               struct wst_layer_times *t, uint32_t n)
{
    struct json_object *o = json_object_from_file(c->agents[k].status_file);
    struct json_object *layers;
    int count = -1;

    if (o == NULL)
        return -1;
    if (json_object_object_get_ex(o, "layers", &layers) &&
        json_object_is_type(layers, json_type_array)) {
        count = (int)json_object_array_length(layers);
        for (int i = 0; i < count && (uint32_t)i < n; i++) {
            struct json_object *l = json_object_array_get_idx(layers, i);
            t[i].received = json_double(l, "received");
            t[i].repacked = json_double(l, "repacked");
            t[i].finalized = json_double(l, "finalized");
            t[i].repack_seconds = json_double(l, "repack_seconds");
            t[i].finalize_seconds = json_double(l, "finalize_seconds");
        }
    }
    json_object_put(o);
    return count;
}

int wst_cluster_engine_state(struct wst_cluster *c, uint32_t k, char *state,
                             size_t state_len, char *reason, size_t reason_len)
{
    struct json_object *o, *v;

    if (c->agents[k].engine_state[0] == '\0' || c->p.engine_bin == NULL ||
        (o = json_object_from_file(c->agents[k].engine_state)) == NULL)
        return -1;
    snprintf(state, state_len, "%s",
             json_object_object_get_ex(o, "state", &v)
                 ? json_object_get_string(v)
                 : "?");
    snprintf(reason, reason_len, "%s",
             json_object_object_get_ex(o, "reason", &v)
                 ? json_object_get_string(v)
                 : "");
    json_object_put(o);
    return 0;
}

int wst_cluster_engine_version(struct wst_cluster *c, uint32_t k,
                               uint64_t *version_p)
{
    struct json_object *o, *v;
    int rc = -1;

    if (c->agents[k].engine_state[0] == '\0' || c->p.engine_bin == NULL ||
        (o = json_object_from_file(c->agents[k].engine_state)) == NULL)
        return -1;
    if (json_object_object_get_ex(o, "committed_version", &v)) {
        *version_p = (uint64_t)json_object_get_int64(v);
        rc = 0;
    }
    json_object_put(o);
    return rc;
}

void wst_cluster_signal_agent(struct wst_cluster *c, uint32_t k, int sig)
{
    if (c->agents[k].pid > 0)
        kill(c->agents[k].pid, sig);
}

void wst_cluster_signal_sender(struct wst_cluster *c, uint32_t r, int sig)
{
    if (c->senders[r].pid > 0)
        kill(c->senders[r].pid, sig);
}

static void reap(pid_t *pid)
{
    if (*pid <= 0)
        return;
    kill(*pid, SIGKILL);
    kill(*pid, SIGCONT);
    waitpid(*pid, NULL, 0);
    *pid = 0;
}

/* Gives a process that was told to exit 'seconds' to do so, then kills it. */
static void reap_within(pid_t *pid, double seconds)
{
    uint64_t deadline = wst_deadline_ns(seconds);

    while (*pid > 0 && waitpid(*pid, NULL, WNOHANG) == 0 &&
           wst_now_ns() < deadline)
        usleep(10000);
    reap(pid);
}

int wst_cluster_restart_agent(struct wst_cluster *c, uint32_t k)
{
    reap(&c->agents[k].pid);
    return agent_spawn(c, k);
}

int wst_cluster_restart_sender(struct wst_cluster *c, uint32_t r)
{
    struct wst_cluster_sender *s = &c->senders[r];

    reap(&s->pid);
    close(s->cmd_fd);
    close(s->res_fd);
    return sender_spawn(c, r);
}

void wst_cluster_stop(struct wst_cluster *c)
{
    for (uint32_t r = 0; c->senders != NULL && r < c->p.n_senders; r++) {
        struct wst_cluster_sender *s = &c->senders[r];
        if (s->pid <= 0)
            continue;
        kill(s->pid, SIGCONT);
        close(s->cmd_fd); /* EOF: the sender exits cleanly... */
        close(s->res_fd);
        /* ...unless a push is still waiting, for a rank that died. */
        reap_within(&s->pid, 2.0);
    }
    for (uint32_t k = 0; c->agents != NULL && k < c->p.n_receivers; k++) {
        struct wst_cluster_agent *a = &c->agents[k];
        /* Unmapped before the engine exits and frees it. */
        wst_gpu_ipc_close(a->ipc_base);
        a->ipc_base = NULL;
        free(a->live_copy);
        a->live_copy = NULL;
        if (a->pid > 0) {
            kill(a->pid, SIGCONT);
            kill(a->pid, SIGTERM);
            waitpid(a->pid, NULL, 0);
        }
        /* The engine exits on the agent's EOF; a stuck one is killed. */
        reap_within(&a->engine_pid, 2.0);
        if (a->shm != NULL) {
            munmap(a->shm, a->layout.shm_bytes);
            shm_unlink(a->shm_name);
        }
        wst_layout_release(&a->layout);
    }
    free(c->agents);
    free(c->senders);
    c->agents = NULL;
    c->senders = NULL;
}

/* The child's half of wst_cluster_device_check: "<count> <why>" on 'fd'. */
static void device_probe_child(int fd)
{
    char why[256] = "";
    int count = 0;

    if (wst_kernels_device_count(&count, why, sizeof(why)) != WST_OK)
        count = -1;
    dprintf(fd, "%d %s", count, why);
    _exit(0);
}

int wst_cluster_device_check(int device, char *why, size_t len)
{
    char text[300] = "";
    int fds[2], count = -1, used = 0;
    ssize_t n;
    pid_t pid;

    if (!wst_kernels_built_with_cuda()) {
        snprintf(why, len,
                 "this build has no CUDA (the toolkit was not "
                 "found when it was configured)");
        return -1;
    }
    if (pipe2(fds, O_CLOEXEC) != 0 || (pid = fork()) < 0) {
        snprintf(why, len, "cannot start the probe: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        device_probe_child(fds[1]);
    }
    close(fds[1]);
    n = read(fds[0], text, sizeof(text) - 1);
    close(fds[0]);
    waitpid(pid, NULL, 0);
    text[n > 0 ? n : 0] = '\0';
    if (sscanf(text, "%d %n", &count, &used) != 1 || count < 0) {
        snprintf(why, len, "%s", used > 0 ? text + used : "the probe failed");
        return -1;
    }
    if (device >= count) {
        snprintf(why, len, "GPU %d asked, but %d GPU%s visible", device, count,
                 count == 1 ? " is" : "s are");
        return -1;
    }
    return 0;
}

int wst_cluster_agent_path(char *buf, size_t len)
{
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

    if (n <= 0)
        return -1;
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    snprintf(buf, len, "%s/wstream-agent", self);
    return 0;
}

/* mkdir -p for a folder the user named: each missing component is made
 * 0700 (the folder holds the deployment's secret); one that exists must be a
 * folder. -1 after printing which component failed and why. */
static int make_folders(const char *prog, char *path)
{
    struct stat st;

    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST) {
            fprintf(stderr, "%s: --workdir: cannot create %s: %s\n", prog, path,
                    strerror(errno));
            *p = saved;
            return -1;
        }
        *p = saved;
        if (saved == '\0')
            break;
    }
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "%s: --workdir %s is not a folder\n", prog, path);
        return -1;
    }
    return 0;
}

int wst_cluster_workdir(const char *prog, const char *given, char *buf,
                        size_t len, int *own_p)
{
    *own_p = 0;
    if (given != NULL && given[0] != '\0') {
        if (strlen(given) >= len) {
            fprintf(stderr, "%s: --workdir is too long\n", prog);
            return -1;
        }
        snprintf(buf, len, "%s", given);
        return make_folders(prog, buf);
    }
    snprintf(buf, len, "/tmp/%s-XXXXXX", prog);
    if (mkdtemp(buf) == NULL) {
        fprintf(stderr, "%s: mkdtemp %s: %s\n", prog, buf, strerror(errno));
        return -1;
    }
    *own_p = 1;
    return 0;
}

void wst_cluster_workdir_remove(const char *prog, const char *dir)
{
    char cmd[1200];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "%s: could not remove %s\n", prog, dir);
}
