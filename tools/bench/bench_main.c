/* bench_main.c - wstream-bench: one sender, one agent, wstream against
 * ucx_perftest on the same lanes.
 *
 * A refit of --size live bytes (the sized synthetic model "dense:<MiB>",
 * tools/demo/model.h) goes from one sender process to one wstream-agent
 * process (tools/demo/cluster.h), over UCX_TLS=tcp or sm,tcp. The first
 * refit (connect, HELLO/HAVE, plan) is reported on its own; then --repeats
 * refits, each of fresh data (the senders refill every version, untimed),
 * and the last one is checked byte for byte. Then, with the cluster gone,
 * ucx_perftest measures each of its bandwidth tests --repeats times with the
 * same UCX_TLS, the message size of wstream's data chunks and about a
 * refit's bytes per run; the best test's median is the ceiling.
 *
 * Exit 0 only when every refit succeeded, the last one verified, UCX used
 * the lanes asked for, and at least one perftest test gave a number.
 */
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "cluster.h"
#include "config.h"
#include "log.h"
#include "model.h"
#include "perftest.h"
#include "sender_config.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

struct bench_settings {
    uint64_t size;
    uint64_t layers;
    int transport;
    int mover;
    uint64_t repeats;
    int perftest;
    char *perftest_bin;
    char *perftest_tests;
    uint64_t chunk;
    uint64_t perftest_bytes;
    uint64_t seed;
    double timeout;
    int log_level;
    char *workdir;
    char *agent_host;
    char *agent_netns;
    char *sender_netns;
    int csv;
    char *auth_secret_file;
};

static const char *const transport_choices[] = {"auto", "tcp", "shm", NULL};
/* UCX_TLS per transport, as cluster.c sets it for the refit. */
static const char *const transport_tls[] = {NULL, "tcp", "sm,tcp"};

static const struct wst_config_entry bench_config[] = {
    {"size", WST_CONFIG_UINT, "1g",
     "live bytes per refit (k/m/g suffixes, whole MiB)",
     offsetof(struct bench_settings, size), NULL, NULL},
    {"layers", WST_CONFIG_UINT, "4",
     "layers of the synthetic model (2 tensors each)",
     offsetof(struct bench_settings, layers), NULL, NULL},
    {"transport", WST_CONFIG_ENUM, "tcp",
     "tcp (UCX_TLS=tcp), shm (UCX_TLS=sm,tcp) or auto",
     offsetof(struct bench_settings, transport), transport_choices, NULL},
    WST_CONFIG_LIKE_ENTRY("mover", NULL, offsetof(struct bench_settings, mover),
                          &wst_send_config[WST_SEND_CONFIG_MOVER]),
    {"repeats", WST_CONFIG_UINT, "5",
     "timed refits after the first, and runs of each perftest test",
     offsetof(struct bench_settings, repeats), NULL, NULL},
    {"perftest", WST_CONFIG_BOOL, "y", "measure the ucx_perftest ceiling",
     offsetof(struct bench_settings, perftest), NULL, NULL},
    {"perftest-bin", WST_CONFIG_STRING, "/usr/bin/ucx_perftest",
     "the ucx_perftest program", offsetof(struct bench_settings, perftest_bin),
     NULL, NULL},
    {"perftest-tests", WST_CONFIG_STRING, "ucp_put_bw,ucp_am_bw,tag_bw",
     "comma-separated ucx_perftest tests",
     offsetof(struct bench_settings, perftest_tests), NULL, NULL},
    {"chunk", WST_CONFIG_UINT, "8m",
     "perftest message size (wstream's data chunk: 8 MiB)",
     offsetof(struct bench_settings, chunk), NULL, NULL},
    {"perftest-bytes", WST_CONFIG_UINT, "0",
     "bytes per perftest run (0: the refit size, at least 1 GiB)",
     offsetof(struct bench_settings, perftest_bytes), NULL, NULL},
    {"seed", WST_CONFIG_UINT, "1", "data generator seed",
     offsetof(struct bench_settings, seed), NULL, NULL},
    {"timeout", WST_CONFIG_DOUBLE, "120",
     "seconds allowed per refit and per perftest process",
     offsetof(struct bench_settings, timeout), NULL, NULL},
    {"log-level", WST_CONFIG_ENUM, "warn", "log level of agent and sender",
     offsetof(struct bench_settings, log_level), wst_log_level_names, NULL},
    {"workdir", WST_CONFIG_STRING, "",
     "folder for layout, port, status and perftest log files (default: a "
     "new temp dir, removed at exit)",
     offsetof(struct bench_settings, workdir), NULL, NULL},
    {"agent-host", WST_CONFIG_STRING, "",
     "agent listen/connect address, and perftest's server (default "
     "127.0.0.1)",
     offsetof(struct bench_settings, agent_host), NULL, NULL},
    {"agent-netns", WST_CONFIG_STRING, "",
     "network namespace of the agent and the perftest server",
     offsetof(struct bench_settings, agent_netns), NULL, NULL},
    {"sender-netns", WST_CONFIG_STRING, "",
     "network namespace of the sender and the perftest client",
     offsetof(struct bench_settings, sender_netns), NULL, NULL},
    {"csv", WST_CONFIG_BOOL, "n", "also print the table as CSV",
     offsetof(struct bench_settings, csv), NULL, NULL},
    WST_CONFIG_LIKE_ENTRY("auth-secret-file",
                          "the secret for agent and sender (default: a "
                          "fresh random one in the work folder)",
                          offsetof(struct bench_settings, auth_secret_file),
                          &wst_auth_config[WST_AUTH_CONFIG_SECRET_FILE]),
    WST_CONFIG_END,
};

