/* bench_main.c - wstream-bench: one sender, one agent, wstream against
 * ucx_perftest on the same lanes.
 *
 * A refit of --size live bytes (the sized synthetic model "dense:<MiB>",
 * tools/demo/model.h) goes from one sender process to one wstream-agent
 * process (tools/demo/cluster.h), over UCX_TLS=tcp or sm,tcp. The first
 * refit (connect, HELLO/HAVE, plan) is reported on its own; then --repeats
 * refits, each of fresh data (the senders refill every version, untimed),
 * and the last one is checked byte for byte. Around each timed refit the
 * bench samples every thread's CPU time of both processes (thread_cpu.h)
 * and reads the agent's status file for where the time went (stages.h).
 * Then, with the cluster gone, ucx_perftest measures each of its bandwidth
 * tests --repeats times with the same UCX_TLS and about a refit's bytes per
 * run, twice (ceiling.h): with wstream's 8 MiB data chunk, and with
 * messages the refit's footprint (256 MiB or --size), which do not stay in
 * the CPU's caches as one 8 MiB buffer does. Over tcp on one host,
 * wstream-tcp-floor then streams the same bytes over kernel TCP alone
 * (floor.h), bare and hashed as wstream hashes them: what a verified
 * refit could reach here without UCX. Every figure over repeats is a
 * median: the machines this runs on are shared.
 *
 * Exit 0 only when every refit succeeded, the last one verified, UCX used
 * the lanes asked for, at least one perftest test gave a number at each
 * message size measured, and the floor, where it runs, checked its bytes.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "ceiling.h"
#include "cluster.h"
#include "config.h"
#include "floor.h"
#include "host_memory.h"
#include "log.h"
#include "median.h"
#include "model.h"
#include "perftest.h"
#include "receiver_config.h"
#include "refill.h"
#include "sender_config.h"
#include "stages.h"
#include "thread_cpu.h"
#include "worker.h"

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
    uint64_t perftest_footprint;
    uint64_t perftest_bytes;
    int floor;
    uint64_t window;
    uint64_t lanes;
    int verify;
    uint64_t digest_threads;
    uint64_t verify_threads;
    char *agent_lane_devices;
    char *sender_lane_devices;
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
    {"perftest-bin", WST_CONFIG_STRING, "ucx_perftest",
     "the ucx_perftest program: a path, or a name looked up beside the "
     "UCX loaded (its lib's ../bin, ../../bin), then on PATH",
     offsetof(struct bench_settings, perftest_bin), NULL, NULL},
    {"perftest-tests", WST_CONFIG_STRING,
     "ucp_put_bw,ucp_am_bw,tag_bw,ucp_am_bw+e,tag_bw+e",
     "comma-separated ucx_perftest tests; +e at the end: with -e, "
     "endpoints with peer-error handling as wstream's data endpoints have "
     "(fields named with _e)",
     offsetof(struct bench_settings, perftest_tests), NULL, NULL},
    {"chunk", WST_CONFIG_UINT, "8m",
     "perftest message size (wstream's data chunk: 8 MiB)",
     offsetof(struct bench_settings, chunk), NULL, NULL},
    {"perftest-footprint", WST_CONFIG_UINT, "256m",
     "perftest message size for the footprint ceiling (at most --size: "
     "messages that do not stay in cache, as a refit's bytes do not); 0: "
     "skip that run",
     offsetof(struct bench_settings, perftest_footprint), NULL, NULL},
    {"perftest-bytes", WST_CONFIG_UINT, "0",
     "bytes per perftest run (0: the refit size, at least 1 GiB)",
     offsetof(struct bench_settings, perftest_bytes), NULL, NULL},
    {"floor", WST_CONFIG_BOOL, "y",
     "measure kernel TCP's own rate for the same bytes, hashed as wstream "
     "hashes them (wstream-tcp-floor, beside this program; tcp over "
     "loopback only, at most 1 GiB)",
     offsetof(struct bench_settings, floor), NULL, NULL},
    {"window", WST_CONFIG_UINT, "0",
     "the sender's bytes in flight per receiver (0: its default, 32 MiB "
     "per lane, at least 64 MiB; 1 GiB on the direct device path)",
     offsetof(struct bench_settings, window), NULL, NULL},
    WST_CONFIG_LIKE_ENTRY(
        "lanes",
        "data lanes of the sender and the agent (1..8; 0: auto), "
        "and ucx_perftest's threads in its am, tag and stream tests",
        offsetof(struct bench_settings, lanes),
        &wst_send_config[WST_SEND_CONFIG_LANES]),
    {"verify", WST_CONFIG_BOOL, "y",
     "the agent checks every layer's digests (its --verify); the bench's "
     "byte-for-byte check of the last version runs either way",
     offsetof(struct bench_settings, verify), NULL, NULL},
    {"digest-threads", WST_CONFIG_UINT, "0",
     "the sender's hashing threads (0: its default)",
     offsetof(struct bench_settings, digest_threads), NULL, NULL},
    {"verify-threads", WST_CONFIG_UINT, "0",
     "the agent's hashing threads (its --verify-threads; 0: its default)",
     offsetof(struct bench_settings, verify_threads), NULL, NULL},
    {"agent-lane-devices", WST_CONFIG_STRING, "",
     "the agent's --lane-devices (network devices for its data lanes, "
     "comma-separated; empty: UCX chooses)",
     offsetof(struct bench_settings, agent_lane_devices), NULL, NULL},
    {"sender-lane-devices", WST_CONFIG_STRING, "",
     "the sender's lane_devices (network devices for its data lanes, "
     "comma-separated; empty: UCX chooses)",
     offsetof(struct bench_settings, sender_lane_devices), NULL, NULL},
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
    struct wst_thread_cpu_table cpu[2]; /* sender, agent */
    int cpu_ok;                         /* every sample was read */
    double refill_s_per_gib;            /* < 0: not measured */
    struct wst_bench_stages stages;
    int n_tests;
    char tests[WST_CEILING_MAX_TESTS][32];
    struct wst_bench_ceiling chunk;     /* at --chunk */
    struct wst_bench_ceiling footprint; /* at --perftest-footprint */
    int have_footprint;
    struct wst_bench_floor floor;
    int have_floor;
};

