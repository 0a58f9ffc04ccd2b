/* demo_main.c - wstream-demo: a verified multi-process refit on one machine.
 *
 * It plays both sides of a refit with real processes over real UCX:
 *  - the "engine" of each of K TP ranks is a POSIX shared-memory object this
 *    process creates and poisons; a wstream-agent process per rank maps it
 *    from its layout file and receives into it;
 *  - N sender processes (forked before any thread exists) own FSDP shards
 *    (dim-0 chunks, uneven and empty ones; flat shards for 1-D tensors) and
 *    push each version when told to through a pipe.
 * After every version it reads every agent's live bytes and checks them
 * against the data generator (tools/demo/model.h), which knows nothing of
 * the planner. Exit 0 only when every byte of every version verified.
 */
#include <wstream/sender.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "config.h"
#include "layout_file.h"
#include "model.h"

struct demo_settings {
    char *preset;
    uint64_t layers;
    uint64_t senders;
    uint64_t receivers;
    uint64_t refits;
    int transport;
    int mover;
    uint64_t seed;
    double timeout;
    int log_level;
    char *workdir;
};

static const char *const transport_choices[] = {"auto", "tcp", "shm", NULL};
static const char *const mover_choices[] = {"auto", "put", "am", NULL};
static const char *const level_choices[] = {"error", "warn",  "info",
                                            "debug", "trace", NULL};

static const struct wst_config_entry demo_config[] = {
    {"preset", WST_CONFIG_STRING, "tiny", "model preset: tiny, qwen3-30b-a3b",
     offsetof(struct demo_settings, preset), NULL},
    {"layers", WST_CONFIG_UINT, "0", "layer count (0: the preset's)",
     offsetof(struct demo_settings, layers), NULL},
    {"senders", WST_CONFIG_UINT, "3", "sender processes (FSDP ranks)",
     offsetof(struct demo_settings, senders), NULL},
    {"receivers", WST_CONFIG_UINT, "2", "agent processes (TP ranks)",
     offsetof(struct demo_settings, receivers), NULL},
    {"refits", WST_CONFIG_UINT, "3", "versions to push and verify",
     offsetof(struct demo_settings, refits), NULL},
    {"transport", WST_CONFIG_ENUM, "auto",
     "auto (UCX chooses), tcp, or shm (shared memory for data)",
     offsetof(struct demo_settings, transport), transport_choices},
    {"mover", WST_CONFIG_ENUM, "auto", "data mover: auto, put, am",
     offsetof(struct demo_settings, mover), mover_choices},
    {"seed", WST_CONFIG_UINT, "1", "data generator seed",
     offsetof(struct demo_settings, seed), NULL},
    {"timeout", WST_CONFIG_DOUBLE, "60", "seconds allowed per refit",
     offsetof(struct demo_settings, timeout), NULL},
    {"log-level", WST_CONFIG_ENUM, "warn", "log level of agents and senders",
     offsetof(struct demo_settings, log_level), level_choices},
    {"workdir", WST_CONFIG_STRING, "",
     "folder for layout, port and status files (default: a new temp dir)",
     offsetof(struct demo_settings, workdir), NULL},
    WST_CONFIG_END,
};

struct agent_proc {
    pid_t pid;
    char shm_name[64];
    void *shm;
    struct wst_layout layout;
    char port_file[PATH_MAX];
    uint16_t port;
};

struct sender_proc {
    pid_t pid;
    int cmd_fd; /* parent writes versions */
    int res_fd; /* child writes one result line per version */
};

struct demo {
    struct demo_settings set;
    struct wst_model model;
    char workdir[1024]; /* short enough for every path built from it */
    int own_workdir;
    struct agent_proc *agents;
    struct sender_proc *senders;
    uint64_t live_bytes; /* wanted bytes over all agents */
};

/* ---- sender processes ---- */

struct sender_ctx {
    const struct demo *d;
    uint32_t rank;
    struct wst_have *haves;
    size_t n_haves;
    void **bufs;
    wst_sender_t *sender;
};