/* What one run found: wstream's side, then the perftest side. */
struct bench_result {
    double first_s;
    double *refit_s; /* [repeats] */
    double median_s;
    double *push_s; /* [repeats]: until push returned */
    double median_push_s;
    int verified;
    char mover[16];
    char lanes[256];
    double sender_register_s;
    double agent_register_s;
    double plan_s;
    int n_tests;
    char tests[8][32];
    double test_gbps[8]; /* median; < 0: failed */
    int best;            /* index into tests; -1: none */
};

struct bench {
    struct bench_settings set;
    struct wst_model model;
    char workdir[1024];
    int own_workdir;
    struct wst_cluster cluster;
    struct bench_result r;
    double last_push_s;
};

static const char *opt(const char *s)
{
    return s != NULL && s[0] != '\0' ? s : NULL;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* Median of n values (n >= 1); sorts a copy. */
static double median(const double *v, size_t n)
{
    double *c = malloc(n * sizeof(*c)), m;

    if (c == NULL)
        return v[0];
    memcpy(c, v, n * sizeof(*c));
    qsort(c, n, sizeof(*c), compare_double);
    m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
    free(c);
    return m;
}

/* See demo_main.c: the transport asked for must be the one UCX used. */
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

/* ---- the wstream side ---- */

/* Pushes one version; returns its push-to-commit seconds, or -1. */
static double refit(struct bench *b, uint64_t version)
{
    struct wst_sender_result res;

    if (wst_cluster_push(&b->cluster, version) != 0 ||
        wst_cluster_result(&b->cluster, 0, b->set.timeout + 10, &res) != 0) {
        fprintf(stderr, "wstream-bench: the sender died in version %llu\n",
                (unsigned long long)version);
        return -1;
    }
    if (res.status != WST_OK) {
        fprintf(stderr, "wstream-bench: version %llu: %s: %s\n",
                (unsigned long long)version,
                wst_status_string((wst_status_t)res.status), res.error);
        return -1;
    }
    snprintf(b->r.mover, sizeof(b->r.mover), "%s", res.mover);
    snprintf(b->r.lanes, sizeof(b->r.lanes), "%s", res.lanes);
    b->last_push_s = res.push_seconds;
    return res.seconds > 0 ? res.seconds : 1e-9;
}

static void print_refit(const char *what, double s, uint64_t live)
{
    printf("%s: %.3f s, %.2f GB/s\n", what, s, live / s / 1e9);
    fflush(stdout);
}

static int run_refits(struct bench *b)
{
    uint64_t live = b->cluster.live_bytes, n = b->set.repeats, v;
    struct wst_agent_status st;
    char what[64];

    b->r.first_s = refit(b, 1);
    if (b->r.first_s < 0)
        return -1;
    print_refit("first refit (connect, plan, move)", b->r.first_s, live);
    for (v = 0; v < n; v++) {
        double s = refit(b, v + 2);
        if (s < 0)
            return -1;
        b->r.refit_s[v] = s;
        b->r.push_s[v] = b->last_push_s;
        snprintf(what, sizeof(what), "refit %llu/%llu",
                 (unsigned long long)v + 1, (unsigned long long)n);
        print_refit(what, s, live);
    }
    b->r.median_s = median(b->r.refit_s, n);
    b->r.median_push_s = median(b->r.push_s, n);
    printf("push returned in: median %.3f ms (the caller's thread)\n",
           b->r.median_push_s * 1e3);
    if (wst_cluster_verify(&b->cluster, n + 1) != 0) {
        fprintf(stderr,
                "wstream-bench: VERIFY FAILED: version %llu is not "
                "bit-exact in the agent's memory\n",
                (unsigned long long)n + 1);
        return -1;
    }
    b->r.verified = 1;
    printf("verify: version %llu, every byte verified\n",
           (unsigned long long)n + 1);
    if (!lanes_match(b->set.transport, b->r.lanes)) {
        fprintf(stderr,
                "wstream-bench: transport %s asked, but UCX chose "
                "lanes %s\n",
                transport_choices[b->set.transport], b->r.lanes);
        return -1;
    }
    b->r.sender_register_s = b->cluster.senders[0].register_seconds;
    if (wst_cluster_agent_status(&b->cluster, 0, &st) == 0) {
        b->r.agent_register_s = st.register_seconds;
        b->r.plan_s = st.plan_seconds;
    }
    return 0;
}

/* ---- the perftest side ---- */

/* Splits --perftest-tests into b->r.tests. */
static int parse_tests(struct bench *b)
{
    const char *s = b->set.perftest_tests;

    b->r.n_tests = 0;
    while (*s != '\0') {
        size_t n = strcspn(s, ",");
        if (n > 0) {
            if (b->r.n_tests == 8 || n >= sizeof(b->r.tests[0]))
                return -1;
            memcpy(b->r.tests[b->r.n_tests], s, n);
            b->r.tests[b->r.n_tests++][n] = '\0';
        }
        s += n + (s[n] == ',');
    }
    return b->r.n_tests > 0 ? 0 : -1;
}

/* Runs test 't' --repeats times; its median GB/s, or -1 if any run
 * failed (a failed run gives no number, and neither does the test). */
static double run_test(struct bench *b, const char *test, uint64_t iters,
                       uint64_t warmup, const char *log)
{
    uint64_t n = b->set.repeats;
    double *gbps = calloc(n, sizeof(*gbps)), m = -1;
    char err[512];
    uint64_t i;

    if (gbps == NULL)
        return -1;
    struct wst_perftest_params p = {
        .bin = b->set.perftest_bin,
        .test = test,
        .tls = transport_tls[b->set.transport],
        .host = opt(b->set.agent_host) ? b->set.agent_host : "127.0.0.1",
        .server_netns = opt(b->set.agent_netns),
        .client_netns = opt(b->set.sender_netns),
        .log_path = log,
        .msg_bytes = b->set.chunk,
        .iters = iters,
        .warmup = warmup,
        .timeout_s = b->set.timeout,
    };
    printf("perftest %s:", test);
    for (i = 0; i < n; i++) {
        double mib_s;
        if (wst_perftest_run(&p, &mib_s, err, sizeof(err)) != 0) {
            printf(" FAILED\n");
            fprintf(stderr, "wstream-bench: perftest %s\n", err);
            goto out;
        }
        gbps[i] = mib_s * MIB / 1e9; /* perftest's MB/s are MiB/s */
        printf(" %.2f", gbps[i]);
        fflush(stdout);
    }
    m = median(gbps, n);
    printf(" GB/s, median %.2f\n", m);
out:
    fflush(stdout);
    free(gbps);
    return m;
}

static int run_perftest(struct bench *b)
{
    uint64_t bytes = b->set.perftest_bytes;
    uint64_t iters, warmup;
    char log[1200];

    if (bytes == 0)
        bytes = b->cluster.live_bytes > GIB ? b->cluster.live_bytes : GIB;
    iters = (bytes + b->set.chunk - 1) / b->set.chunk;
    warmup = iters / 8 > 2 ? iters / 8 : 2;
    snprintf(log, sizeof(log), "%s/perftest.log", b->workdir);
    printf("perftest: UCX_TLS=%s, %llu x %llu bytes per run (+%llu warm-up), "
           "log %s\n",
           transport_tls[b->set.transport] ? transport_tls[b->set.transport]
                                           : "(unset)",
           (unsigned long long)iters, (unsigned long long)b->set.chunk,
           (unsigned long long)warmup, b->own_workdir ? "(removed)" : log);
    b->r.best = -1;
    for (int t = 0; t < b->r.n_tests; t++) {
        b->r.test_gbps[t] = run_test(b, b->r.tests[t], iters, warmup, log);
        if (b->r.test_gbps[t] > 0 &&
            (b->r.best < 0 || b->r.test_gbps[t] > b->r.test_gbps[b->r.best]))
            b->r.best = t;
    }
    return b->r.best >= 0 ? 0 : -1;
}

/* ---- report ---- */

static void report(const struct bench *b)
{
    const struct bench_result *r = &b->r;
    uint64_t live = b->cluster.live_bytes;
    double ws = r->median_s > 0 ? live / r->median_s / 1e9 : 0;
    double pt = r->best >= 0 ? r->test_gbps[r->best] : 0;
    const char *mode = r->best >= 0 ? r->tests[r->best] : "none";
    const char *tr = transport_choices[b->set.transport];
    char ratio[32];

    snprintf(ratio, sizeof(ratio), pt > 0 ? "%.3f" : "n/a",
             pt > 0 ? ws / pt : 0);
    printf("\nregistration: sender %.2f ms, agent %.2f ms (ucp_mem_map of "
           "every shard and region, once)\n",
           r->sender_register_s * 1e3, r->agent_register_s * 1e3);
    printf("plan: %.3f ms (agent)\n", r->plan_s * 1e3);
    printf("first refit: %.3f s (%.2f GB/s)\n", r->first_s,
           live / r->first_s / 1e9);
    printf("refits GB/s:");
    for (uint64_t i = 0; i < b->set.repeats; i++)
        printf(" %.2f", live / r->refit_s[i] / 1e9);
    printf("\n\n");
    printf("| transport | lanes | mover | size | wstream GB/s (median) | "
           "perftest GB/s (best mode median) | ratio |\n");
    printf("|---|---|---|---|---|---|---|\n");
    printf("| %s | %s | %s | %.0f MiB | %.2f | %.2f (%s) | %s |\n\n", tr,
           r->lanes, r->mover, live / (double)MIB, ws, pt, mode, ratio);
    if (b->set.csv) {
        printf("csv,transport,lanes,mover,size_bytes,wstream_gbps,"
               "perftest_gbps,perftest_mode,ratio\n");
        printf("csv,%s,\"%s\",%s,%llu,%.3f,%.3f,%s,%s\n\n", tr, r->lanes,
               r->mover, (unsigned long long)live, ws, pt, mode, ratio);
    }
    printf("wstream-bench: transport=%s mover=%s lanes=%s size=%llu "
           "repeats=%llu wstream_gbps=%.3f perftest_gbps=%.3f "
           "perftest_mode=%s ratio=%s first_refit_s=%.4f "
           "sender_register_s=%.6f agent_register_s=%.6f plan_s=%.6f "
           "push_return_s=%.6f",
           tr, r->mover, r->lanes, (unsigned long long)live,
           (unsigned long long)b->set.repeats, ws, pt, mode, ratio, r->first_s,
           r->sender_register_s, r->agent_register_s, r->plan_s,
           r->median_push_s);
    for (int t = 0; t < r->n_tests; t++)
        printf(" %s_gbps=%.3f", r->tests[t], r->test_gbps[t]);
    printf(" verified=%s\n", r->verified ? "yes" : "no");
    fflush(stdout);
}

/* ---- set-up ---- */

/* Checks what the table cannot express; 0 when the settings are usable. */
static int check_settings(struct bench *b)
{
    char err[512];
    wst_status_t st = WST_OK;

    if (st == WST_OK &&
        (b->set.size == 0 || b->set.size % MIB != 0 || b->set.repeats == 0 ||
         b->set.repeats > 1000 || b->set.chunk == 0)) {
        snprintf(err, sizeof(err),
                 "need --size a whole number of MiB, "
                 "1..1000 --repeats and a --chunk");
        st = WST_ERR_CONFIG;
    }
    if (st == WST_OK && parse_tests(b) != 0) {
        snprintf(err, sizeof(err),
                 "--perftest-tests \"%s\": want 1..8 comma-separated names",
                 b->set.perftest_tests);
        st = WST_ERR_CONFIG;
    }
    if (st != WST_OK)
        fprintf(stderr, "wstream-bench: %s\n", err);
    return st == WST_OK ? 0 : -1;
}

static int prepare(struct bench *b, const char *agent_bin)
{
    char err[512], preset[32];

    snprintf(preset, sizeof(preset), "dense:%llu",
             (unsigned long long)(b->set.size / MIB));
    if (wst_model_preset(preset, (uint32_t)b->set.layers, &b->model, err,
                         sizeof(err)) != WST_OK) {
        fprintf(stderr, "wstream-bench: %s\n", err);
        return -1;
    }
    b->r.refit_s = calloc(b->set.repeats, sizeof(*b->r.refit_s));
    b->r.push_s = calloc(b->set.repeats, sizeof(*b->r.push_s));
    if (b->r.refit_s == NULL || b->r.push_s == NULL ||
        wst_cluster_workdir("wstream-bench", b->set.workdir, b->workdir,
                            sizeof(b->workdir), &b->own_workdir) != 0)
        return -1;
    printf("wstream-bench: %s (%zu tensors in %u layers), 1 sender -> 1 "
           "agent, transport %s, mover %s, %llu repeats\n",
           b->model.preset, b->model.n_tensors, b->model.n_layers,
           transport_choices[b->set.transport],
           wst_send_mover_names[b->set.mover],
           (unsigned long long)b->set.repeats);
    fflush(stdout);
    struct wst_cluster_params cp = {
        .model = &b->model,
        .n_senders = 1,
        .n_receivers = 1,
        .transport = (enum wst_transport)b->set.transport,
        .mover = wst_send_mover_names[b->set.mover],
        .seed = b->set.seed,
        .timeout_s = b->set.timeout,
        .log_level = b->set.log_level,
        .agent_bin = agent_bin,
        .workdir = b->workdir,
        .agent_host = opt(b->set.agent_host),
        .agent_netns = opt(b->set.agent_netns),
        .sender_netns = opt(b->set.sender_netns),
        .shm_data = b->set.transport == WST_TRANSPORT_SHM,
        .secret_file = b->set.auth_secret_file,
    };
    return wst_cluster_start(&b->cluster, &cp);
}

static void teardown(struct bench *b)
{
    if (b->own_workdir)
        wst_cluster_workdir_remove("wstream-bench", b->workdir);
    free(b->r.refit_s);
    free(b->r.push_s);
    wst_model_release(&b->model);
}

static int run(struct bench *b, const char *agent_bin)
{
    int ok = prepare(b, agent_bin) == 0 && run_refits(b) == 0;

    /* The cluster goes before perftest runs: its processes and memory
     * would only add noise to the ceiling. live_bytes stays valid. */
    wst_cluster_stop(&b->cluster);
    if (!ok)
        return -1;
    if (b->set.perftest && run_perftest(b) != 0) {
        fprintf(stderr, "wstream-bench: no perftest test gave a number\n");
        ok = 0;
    }
    report(b);
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    static struct bench b;
    char agent_bin[PATH_MAX];
    int rc;

    b.r.best = -1;
    wst_config_cli(bench_config, &b.set, argc, argv, "wstream-bench",
                   "wstream-bench [options]", &rc);
    if (rc >= 0)
        goto out_release;
    rc = 2;
    if (check_settings(&b) != 0 ||
        wst_cluster_agent_path(agent_bin, sizeof(agent_bin)) != 0)
        goto out_release;
    signal(SIGPIPE, SIG_IGN);
    rc = run(&b, agent_bin) == 0 ? 0 : 1;
    if (rc != 0 && b.own_workdir) {
        fprintf(stderr, "wstream-bench: kept %s for its logs\n", b.workdir);
        b.own_workdir = 0;
    }
    teardown(&b);
out_release:
    wst_config_release(bench_config, &b.set);
    return rc;
}