struct bench {
    struct bench_settings set;
    struct wst_model model;
    char workdir[1024];
    char perftest_path[PATH_MAX]; /* --perftest-bin, found */
    char floor_path[PATH_MAX];    /* wstream-tcp-floor, when it runs */
    int own_workdir;
    struct wst_cluster cluster;
    struct bench_result r;
};

static const char *opt(const char *s)
{
    return s != NULL && s[0] != '\0' ? s : NULL;
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

/* Pushes one version; its result into *res. -1 after saying why. */
static int refit(struct bench *b, uint64_t version,
                 struct wst_sender_result *res)
{
    if (wst_cluster_push(&b->cluster, version) != 0 ||
        wst_cluster_result(&b->cluster, 0, b->set.timeout + 10, res) != 0) {
        fprintf(stderr, "wstream-bench: the sender died in version %llu\n",
                (unsigned long long)version);
        return -1;
    }
    if (res->status != WST_OK) {
        fprintf(stderr, "wstream-bench: version %llu: %s: %s\n",
                (unsigned long long)version,
                wst_status_string((wst_status_t)res->status), res->error);
        return -1;
    }
    if (res->seconds <= 0)
        res->seconds = 1e-9;
    snprintf(b->r.mover, sizeof(b->r.mover), "%s", res->mover);
    snprintf(b->r.lanes, sizeof(b->r.lanes), "%s", res->lanes);
    return 0;
}

static void print_refit(const char *what, double s, uint64_t live)
{
    printf("%s: %.3f s, %.2f GB/s\n", what, s, live / s / 1e9);
    fflush(stdout);
}

/* Samples both processes' threads into cpu[0..2); -1 if one is gone. */
static int sample_cpu(struct bench *b, struct wst_thread_cpu_sample *cpu)
{
    return wst_thread_cpu_sample(b->cluster.senders[0].pid, &cpu[0]) ==
                       WST_OK &&
                   wst_thread_cpu_sample(b->cluster.agents[0].pid, &cpu[1]) ==
                       WST_OK
               ? 0
               : -1;
}

/* One timed refit, v of n: CPU samples around it, its stages after. */
static int timed_refit(struct bench *b, uint64_t v)
{
    static struct wst_thread_cpu_sample before[2], after[2];
    struct wst_sender_result res;
    uint64_t version = v + 2;
    char what[64];

    if (sample_cpu(b, before) != 0)
        b->r.cpu_ok = 0;
    if (refit(b, version, &res) != 0)
        return -1;
    /* The stages wait for the agent's status file: it is written just
     * after the commit, and its CPU belongs to this refit too. */
    if (wst_bench_stages_add(&b->r.stages, v, &b->cluster, version, &res) !=
        WST_OK)
        fprintf(stderr,
                "wstream-bench: version %llu: the agent's status file did "
                "not show it committed; no agent stages\n",
                (unsigned long long)version);
    if (sample_cpu(b, after) != 0)
        b->r.cpu_ok = 0;
    if (b->r.cpu_ok)
        for (int p = 0; p < 2; p++)
            wst_thread_cpu_table_add(&b->r.cpu[p], v, &before[p], &after[p]);
    b->r.refit_s[v] = res.seconds;
    b->r.push_s[v] = res.push_seconds;
    snprintf(what, sizeof(what), "refit %llu/%llu", (unsigned long long)v + 1,
             (unsigned long long)b->set.repeats);
    print_refit(what, res.seconds, b->cluster.live_bytes);
    return 0;
}

static int run_refits(struct bench *b)
{
    uint64_t live = b->cluster.live_bytes, n = b->set.repeats, v;
    struct wst_sender_result res;
    struct wst_agent_status st;

    if (refit(b, 1, &res) != 0)
        return -1;
    b->r.first_s = res.seconds;
    print_refit("first refit (connect, plan, move)", b->r.first_s, live);
    b->r.cpu_ok = 1;
    for (v = 0; v < n; v++)
        if (timed_refit(b, v) != 0)
            return -1;
    b->r.median_s = wst_bench_median(b->r.refit_s, n);
    b->r.median_push_s = wst_bench_median(b->r.push_s, n);
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

/* A test's name as a key of the summary line: "tag_bw+e" is tag_bw_e. */
static const char *key_of(const char *test, char *key, size_t len)
{
    snprintf(key, len, "%s", test);
    for (char *c = key; *c != '\0'; c++)
        if (*c == '+')
            *c = '_';
    return key;
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
            if (b->r.n_tests == WST_CEILING_MAX_TESTS ||
                n >= sizeof(b->r.tests[0]))
                return -1;
            memcpy(b->r.tests[b->r.n_tests], s, n);
            b->r.tests[b->r.n_tests++][n] = '\0';
        }
        s += n + (s[n] == ',');
    }
    return b->r.n_tests > 0 ? 0 : -1;
}