static int sender_setup(struct sender_ctx *c)
{
    const struct demo *d = c->d;
    char addrs[64][64];
    const char *recv[64];
    size_t k = d->set.receivers;

    for (size_t i = 0; i < k; i++) {
        snprintf(addrs[i], sizeof(addrs[i]), "127.0.0.1:%u", d->agents[i].port);
        recv[i] = addrs[i];
    }
    if (wst_model_trainer_shards(&d->model, c->rank, (uint32_t)d->set.senders,
                                 &c->haves, &c->n_haves) != WST_OK)
        return -1;
    struct wst_sender_params sp = {
        .field_mask = WST_SENDER_PARAM_RANK | WST_SENDER_PARAM_WORLD_SIZE |
                      WST_SENDER_PARAM_RECEIVERS | WST_SENDER_PARAM_TIMEOUT |
                      WST_SENDER_PARAM_MOVER | WST_SENDER_PARAM_LOG,
        .rank = c->rank,
        .world_size = (uint32_t)d->set.senders,
        .receivers = recv,
        .n_receivers = k,
        .timeout_s = d->set.timeout,
        .mover = mover_choices[d->set.mover],
        .log_level = d->set.log_level,
    };
    if (wst_sender_create(&sp, &c->sender) != WST_OK)
        return -1;
    c->bufs = calloc(c->n_haves, sizeof(*c->bufs));
    if (c->bufs == NULL)
        return -1;
    for (size_t i = 0; i < c->n_haves; i++) {
        const struct wst_have *h = &c->haves[i];
        uint64_t bytes = wst_model_shard_bytes(h);
        c->bufs[i] = malloc(bytes ? bytes : 1);
        if (c->bufs[i] == NULL)
            return -1;
        struct wst_shard sh = {
            .name = h->tensor.name,
            .data = c->bufs[i],
            .mem_type = WST_MEM_HOST,
            .dtype = h->tensor.dtype,
            .ndim = h->tensor.ndim,
            .shape = h->tensor.shape,
            .box_start = h->box.start,
            .box_stop = h->box.stop,
            .flat = h->flat,
        };
        if (wst_sender_register(c->sender, &sh) != WST_OK)
            return -1;
    }
    return 0;
}

/* One line per version: "<status> <bytes> <seconds> <mover> <lanes>|<err>" */
static void sender_push(struct sender_ctx *c, uint64_t version, FILE *out)
{
    for (size_t i = 0; i < c->n_haves; i++)
        wst_model_fill_shard(&c->haves[i], c->d->set.seed, version, c->bufs[i]);
    double t0 = wst_now_s();
    wst_status_t st = wst_sender_push(c->sender, version);
    if (st == WST_OK)
        st = wst_sender_wait(c->sender, c->d->set.timeout);
    double dt = wst_now_s() - t0;
    const char *lanes = wst_sender_lanes(c->sender, 0);
    const char *mover = wst_sender_mover(c->sender, 0);
    fprintf(out, "%d %llu %.6f %s %s|%s\n", (int)st,
            (unsigned long long)wst_sender_bytes_moved(c->sender), dt,
            mover ? mover : "-", lanes ? lanes : "-",
            st == WST_OK ? "" : wst_sender_last_error(c->sender));
    fflush(out);
}

static int sender_main(const struct demo *d, uint32_t rank, int cmd_fd,
                       int res_fd)
{
    struct sender_ctx c = {.d = d, .rank = rank};
    FILE *in = fdopen(cmd_fd, "r");
    FILE *out = fdopen(res_fd, "w");
    unsigned long long version;

    if (in == NULL || out == NULL)
        return 1;
    if (sender_setup(&c) != 0) {
        fprintf(out, "%d 0 0 - -|sender set-up failed\n", WST_ERR_INVALID);
        fflush(out);
        return 1;
    }
    while (fscanf(in, "%llu", &version) == 1)
        sender_push(&c, version, out);
    wst_sender_destroy(c.sender);
    for (size_t i = 0; i < c.n_haves; i++)
        free(c.bufs[i]);
    free(c.bufs);
    free(c.haves);
    return 0;
}

/* ---- agents ---- */

static void transport_env(int transport)
{
    /* Control always needs TCP (the sockaddr connection manager); "shm"
     * lets UCX put data on shared memory, "tcp" forbids it. */
    if (transport == 1)
        setenv("UCX_TLS", "tcp", 1);
    else if (transport == 2)
        setenv("UCX_TLS", "sm,tcp", 1);
}

static int create_shm(struct agent_proc *a)
{
    int fd = shm_open(a->shm_name, O_RDWR | O_CREAT | O_EXCL, 0600);

    if (fd < 0) {
        fprintf(stderr, "wstream-demo: shm_open %s: %s\n", a->shm_name,
                strerror(errno));
        return -1;
    }
    if (ftruncate(fd, (off_t)a->layout.shm_bytes) != 0) {
        close(fd);
        return -1;
    }
    a->shm = mmap(NULL, a->layout.shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                  fd, 0);
    close(fd);
    if (a->shm == MAP_FAILED) {
        a->shm = NULL;
        return -1;
    }
    /* Poison: a byte no refit wrote cannot pass for data by accident. */
    memset(a->shm, 0xA5, a->layout.shm_bytes);
    return 0;
}

