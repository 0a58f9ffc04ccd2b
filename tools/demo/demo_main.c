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
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "config.h"
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

struct demo {
    struct demo_settings set;
    struct wst_model model;
    char workdir[1024]; /* short enough for every path built from it */
    int own_workdir;
    struct wst_cluster cluster;
};

/* The transport asked for must be the one UCX used: a "tcp" run must not
 * quietly move data over shared memory, nor "shm" over TCP. */
static int lanes_match(int transport, const char *lanes)
{
    int has_tcp = strstr(lanes, "tcp/") != NULL;
    int has_shm = strstr(lanes, "/memory") != NULL;

    if (transport == WST_TRANSPORT_TCP)
        return has_tcp && !has_shm;
    if (transport == WST_TRANSPORT_SHM)
        return has_shm && !has_tcp;
    return 1;
}

/* Pushes one version through every sender; fills 'first' with sender 0's
 * result and returns the refit's duration (the slowest sender), or -1. */
static double run_refit(struct demo *d, uint64_t version,
                        struct wst_sender_result *first)
{
    struct wst_cluster *c = &d->cluster;
    double seconds = 0;
    int ok = wst_cluster_push(c, version) == 0;

    for (uint32_t r = 0; r < c->p.n_senders; r++) {
        struct wst_sender_result res;
        if (wst_cluster_result(c, r, d->set.timeout + 10, &res) != 0) {
            fprintf(stderr, "wstream-demo: sender %u died\n", r);
            ok = 0;
            continue;
        }
        if (res.status != WST_OK) {
            fprintf(stderr, "wstream-demo: sender %u, version %llu: %s: %s\n",
                    r, (unsigned long long)version,
                    wst_status_string((wst_status_t)res.status), res.error);
            ok = 0;
        }
        if (r == 0)
            *first = res;
        if (res.seconds > seconds)
            seconds = res.seconds;
    }
    return ok ? seconds : -1;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static int run(struct demo *d)
{
    struct wst_sender_result res = {0};
    uint64_t live = d->cluster.live_bytes;
    double *secs = calloc(d->set.refits, sizeof(*secs));
    int verified = 1;

    if (secs == NULL)
        return -1;
    for (uint64_t v = 1; v <= d->set.refits; v++) {
        double t = run_refit(d, v, &res);
        int ok = t > 0 && wst_cluster_verify(&d->cluster, v) == 0;
        secs[v - 1] = t;
        printf("refit %llu/%llu: version %llu, %.1f MB in %.3f s "
               "(%.2f GB/s), %s\n",
               (unsigned long long)v, (unsigned long long)d->set.refits,
               (unsigned long long)v, live / 1e6, t, t > 0 ? live / t / 1e9 : 0,
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
        live / 1e6, median, median > 0 ? live / median / 1e9 : 0,
        transport_choices[d->set.transport], res.mover, res.lanes,
        verified ? "every byte verified" : "NOT VERIFIED");
    free(secs);
    return verified ? 0 : -1;
}

static void teardown(struct demo *d)
{
    wst_cluster_stop(&d->cluster);
    if (d->own_workdir)
        wst_cluster_workdir_remove("wstream-demo", d->workdir);
    wst_model_release(&d->model);
}

/* Checks what the table cannot express; 0 when the settings are usable. */
static int check_settings(const struct demo *d)
{
    if (d->set.senders == 0 || d->set.senders > 64 || d->set.receivers == 0 ||
        d->set.receivers > 64 || d->set.refits == 0 || d->set.refits > 100000) {
        fprintf(stderr, "wstream-demo: need 1..64 senders, 1..64 receivers "
                        "and at least one refit\n");
        return -1;
    }
    return 0;
}

static int prepare(struct demo *d, const char *agent_bin)
{
    char err[512];

    if (wst_model_preset(d->set.preset, (uint32_t)d->set.layers, &d->model, err,
                         sizeof(err)) != WST_OK) {
        fprintf(stderr, "wstream-demo: %s\n", err);
        return -1;
    }
    if (wst_cluster_workdir("wstream-demo", d->set.workdir, d->workdir,
                            sizeof(d->workdir), &d->own_workdir) != 0)
        return -1;
    printf("wstream-demo: preset %s (%zu tensors, %.1f MB), %llu senders -> "
           "%llu agents, transport %s\n",
           d->model.preset, d->model.n_tensors,
           wst_model_bytes(&d->model) / 1e6, (unsigned long long)d->set.senders,
           (unsigned long long)d->set.receivers,
           transport_choices[d->set.transport]);
    fflush(stdout);
    struct wst_cluster_params cp = {
        .model = &d->model,
        .n_senders = (uint32_t)d->set.senders,
        .n_receivers = (uint32_t)d->set.receivers,
        .transport = (enum wst_transport)d->set.transport,
        .mover = mover_choices[d->set.mover],
        .seed = d->set.seed,
        .timeout_s = d->set.timeout,
        .log_level = d->set.log_level,
        .agent_bin = agent_bin,
        .workdir = d->workdir,
        /* Asking for shm means data over shared memory (sender.h says
         * what that trades away on UCX 1.13). */
        .shm_data = d->set.transport == WST_TRANSPORT_SHM,
    };
    return wst_cluster_start(&d->cluster, &cp);
}

int main(int argc, char **argv)
{
    struct demo d;
    char agent_bin[PATH_MAX];
    int rc;

    memset(&d, 0, sizeof(d));
    wst_config_cli(demo_config, &d.set, argc, argv, "wstream-demo",
                   "wstream-demo [options]", &rc);
    if (rc >= 0)
        goto out_release;
    rc = 2;
    if (check_settings(&d) != 0 ||
        wst_cluster_agent_path(agent_bin, sizeof(agent_bin)) != 0)
        goto out_release;
    signal(SIGPIPE, SIG_IGN);
    rc = prepare(&d, agent_bin) == 0 && run(&d) == 0 ? 0 : 1;
    teardown(&d);
out_release:
    wst_config_release(demo_config, &d.set);
    return rc;
}