/* Both ceilings: at the chunk size, then (unless skipped) at the refit's
 * footprint. -1 when a size measured gave no number at all. */
static int run_perftest(struct bench *b)
{
    uint64_t bytes = b->set.perftest_bytes;
    uint64_t live = b->cluster.live_bytes;
    uint64_t foot = b->set.perftest_footprint;
    char log[1200];
    int ok;

    if (bytes == 0)
        bytes = live > GIB ? live : GIB;
    snprintf(log, sizeof(log), "%s/perftest.log", b->workdir);
    printf("perftest: %s, log %s\n", b->perftest_path,
           b->own_workdir ? "(removed)" : log);
    /* The same UCX protocols as wstream's own processes (worker.h). */
    if (getenv("UCX_PROTO_ENABLE") == NULL && wst_worker_old_protocols()) {
        setenv("UCX_PROTO_ENABLE", "n", 1);
        printf("perftest: UCX_PROTO_ENABLE=n, the protocols wstream's "
               "processes chose (their UCX moves no device memory)\n");
    }
    /* And the tcp receive segment they set. */
    uint64_t seg_bytes = wst_worker_tcp_rx_seg_set();
    if (seg_bytes != 0) {
        char seg[32];
        snprintf(seg, sizeof(seg), "%llu", (unsigned long long)seg_bytes);
        setenv("UCX_TCP_RX_SEG_SIZE", seg, 1);
        printf("perftest: UCX_TCP_RX_SEG_SIZE=%s, the tcp receive segment "
               "wstream's processes set\n",
               seg);
    }
    struct wst_perftest_params base = {
        .bin = b->perftest_path,
        .tls = transport_tls[b->set.transport],
        .host = opt(b->set.agent_host) ? b->set.agent_host : "127.0.0.1",
        .server_netns = opt(b->set.agent_netns),
        .client_netns = opt(b->set.sender_netns),
        .log_path = log,
        .threads = (unsigned)b->set.lanes,
        .timeout_s = b->set.timeout,
    };
    ok = wst_bench_ceiling_run(&base, (const char(*)[32])b->r.tests,
                               b->r.n_tests, "chunk", b->set.chunk, bytes,
                               b->set.repeats, &b->r.chunk) == WST_OK;
    if (foot == 0)
        return ok ? 0 : -1;
    if (foot > live)
        foot = live;
    b->r.have_footprint = 1;
    if (wst_bench_ceiling_run(&base, (const char(*)[32])b->r.tests,
                              b->r.n_tests, "footprint", foot, bytes,
                              b->set.repeats, &b->r.footprint) != WST_OK)
        ok = 0;
    return ok ? 0 : -1;
}