static int agent_spawn(struct demo *d, uint32_t k, const char *agent_bin)
{
    struct agent_proc *a = &d->agents[k];
    char layout_path[PATH_MAX], status_path[PATH_MAX], err[512];

    if (wst_model_engine_layout(&d->model, k, (uint32_t)d->set.receivers,
                                &a->layout, err, sizeof(err)) != WST_OK) {
        fprintf(stderr, "wstream-demo: engine layout: %s\n", err);
        return -1;
    }
    snprintf(a->shm_name, sizeof(a->shm_name), "/wstream-demo-%d-r%u",
             (int)getpid(), k);
    snprintf(a->layout.shm, sizeof(a->layout.shm), "%s", a->shm_name);
    if (create_shm(a) != 0)
        return -1;
    for (size_t i = 0; i < a->layout.n_wants; i++)
        d->live_bytes += wst_model_shard_bytes(
            &(struct wst_have){.tensor = a->layout.wants[i].tensor,
                               .box = a->layout.wants[i].box});
    snprintf(layout_path, sizeof(layout_path), "%s/agent%u.json", d->workdir,
             k);
    snprintf(a->port_file, sizeof(a->port_file), "%s/agent%u.port", d->workdir,
             k);
    snprintf(status_path, sizeof(status_path), "%s/agent%u.status", d->workdir,
             k);
    if (wst_layout_save(layout_path, &a->layout, err, sizeof(err)) != WST_OK) {
        fprintf(stderr, "wstream-demo: %s\n", err);
        return -1;
    }
    a->pid = fork();
    if (a->pid < 0)
        return -1;
    if (a->pid == 0) {
        execl(agent_bin, agent_bin, "--layout", layout_path, "--listen",
              "127.0.0.1:0", "--port-file", a->port_file, "--status-file",
              status_path, "--log-level", level_choices[d->set.log_level],
              (char *)NULL);
        fprintf(stderr, "wstream-demo: exec %s: %s\n", agent_bin,
                strerror(errno));
        _exit(127);
    }
    return 0;
}

static int agent_wait_port(struct agent_proc *a, double timeout_s)
{
    uint64_t deadline = wst_deadline_ns(timeout_s);

    while (wst_now_ns() < deadline) {
        FILE *f = fopen(a->port_file, "r");
        unsigned port = 0;
        if (f != NULL) {
            int ok = fscanf(f, "%u", &port) == 1;
            fclose(f);
            if (ok && port > 0 && port < 65536) {
                a->port = (uint16_t)port;
                return 0;
            }
        }
        if (waitpid(a->pid, NULL, WNOHANG) == a->pid) {
            a->pid = 0;
            fprintf(stderr, "wstream-demo: an agent exited during start-up\n");
            return -1;
        }
        usleep(10000);
    }
    fprintf(stderr, "wstream-demo: an agent did not start in %.0f s\n",
            timeout_s);
    return -1;
}

/* ---- the run ---- */

static int spawn_senders(struct demo *d)
{
    for (uint32_t r = 0; r < d->set.senders; r++) {
        int cmd[2], res[2];
        if (pipe(cmd) != 0 || pipe(res) != 0)
            return -1;
        pid_t pid = fork();
        if (pid < 0)
            return -1;
        if (pid == 0) {
            close(cmd[1]);
            close(res[0]);
            for (uint32_t j = 0; j < r; j++) {
                close(d->senders[j].cmd_fd);
                close(d->senders[j].res_fd);
            }
            _exit(sender_main(d, r, cmd[0], res[1]));
        }
        close(cmd[0]);
        close(res[1]);
        d->senders[r] = (struct sender_proc){pid, cmd[1], res[0]};
    }
    return 0;
}

struct refit_result {
    int ok;
    double seconds;
    char mover[16];
    char lanes[256];
};