/* Whether the floor measures the path the refit took: tcp between two
 * processes over this host's loopback (floor.h). */
static int floor_applies(const struct bench *b)
{
    const char *host = opt(b->set.agent_host);

    return b->set.floor && b->set.transport == WST_TRANSPORT_TCP &&
           opt(b->set.agent_netns) == NULL &&
           opt(b->set.sender_netns) == NULL &&
           (host == NULL || strcmp(host, "127.0.0.1") == 0);
}

/* Kernel TCP's rate for the refit's bytes (at most 1 GiB, a multiple of
 * the lanes in MiB), with as many streams as lanes. -1 after saying why
 * it gave no number. */
static int run_floor(struct bench *b)
{
    uint64_t bytes = b->cluster.live_bytes < GIB ? b->cluster.live_bytes : GIB;
    unsigned streams = (unsigned)b->set.lanes;
    char err[512];

    bytes -= bytes % ((uint64_t)streams * MIB);
    if (bytes == 0) {
        fprintf(stderr,
                "wstream-bench: floor: the refit is smaller than %u "
                "MiB\n",
                streams);
        return -1;
    }
    printf("floor: %s, %llu MiB over %u stream%s\n", b->floor_path,
           (unsigned long long)(bytes / MIB), streams, streams == 1 ? "" : "s");
    if (wst_bench_floor_run(b->floor_path, bytes, streams,
                            (unsigned)b->set.repeats,
                            b->set.timeout * WST_FLOOR_MODES, &b->r.floor, err,
                            sizeof(err)) != WST_OK) {
        fprintf(stderr, "wstream-bench: floor: %s\n", err);
        return -1;
    }
    b->r.have_floor = 1;
    return 0;
}

/* ---- report ---- */

/* "%.3f" of ws/pt into buf, or "n/a" without a ceiling. */
static const char *ratio(char *buf, size_t len, double ws, double pt)
{
    if (pt > 0)
        snprintf(buf, len, "%.3f", ws / pt);
    else
        snprintf(buf, len, "n/a");
    return buf;
}

static const char *best_mode(const struct bench_result *r,
                             const struct wst_bench_ceiling *c)
{
    return c->best >= 0 ? r->tests[c->best] : "none";
}

static const char *best_mode_e(const struct bench_result *r,
                               const struct wst_bench_ceiling *c)
{
    return c->best_e >= 0 ? r->tests[c->best_e] : "none";
}

static void report_cpu(const struct bench *b)
{
    const struct bench_result *r = &b->r;
    double gib = (double)b->cluster.live_bytes / GIB;

    if (!r->cpu_ok) {
        printf("CPU per GiB: n/a (a process could not be sampled)\n\n");
        return;
    }
    printf("CPU per GiB moved (median of %llu refits; utime+stime of "
           "/proc/PID/task/TID/stat, sampled before and after each refit; "
           "busy: CPU time / time between the samples):\n",
           (unsigned long long)b->set.repeats);
    printf("| process | tid | thread (comm) | start order | CPU s/GiB | "
           "CPU s/refit | busy |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (int p = 0; p < 2; p++)
        wst_thread_cpu_table_print(&r->cpu[p], gib);
    if (r->refill_s_per_gib >= 0)
        printf("(the sender's main thread also regenerates the shards "
               "before each push, untimed: %.3f CPU s/GiB measured here)\n",
               r->refill_s_per_gib);
    printf("\n");
}

static void report_ceilings(const struct bench *b, double ws)
{
    const struct bench_result *r = &b->r;
    const struct wst_bench_ceiling *c[2] = {&r->chunk, &r->footprint};
    char rt[32];

    if (!b->set.perftest)
        return;
    printf("| perftest at | message | wstream GB/s (median) | perftest GB/s "
           "(best mode median) | best mode | ratio |\n");
    printf("|---|---|---|---|---|---|\n");
    for (int i = 0; i < 1 + r->have_footprint; i++) {
        printf("| %s | %.0f MiB | %.2f | %.2f | %s | %s |\n", c[i]->what,
               c[i]->msg_bytes / (double)MIB, ws, wst_bench_ceiling_gbps(c[i]),
               best_mode(r, c[i]),
               ratio(rt, sizeof(rt), ws, wst_bench_ceiling_gbps(c[i])));
        /* The modes wstream's data endpoints may run: with peer-error
         * handling (its safety rules keep it). */
        if (c[i]->best_e >= 0 && c[i]->best_e != c[i]->best)
            printf("| %s, peer-error handling | %.0f MiB | %.2f | %.2f | %s "
                   "| %s |\n",
                   c[i]->what, c[i]->msg_bytes / (double)MIB, ws,
                   wst_bench_ceiling_gbps_e(c[i]), best_mode_e(r, c[i]),
                   ratio(rt, sizeof(rt), ws, wst_bench_ceiling_gbps_e(c[i])));
    }
    printf("\n");
}

/* The floor's modes beside wstream: rate and CPU for the same bytes. */
static void report_floor(const struct bench *b, double ws)
{
    const struct bench_result *r = &b->r;
    const struct wst_bench_floor *f = &r->floor;
    double gib = (double)b->cluster.live_bytes / GIB;
    char rt[32];

    if (!r->have_floor)
        return;
    printf("| kernel TCP alone (wstream-tcp-floor: %u stream%s, 1 MiB "
           "segments, %llu MiB) | GB/s (median) | CPU s/GiB, both processes "
           "| wstream / this |\n",
           f->streams, f->streams == 1 ? "" : "s",
           (unsigned long long)(f->bytes / MIB));
    printf("|---|---|---|---|\n");
    for (int m = 0; m < WST_FLOOR_MODES; m++)
        printf("| %s | %.2f | %.2f | %s |\n", wst_floor_mode_names[m],
               f->gbps[m], f->cpu_s_gib[m],
               ratio(rt, sizeof(rt), ws, f->gbps[m]));
    /* The sender's main thread refills the shards between refits, which a
     * trainer does not ask of it: left out, and the agent's (idle) with it,
     * so both sides are counted alike, by their threads' own clocks. */
    if (r->cpu_ok)
        printf("| wstream, verified (sender and agent threads, not their "
               "main ones) | %.2f | %.2f | 1.000 |\n",
               ws,
               (wst_thread_cpu_table_others_s(&r->cpu[0]) +
                wst_thread_cpu_table_others_s(&r->cpu[1])) /
                   gib);
    printf("\n");
}

static void report(const struct bench *b)
{
    char key[40];
    const struct bench_result *r = &b->r;
    uint64_t live = b->cluster.live_bytes;
    double ws = r->median_s > 0 ? live / r->median_s / 1e9 : 0;
    double pt = wst_bench_ceiling_gbps(&r->chunk);
    double pf = wst_bench_ceiling_gbps(&r->footprint);
    const char *tr = transport_choices[b->set.transport];
    unsigned lanes = (unsigned)b->set.lanes; /* data lanes asked of both */
    char rt[32], rf[32];

    ratio(rt, sizeof(rt), ws, pt);
    ratio(rf, sizeof(rf), ws, pf);
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
    printf("stages (median of %llu refits; %u layers; agent verify %s):\n",
           (unsigned long long)b->set.repeats, r->stages.layers,
           b->set.verify ? "on" : "off");
    wst_bench_stages_print(&r->stages);
    printf("\n");
    report_cpu(b);
    report_ceilings(b, ws);
    report_floor(b, ws);
    printf("| transport | lanes | data lanes | mover | size | wstream GB/s "
           "(median) | perftest GB/s at chunk | ratio | perftest GB/s at "
           "footprint | ratio footprint |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    printf("| %s | %s | %u | %s | %.0f MiB | %.2f | %.2f (%s) | %s | %.2f "
           "(%s) | %s |\n\n",
           tr, r->lanes, lanes, r->mover, live / (double)MIB, ws, pt,
           best_mode(r, &r->chunk), rt, pf, best_mode(r, &r->footprint), rf);
    if (b->set.csv) {
        printf("csv,transport,lanes,data_lanes,mover,size_bytes,wstream_gbps,"
               "perftest_gbps,perftest_mode,ratio,perftest_footprint_gbps,"
               "perftest_footprint_mode,ratio_footprint\n");
        printf("csv,%s,\"%s\",%u,%s,%llu,%.3f,%.3f,%s,%s,%.3f,%s,%s\n\n", tr,
               r->lanes, lanes, r->mover, (unsigned long long)live, ws, pt,
               best_mode(r, &r->chunk), rt, pf, best_mode(r, &r->footprint),
               rf);
    }
    printf("wstream-bench: transport=%s mover=%s lanes=%s data_lanes=%u "
           "size=%llu repeats=%llu wstream_gbps=%.3f perftest_gbps=%.3f "
           "perftest_mode=%s ratio=%s perftest_footprint_gbps=%.3f "
           "perftest_footprint_mode=%s ratio_footprint=%s first_refit_s=%.4f "
           "sender_register_s=%.6f agent_register_s=%.6f plan_s=%.6f "
           "push_return_s=%.6f",
           tr, r->mover, r->lanes, lanes, (unsigned long long)live,
           (unsigned long long)b->set.repeats, ws, pt, best_mode(r, &r->chunk),
           rt, pf, best_mode(r, &r->footprint), rf, r->first_s,
           r->sender_register_s, r->agent_register_s, r->plan_s,
           r->median_push_s);
    {
        char re[32], rfe[32];
        printf(" perftest_e_gbps=%.3f perftest_e_mode=%s ratio_e=%s "
               "perftest_footprint_e_gbps=%.3f perftest_footprint_e_mode=%s "
               "ratio_footprint_e=%s",
               wst_bench_ceiling_gbps_e(&r->chunk), best_mode_e(r, &r->chunk),
               ratio(re, sizeof(re), ws, wst_bench_ceiling_gbps_e(&r->chunk)),
               wst_bench_ceiling_gbps_e(&r->footprint),
               best_mode_e(r, &r->footprint),
               ratio(rfe, sizeof(rfe), ws,
                     wst_bench_ceiling_gbps_e(&r->footprint)));
    }
    if (r->have_floor) {
        char rfl[32];
        const struct wst_bench_floor *f = &r->floor;
        printf(" floor_gbps=%.3f ratio_floor=%s floor_cpu_s_per_gib=%.3f "
               "floor_bare_gbps=%.3f floor_poll_gbps=%.3f "
               "floor_hot_gbps=%.3f",
               f->gbps[WST_FLOOR_HASH_AHEAD],
               ratio(rfl, sizeof(rfl), ws, f->gbps[WST_FLOOR_HASH_AHEAD]),
               f->cpu_s_gib[WST_FLOOR_HASH_AHEAD], f->gbps[WST_FLOOR_BARE],
               f->gbps[WST_FLOOR_BARE_POLL], f->gbps[WST_FLOOR_HASH_HOT]);
    } else {
        printf(" ratio_floor=n/a");
    }
    if (r->stages.have_agent)
        printf(" agent_window_s=%.6f commit_tail_s=%.6f outside_s=%.6f",
               wst_bench_stages_median(&r->stages, WST_STAGE_AGENT),
               wst_bench_stages_median(&r->stages, WST_STAGE_TAIL),
               wst_bench_stages_median(&r->stages, WST_STAGE_OUTSIDE));
    if (r->cpu_ok)
        printf(" sender_cpu_s_per_gib=%.3f agent_cpu_s_per_gib=%.3f",
               wst_thread_cpu_table_process_s(&r->cpu[0]) / live * GIB,
               wst_thread_cpu_table_process_s(&r->cpu[1]) / live * GIB);
    for (int t = 0; t < r->n_tests; t++)
        printf(" %s_gbps=%.3f", key_of(r->tests[t], key, sizeof(key)),
               r->chunk.gbps[t]);
    for (int t = 0; r->have_footprint && t < r->n_tests; t++)
        printf(" %s_footprint_gbps=%.3f", key_of(r->tests[t], key, sizeof(key)),
               r->footprint.gbps[t]);
    printf(
        " agent_verify=%s digest_threads=%llu verify_threads=%llu "
        "verified=%s\n",
        b->set.verify ? "yes" : "no", (unsigned long long)b->set.digest_threads,
        (unsigned long long)b->set.verify_threads, r->verified ? "yes" : "no");
    fflush(stdout);
}

/* ---- set-up ---- */

/* wstream-tcp-floor beside this program (both are installed to one bin
 * directory); -1 with why in 'err' when it is not there to run. */
static int locate_floor(char *path, size_t len, char *err, size_t errlen)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    char *slash;

    if (n <= 0) {
        snprintf(err, errlen, "cannot read /proc/self/exe: %s",
                 strerror(errno));
        return -1;
    }
    self[n] = '\0';
    slash = strrchr(self, '/');
    if (slash != NULL)
        *slash = '\0';
    if (snprintf(path, len, "%s/wstream-tcp-floor", self) >= (int)len) {
        snprintf(err, errlen, "the path of wstream-tcp-floor is too long");
        return -1;
    }
    if (access(path, X_OK) != 0) {
        snprintf(err, errlen,
                 "%s: %s (it measures kernel TCP beside the refit; "
                 "--floor=no runs without it)",
                 path, strerror(errno));
        return -1;
    }
    return 0;
}

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
    if (st == WST_OK && b->set.lanes > WST_WORKER_LANES_MAX) {
        snprintf(err, sizeof(err), "--lanes: %llu is not in 0..%d (0: auto)",
                 (unsigned long long)b->set.lanes, WST_WORKER_LANES_MAX);
        st = WST_ERR_CONFIG;
    }
    if (st == WST_OK && (b->set.digest_threads > WST_DIGEST_THREADS_MAX ||
                         b->set.verify_threads > WST_RECV_VERIFY_THREADS_MAX)) {
        snprintf(err, sizeof(err),
                 "--digest-threads and --verify-threads: want 0..%d and "
                 "0..%d (0: the default)",
                 WST_DIGEST_THREADS_MAX, WST_RECV_VERIFY_THREADS_MAX);
        st = WST_ERR_CONFIG;
    }
    /* Both sides and perftest get the same count: auto resolved here. */
    if (st == WST_OK && b->set.lanes == 0)
        b->set.lanes = wst_worker_lanes_auto();
    if (st == WST_OK && parse_tests(b) != 0) {
        snprintf(err, sizeof(err),
                 "--perftest-tests \"%s\": want 1..8 comma-separated names",
                 b->set.perftest_tests);
        st = WST_ERR_CONFIG;
    }
    if (st == WST_OK && b->set.perftest &&
        wst_perftest_locate(b->set.perftest_bin, b->perftest_path,
                            sizeof(b->perftest_path), err, sizeof(err)) != 0)
        st = WST_ERR_CONFIG;
    if (st == WST_OK && floor_applies(b) &&
        locate_floor(b->floor_path, sizeof(b->floor_path), err, sizeof(err)) !=
            0)
        st = WST_ERR_CONFIG;
    if (st == WST_OK)
        st = wst_bench_host_memory_check(b->set.size, err, sizeof(err));
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
        wst_bench_stages_init(&b->r.stages, b->set.repeats) != WST_OK ||
        wst_cluster_workdir("wstream-bench", b->set.workdir, b->workdir,
                            sizeof(b->workdir), &b->own_workdir) != 0)
        return -1;
    printf("wstream-bench: %s (%zu tensors in %u layers), 1 sender -> 1 "
           "agent, transport %s, mover %s, %llu data lanes, agent verify %s, "
           "%llu repeats\n",
           b->model.preset, b->model.n_tensors, b->model.n_layers,
           transport_choices[b->set.transport],
           wst_send_mover_names[b->set.mover], (unsigned long long)b->set.lanes,
           b->set.verify ? "on" : "off", (unsigned long long)b->set.repeats);
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
        .window_bytes = b->set.window,
        .lanes = (uint32_t)b->set.lanes,
        .digest_threads = (uint32_t)b->set.digest_threads,
        .agent_lane_devices = opt(b->set.agent_lane_devices),
        .sender_lane_devices = opt(b->set.sender_lane_devices),
        .secret_file = b->set.auth_secret_file,
    };
    /* The agent takes its settings from WST_* variables too (its config
     * table), and inherits this process's environment. */
    setenv("WST_VERIFY", b->set.verify ? "yes" : "no", 1);
    if (b->set.verify_threads != 0) {
        char n[24];
        snprintf(n, sizeof(n), "%llu",
                 (unsigned long long)b->set.verify_threads);
        setenv("WST_VERIFY_THREADS", n, 1);
    }
    if (wst_cluster_start(&b->cluster, &cp) != 0)
        return -1;
    if (wst_thread_cpu_table_init(&b->r.cpu[0], "sender",
                                  b->cluster.senders[0].pid,
                                  b->set.repeats) != WST_OK ||
        wst_thread_cpu_table_init(&b->r.cpu[1], "agent",
                                  b->cluster.agents[0].pid,
                                  b->set.repeats) != WST_OK)
        return -1;
    return 0;
}