static int read_line(int fd, char *buf, size_t len)
{
    size_t n = 0;

    while (n + 1 < len) {
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

static void run_refit(struct demo *d, uint64_t version,
                      struct refit_result *res)
{
    char cmd[32], line[1024];
    int n = snprintf(cmd, sizeof(cmd), "%llu\n", (unsigned long long)version);

    memset(res, 0, sizeof(*res));
    res->ok = 1;
    for (uint32_t r = 0; r < d->set.senders; r++)
        if (write(d->senders[r].cmd_fd, cmd, (size_t)n) != n)
            res->ok = 0;
    for (uint32_t r = 0; r < d->set.senders; r++) {
        int st = -1;
        char mover[16] = "-", rest[900] = "";
        double secs = 0;
        if (read_line(d->senders[r].res_fd, line, sizeof(line)) != 0 ||
            sscanf(line, "%d %*u %lf %15s %899[^\n]", &st, &secs, mover, rest) <
                3) {
            fprintf(stderr, "wstream-demo: sender %u died\n", r);
            res->ok = 0;
            continue;
        }
        char *bar = strchr(rest, '|');
        if (bar != NULL)
            *bar = '\0';
        if (st != WST_OK) {
            fprintf(stderr, "wstream-demo: sender %u, version %llu: %s: %s\n",
                    r, (unsigned long long)version,
                    wst_status_string((wst_status_t)st), bar ? bar + 1 : "");
            res->ok = 0;
        }
        if (r == 0) {
            snprintf(res->mover, sizeof(res->mover), "%s", mover);
            snprintf(res->lanes, sizeof(res->lanes), "%s", rest);
        }
        /* The refit lasts from the first push to the last commit seen. */
        if (secs > res->seconds)
            res->seconds = secs;
    }
}

static int verify_agents(struct demo *d, uint64_t version)
{
    char err[512];

    for (uint32_t k = 0; k < d->set.receivers; k++) {
        struct agent_proc *a = &d->agents[k];
        if (wst_model_verify(&a->layout, a->shm, d->set.seed, version, NULL,
                             err, sizeof(err)) != WST_OK) {
            fprintf(stderr, "wstream-demo: agent %u, version %llu: %s\n", k,
                    (unsigned long long)version, err);
            return -1;
        }
    }
    return 0;
}

/* The transport asked for must be the one UCX used: a "tcp" run must not
 * quietly move data over shared memory, nor "shm" over TCP. */
static int lanes_match(int transport, const char *lanes)
{
    int has_tcp = strstr(lanes, "tcp/") != NULL;
    int has_shm = strstr(lanes, "/memory") != NULL;

    if (transport == 1)
        return has_tcp && !has_shm;
    if (transport == 2)
        return has_shm && !has_tcp;
    return 1;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static int run(struct demo *d)
{
    struct refit_result res = {0};
    double *secs = calloc(d->set.refits, sizeof(*secs));
    int verified = 1;

    if (secs == NULL)
        return -1;
    for (uint64_t v = 1; v <= d->set.refits; v++) {
        run_refit(d, v, &res);
        int ok = res.ok && verify_agents(d, v) == 0;
        secs[v - 1] = res.seconds;
        printf("refit %llu/%llu: version %llu, %.1f MB in %.3f s "
               "(%.2f GB/s), %s\n",
               (unsigned long long)v, (unsigned long long)d->set.refits,
               (unsigned long long)v, d->live_bytes / 1e6, res.seconds,
               d->live_bytes / res.seconds / 1e9,
               ok ? "every byte verified" : "FAILED");
        fflush(stdout);
        if (!ok) {
            verified = 0;
            break;
        }
    }
    if (verified && !lanes_match(d->set.transport, res.lanes)) {
        fprintf(stderr,
                "wstream-demo: transport %s asked, but UCX chose "
                "lanes %s\n",
                transport_choices[d->set.transport], res.lanes);
        verified = 0;
    }
    qsort(secs, d->set.refits, sizeof(*secs), compare_double);
    double median = secs[(d->set.refits - 1) / 2];
    printf(
        "wstream-demo: %s, %zu tensors, %llu senders -> %llu receivers, "
        "%llu versions x %.1f MB, median %.3f s (%.2f GB/s), transport %s, "
        "mover %s, lanes %s: %s\n",
        d->model.preset, d->model.n_tensors, (unsigned long long)d->set.senders,
        (unsigned long long)d->set.receivers, (unsigned long long)d->set.refits,
        d->live_bytes / 1e6, median, d->live_bytes / median / 1e9,
        transport_choices[d->set.transport], res.mover, res.lanes,
        verified ? "every byte verified" : "NOT VERIFIED");
    free(secs);
    return verified ? 0 : -1;
}

static void teardown(struct demo *d)
{
    for (uint32_t r = 0; d->senders != NULL && r < d->set.senders; r++) {
        if (d->senders[r].pid <= 0)
            continue;
        close(d->senders[r].cmd_fd); /* EOF: the sender exits */
        close(d->senders[r].res_fd);
        waitpid(d->senders[r].pid, NULL, 0);
    }
    for (uint32_t k = 0; d->agents != NULL && k < d->set.receivers; k++) {
        struct agent_proc *a = &d->agents[k];
        if (a->pid > 0) {
            kill(a->pid, SIGTERM);
            waitpid(a->pid, NULL, 0);
        }
        if (a->shm != NULL) {
            munmap(a->shm, a->layout.shm_bytes);
            shm_unlink(a->shm_name);
        }
        wst_layout_release(&a->layout);
    }
    if (d->own_workdir) {
        char cmd[PATH_MAX + 16];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->workdir);
        if (system(cmd) != 0)
            fprintf(stderr, "wstream-demo: could not remove %s\n", d->workdir);
    }
    free(d->agents);
    free(d->senders);
    wst_model_release(&d->model);
}

static int parse_settings(struct demo *d, int argc, char **argv)
{
    char err[512];
    int next;
    wst_status_t st =
        wst_config_defaults(demo_config, &d->set, err, sizeof(err));

    if (st == WST_OK)
        st = wst_config_parse_args(demo_config, &d->set, argc, argv, &next, err,
                                   sizeof(err));
    if (st == WST_OK && next < argc) {
        snprintf(err, sizeof(err), "unexpected argument '%s'", argv[next]);
        st = WST_ERR_CONFIG;
    }
    if (st == WST_OK && (d->set.senders == 0 || d->set.senders > 64 ||
                         d->set.receivers == 0 || d->set.receivers > 64 ||
                         d->set.refits == 0 || d->set.refits > 100000)) {
        snprintf(err, sizeof(err),
                 "need 1..64 senders, 1..64 receivers "
                 "and at least one refit");
        st = WST_ERR_CONFIG;
    }
    if (st != WST_OK)
        fprintf(stderr, "wstream-demo: %s\n", err);
    return st == WST_OK ? 0 : -1;
}

static int prepare(struct demo *d, const char *agent_bin)
{
    char err[512];

    if (wst_model_preset(d->set.preset, (uint32_t)d->set.layers, &d->model, err,
                         sizeof(err)) != WST_OK) {
        fprintf(stderr, "wstream-demo: %s\n", err);
        return -1;
    }
    if (strlen(d->set.workdir) >= sizeof(d->workdir)) {
        fprintf(stderr, "wstream-demo: --workdir is too long\n");
        return -1;
    }
    if (d->set.workdir[0] != '\0') {
        snprintf(d->workdir, sizeof(d->workdir), "%s", d->set.workdir);
    } else {
        snprintf(d->workdir, sizeof(d->workdir), "/tmp/wstream-demo-XXXXXX");
        if (mkdtemp(d->workdir) == NULL)
            return -1;
        d->own_workdir = 1;
    }
    d->agents = calloc(d->set.receivers, sizeof(*d->agents));
    d->senders = calloc(d->set.senders, sizeof(*d->senders));
    if (d->agents == NULL || d->senders == NULL)
        return -1;
    transport_env(d->set.transport);
    setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
    printf("wstream-demo: preset %s (%zu tensors, %.1f MB), %llu senders -> "
           "%llu agents, transport %s\n",
           d->model.preset, d->model.n_tensors,
           wst_model_bytes(&d->model) / 1e6, (unsigned long long)d->set.senders,
           (unsigned long long)d->set.receivers,
           transport_choices[d->set.transport]);
    for (uint32_t k = 0; k < d->set.receivers; k++)
        if (agent_spawn(d, k, agent_bin) != 0)
            return -1;
    for (uint32_t k = 0; k < d->set.receivers; k++)
        if (agent_wait_port(&d->agents[k], 30.0) != 0)
            return -1;
    return spawn_senders(d);
}

int main(int argc, char **argv)
{
    struct demo d;
    char self[1024], agent_bin[PATH_MAX];
    ssize_t n;
    int rc = 1;

    memset(&d, 0, sizeof(d));
    if (wst_config_has_flag(argc, argv, "--help")) {
        printf("usage: wstream-demo [options]\n\n");
        wst_config_print_help(demo_config, stdout);
        return 0;
    }
    if (parse_settings(&d, argc, argv) != 0)
        goto out_release;
    if (wst_config_has_flag(argc, argv, "--print-config")) {
        wst_config_print(demo_config, &d.set, stdout);
        rc = 0;
        goto out_release;
    }
    /* The agent is installed beside this program (build/bin). */
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        goto out_release;
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    snprintf(agent_bin, sizeof(agent_bin), "%s/wstream-agent", self);
    signal(SIGPIPE, SIG_IGN);
    if (prepare(&d, agent_bin) == 0)
        rc = run(&d) == 0 ? 0 : 1;
    teardown(&d);
out_release:
    wst_config_release(demo_config, &d.set);
    return rc;
}