static void teardown(struct bench *b)
{
    if (b->own_workdir)
        wst_cluster_workdir_remove("wstream-bench", b->workdir);
    free(b->r.refit_s);
    free(b->r.push_s);
    wst_thread_cpu_table_release(&b->r.cpu[0]);
    wst_thread_cpu_table_release(&b->r.cpu[1]);
    wst_bench_stages_release(&b->r.stages);
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
    /* The refill's cost on the same generator, so that the sender main
     * thread's CPU can be read; on a slice, not the whole model. */
    if (wst_bench_refill_cost(b->set.size / MIB < 256 ? b->set.size / MIB : 256,
                              b->set.seed, &b->r.refill_s_per_gib) != WST_OK)
        b->r.refill_s_per_gib = -1;
    if (b->set.perftest && run_perftest(b) != 0) {
        fprintf(stderr, "wstream-bench: at some message size no perftest "
                        "test gave a number\n");
        ok = 0;
    }
    if (floor_applies(b) && run_floor(b) != 0)
        ok = 0;
    else if (b->set.floor && !floor_applies(b))
        printf("floor: not measured: it is kernel TCP over loopback, the "
               "path of --transport tcp without namespaces or another "
               "host\n");
    report(b);
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    static struct bench b;
    char agent_bin[PATH_MAX];
    int rc;

    b.r.chunk.best = b.r.chunk.best_e = -1;
    b.r.footprint.best = b.r.footprint.best_e = -1;
    b.r.refill_s_per_gib = -1;
    wst_config_cli(bench_config, &b.set, argc, argv, "wstream-bench",
                   "wstream-bench [options]\n\n"
                   "exit codes: 0 every refit verified and a perftest number\n"
                   "  at each size; 1 a refit or perftest failed; 2 bad usage\n"
                   "  (also: no ucx_perftest found, too little memory)",
                   &rc);
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
