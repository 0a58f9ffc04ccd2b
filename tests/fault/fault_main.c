/* fault_main.c - wstream-fault: one fault-injection scenario over real
 * processes and real UCX (tools/demo/cluster.h).
 *
 *   start 1 sender + 1 agent; refit v1 and verify it;
 *   push v2 and, once the agent's live memory starts changing (bytes of v2
 *   are landing), inject the fault: SIGKILL or SIGSTOP of the sender, the
 *   agent, or a partition (the veth link inside the agent's namespace goes
 *   down);
 *   measure how long the survivor takes to notice (agent: its status file
 *   shows the refit failed, unusable, with a reason; sender: the v2 result
 *   is an error naming the receiver) and check it is within peer_timeout +
 *   1 s; check the survivor is still alive;
 *   recover (SIGCONT / restart / link up), refit v3 (v4 if the first refit
 *   after the failure fails, which is reported) and verify every byte.
 *
 * Without --fault it runs v1 and v2 and checks the lanes UCX reported
 * against --expect-lanes / --forbid-lanes (the namespace lanes case).
 *
 * Exit 0 only when everything held; 1 on a failed check; 2 on bad usage.
 * Every check prints one line: "ok: ..." or "FAIL: ...".
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "cluster.h"
#include "config.h"
#include "log.h"
#include "model.h"

enum fault_kind { FAULT_NONE, FAULT_KILL, FAULT_STOP, FAULT_PARTITION };
enum fault_side { SIDE_SENDER, SIDE_AGENT, SIDE_BOTH };

struct settings {
    int fault;
    int side;
    int transport;
    int shm_data;
    double peer_timeout;
    double heartbeat;
    char *preset;
    uint64_t layers;
    char *agent_netns;
    char *sender_netns;
    char *agent_host;
    char *veth;
    double delay_ms;
    double timeout;
    int log_level;
    char *expect_lanes;
    char *forbid_lanes;
    uint64_t seed;
};

static const char *const fault_choices[] = {"none", "kill", "stop", "partition",
                                            NULL};
static const char *const side_choices[] = {"sender", "agent", "both", NULL};
static const char *const transport_choices[] = {"auto", "tcp", "shm", NULL};
static const char *const shm_data_choices[] = {"auto", "yes", "no", NULL};

static const struct wst_config_entry fault_config[] = {
    {"fault", WST_CONFIG_ENUM, "none", "none, kill, stop, partition",
     offsetof(struct settings, fault), fault_choices, NULL},
    {"shm-data", WST_CONFIG_ENUM, "auto",
     "data endpoints without peer-failure detection, so data can use shared "
     "memory (auto: yes with --transport shm; sender.h, shm_data)",
     offsetof(struct settings, shm_data), shm_data_choices, NULL},
    {"side", WST_CONFIG_ENUM, "sender",
     "process hit: sender, agent (both: partition)",
     offsetof(struct settings, side), side_choices, NULL},
    {"transport", WST_CONFIG_ENUM, "tcp", "auto, tcp, shm",
     offsetof(struct settings, transport), transport_choices, NULL},
    {"peer-timeout", WST_CONFIG_DOUBLE, "2", "silence that fails a peer (s)",
     offsetof(struct settings, peer_timeout), NULL, NULL},
    {"heartbeat", WST_CONFIG_DOUBLE, "0.5", "heartbeat interval (s)",
     offsetof(struct settings, heartbeat), NULL, NULL},
    {"preset", WST_CONFIG_STRING, "tiny", "model preset",
     offsetof(struct settings, preset), NULL, NULL},
    {"layers", WST_CONFIG_UINT, "24", "layers (0: the preset's)",
     offsetof(struct settings, layers), NULL, NULL},
    {"agent-netns", WST_CONFIG_STRING, "", "agent's network namespace",
     offsetof(struct settings, agent_netns), NULL, NULL},
    {"sender-netns", WST_CONFIG_STRING, "", "sender's network namespace",
     offsetof(struct settings, sender_netns), NULL, NULL},
    {"agent-host", WST_CONFIG_STRING, "", "agent address (default 127.0.0.1)",
     offsetof(struct settings, agent_host), NULL, NULL},
    {"veth", WST_CONFIG_STRING, "",
     "link to take down for a partition, inside the agent namespace",
     offsetof(struct settings, veth), NULL, NULL},
    {"delay-ms", WST_CONFIG_DOUBLE, "-1",
     "after the first v2 bytes land, wait this long before the fault "
     "(-1: 50 ms over tcp, 5 ms over shm, where 470 MB take ~0.1 s)",
     offsetof(struct settings, delay_ms), NULL, NULL},
    {"timeout", WST_CONFIG_DOUBLE, "15", "agents' --timeout, senders' wait",
     offsetof(struct settings, timeout), NULL, NULL},
    {"log-level", WST_CONFIG_ENUM, "warn", "agents' and senders' log level",
     offsetof(struct settings, log_level), wst_log_level_names, NULL},
    {"expect-lanes", WST_CONFIG_STRING, "",
     "substring the sender's lanes must contain (space separated list)",
     offsetof(struct settings, expect_lanes), NULL, NULL},
    {"forbid-lanes", WST_CONFIG_STRING, "",
     "substrings the sender's lanes must not contain (space separated)",
     offsetof(struct settings, forbid_lanes), NULL, NULL},
    {"seed", WST_CONFIG_UINT, "7", "data seed", offsetof(struct settings, seed),
     NULL, NULL},
    WST_CONFIG_END,
};

static struct settings set;
static struct wst_model model;
static struct wst_cluster cluster;
static char workdir[256];
static int failures;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (cond) {                                                            \
            printf("ok: ");                                                    \
        } else {                                                               \
            printf("FAIL: ");                                                  \
            failures++;                                                        \
        }                                                                      \
        printf(__VA_ARGS__);                                                   \
        printf("\n");                                                          \
        fflush(stdout);                                                        \
    } while (0)

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    va_list ap;
    printf("fault: ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

static const char *opt(const char *s)
{
    return s != NULL && s[0] != '\0' ? s : NULL;
}

/* ---- sampling the agent's live memory: has v2 started landing? ---- */

#define SAMPLE_STRIDE (256u << 10)

struct samples {
    size_t n;
    uint64_t *v;
};

static void samples_take(struct samples *s)
{
    const struct wst_cluster_agent *a = &cluster.agents[0];
    const char *base = a->shm;

    s->n = a->layout.shm_bytes / SAMPLE_STRIDE;
    if (s->n == 0)
        s->n = 1;
    s->v = calloc(s->n, sizeof(*s->v));
    for (size_t i = 0; s->v != NULL && i < s->n; i++)
        memcpy(&s->v[i], base + i * SAMPLE_STRIDE, sizeof(uint64_t));
}

static size_t samples_changed(const struct samples *s)
{
    const char *base = cluster.agents[0].shm;
    size_t n = 0;

    for (size_t i = 0; s->v != NULL && i < s->n; i++) {
        uint64_t x;
        memcpy(&x, base + i * SAMPLE_STRIDE, sizeof(x));
        n += x != s->v[i];
    }
    return n;
}

/* ---- processes ---- */

/* 1 when alive (a stopped process is alive), 0 when it exited; 'how' says
 * how it ended. Reaps it if it did. */
static int alive(pid_t *pid, char *how, size_t len)
{
    int ws;

    snprintf(how, len, "running");
    if (*pid <= 0) {
        snprintf(how, len, "not running");
        return 0;
    }
    pid_t r = waitpid(*pid, &ws, WNOHANG);
    if (r == 0)
        return 1;
    if (r == *pid) {
        if (WIFSIGNALED(ws))
            snprintf(how, len, "killed by signal %d (%s)%s", WTERMSIG(ws),
                     strsignal(WTERMSIG(ws)),
                     WCOREDUMP(ws) ? ", core dumped" : "");
        else
            snprintf(how, len, "exited with status %d", WEXITSTATUS(ws));
        *pid = 0;
        return 0;
    }
    return kill(*pid, 0) == 0;
}

static int res_ready(uint32_t r, int ms)
{
    struct pollfd pfd = {.fd = cluster.senders[r].res_fd, .events = POLLIN};

    return cluster.senders[r].pid > 0 && poll(&pfd, 1, ms) > 0;
}

static int link_cmd(const char *state)
{
    char cmd[512];

    snprintf(cmd, sizeof(cmd), "ip netns exec %s ip link set %s %s",
             set.agent_netns, set.veth, state);
    int rc = system(cmd);
    if (rc != 0)
        note("'%s' failed (%d)", cmd, rc);
    return rc == 0 ? 0 : -1;
}

/* ---- one refit ---- */

static int refit(uint64_t version, struct wst_sender_result *res,
                 const char *why)
{
    struct wst_agent_status st;

    if (wst_cluster_push(&cluster, version) != 0 ||
        wst_cluster_result(&cluster, 0, set.timeout + 15, res) != 0) {
        note("%s: version %llu: no result from the sender", why,
             (unsigned long long)version);
        return -1;
    }
    if (res->status != 0) {
        note("%s: version %llu failed: %s: %s", why,
             (unsigned long long)version,
             wst_status_string((wst_status_t)res->status), res->error);
        return -1;
    }
    int ok = wst_cluster_verify(&cluster, version) == 0;
    /* The status file is written when the engine resumes; give it a moment. */
    uint64_t deadline = wst_deadline_ns(2.0);
    do {
        if (wst_cluster_agent_status(&cluster, 0, &st) == 0 && st.usable &&
            st.committed_version == version)
            break;
        usleep(5000);
    } while (wst_now_ns() < deadline);
    CHECK(ok && st.usable && st.committed_version == version,
          "%s: version %llu, %.1f MB in %.3f s, bit-exact %s, agent usable=%d "
          "committed=%llu, lanes %s",
          why, (unsigned long long)version, res->bytes / 1e6, res->seconds,
          ok ? "yes" : "NO", st.usable,
          (unsigned long long)st.committed_version, res->lanes);
    return ok && st.usable && st.committed_version == version ? 0 : -1;
}

static int lanes_check(const char *lanes)
{
    char buf[512], *save = NULL;
    int ok = 1;

    snprintf(buf, sizeof(buf), "%s", set.expect_lanes);
    for (char *t = strtok_r(buf, " ", &save); t;
         t = strtok_r(NULL, " ", &save)) {
        int has = strstr(lanes, t) != NULL;
        CHECK(has, "lanes \"%s\" contain \"%s\"", lanes, t);
        ok &= has;
    }
    snprintf(buf, sizeof(buf), "%s", set.forbid_lanes);
    for (char *t = strtok_r(buf, " ", &save); t;
         t = strtok_r(NULL, " ", &save)) {
        int has = strstr(lanes, t) != NULL;
        CHECK(!has, "lanes \"%s\" do not contain \"%s\"", lanes, t);
        ok &= !has;
    }
    return ok ? 0 : -1;
}

/* ---- detection ---- */

static const char *lane_name(void)
{
    return transport_choices[set.transport];
}

static void detection_line(const char *survivor, double seconds, int ok)
{
    printf("detection: fault=%s side=%s lane=%s survivor=%s seconds=%.3f "
           "limit=%.1f %s\n",
           fault_choices[set.fault], side_choices[set.side], lane_name(),
           survivor, seconds, set.peer_timeout + 1.0, ok ? "ok" : "FAIL");
    fflush(stdout);
    if (!ok)
        failures++;
}

/* The agent survived: poll its status file until the failed refit shows. */
static void agent_detects(uint64_t fault_ns, uint64_t failed_before)
{
    struct wst_agent_status st;
    uint64_t deadline = wst_deadline_ns(set.peer_timeout + set.timeout + 5);
    int seen = 0;

    while (wst_now_ns() < deadline) {
        if (wst_cluster_agent_status(&cluster, 0, &st) == 0 &&
            st.refits_failed > failed_before && !st.usable) {
            seen = 1;
            break;
        }
        usleep(2000);
    }
    if (!seen) {
        note("agent never reported the failed refit (usable=%d failed=%llu "
             "reason \"%s\")",
             st.usable, (unsigned long long)st.refits_failed, st.reason);
        detection_line("agent", -1, 0);
        return;
    }
    double s = st.time_ns > fault_ns ? (st.time_ns - fault_ns) / 1e9 : 0;
    detection_line("agent", s, s <= set.peer_timeout + 1.0);
    int named = strstr(st.reason, "sender") != NULL && strlen(st.reason) > 12;
    CHECK(named, "agent reason names the sender and the cause: \"%s\"",
          st.reason);
}

/* The sender survived: its v2 result must be an error naming the receiver. */
static void sender_detects(uint64_t fault_ns)
{
    struct wst_sender_result res;
    char who[320];

    snprintf(who, sizeof(who), "receiver %s:%u",
             opt(set.agent_host) ? set.agent_host : "127.0.0.1",
             cluster.agents[0].port);
    if (wst_cluster_result(&cluster, 0, set.peer_timeout + set.timeout + 5,
                           &res) != 0) {
        note("no v2 result from the sender");
        detection_line("sender", -1, 0);
        return;
    }
    double s = res.end_ns > fault_ns ? (res.end_ns - fault_ns) / 1e9 : 0;
    detection_line("sender", s, res.status != 0 && s <= set.peer_timeout + 1.0);
    CHECK(res.status != 0, "sender v2 result is an error: %s (%d)",
          wst_status_name((wst_status_t)res.status), res.status);
    int named =
        strstr(res.error, who) != NULL && strlen(res.error) > strlen(who) + 4;
    CHECK(named, "sender error names \"%s\" and the cause: \"%s\"", who,
          res.error);
}

/* ---- the scenario ---- */

static int scenario(void)
{
    struct wst_sender_result res;
    struct wst_agent_status st0;
    char how[128];
    int agent_hit = set.side == SIDE_AGENT || set.side == SIDE_BOTH;
    int sender_hit = set.side == SIDE_SENDER || set.side == SIDE_BOTH;

    if (refit(1, &res, "first refit") != 0)
        return -1;
    if (set.fault == FAULT_NONE) {
        if (refit(2, &res, "second refit") != 0)
            return -1;
        return lanes_check(res.lanes);
    }
    if (opt(set.expect_lanes) || opt(set.forbid_lanes))
        lanes_check(res.lanes);
    wst_cluster_agent_status(&cluster, 0, &st0);

    /* v2: wait until its bytes land in the agent's live memory. */
    struct samples smp;
    samples_take(&smp);
    uint64_t push_ns = wst_now_ns();
    if (wst_cluster_push(&cluster, 2) != 0)
        return -1;
    uint64_t landing_deadline = wst_deadline_ns(set.timeout);
    size_t changed = 0;
    while ((changed = samples_changed(&smp)) == 0 &&
           wst_now_ns() < landing_deadline && !res_ready(0, 0))
        usleep(200);
    uint64_t landed_ns = wst_now_ns();
    if (set.delay_ms < 0)
        set.delay_ms = set.transport == 2 ? 5 : 50;
    if (set.delay_ms > 0)
        usleep((useconds_t)(set.delay_ms * 1000));
    int already_done = res_ready(0, 0);

    uint64_t fault_ns = wst_now_ns();
    switch (set.fault) {
    case FAULT_KILL:
    case FAULT_STOP: {
        int sig = set.fault == FAULT_KILL ? SIGKILL : SIGSTOP;
        if (set.side == SIDE_SENDER)
            wst_cluster_signal_sender(&cluster, 0, sig);
        else
            wst_cluster_signal_agent(&cluster, 0, sig);
        break;
    }
    case FAULT_PARTITION:
        if (link_cmd("down") != 0)
            return -1;
        break;
    }
    size_t changed_at_fault = samples_changed(&smp);
    note("v2 bytes first landed %.3f s after the push; fault %.3f s after "
         "that, with %zu/%zu samples of the agent's memory changed",
         (landed_ns - push_ns) / 1e9, (fault_ns - landed_ns) / 1e9,
         changed_at_fault, smp.n);
    CHECK(changed > 0 && !already_done && changed_at_fault < smp.n,
          "the fault landed mid-refit (%s)",
          already_done                ? "NO: the refit had already ended"
          : changed == 0              ? "NO: no v2 byte had landed"
          : changed_at_fault >= smp.n ? "NO: every sample already changed"
                                      : "bytes landing, refit not over");
    free(smp.v);

    /* Detection on the survivor(s). */
    if (set.fault == FAULT_PARTITION) {
        agent_detects(fault_ns, st0.refits_failed);
        sender_detects(fault_ns);
    } else if (sender_hit) {
        agent_detects(fault_ns, st0.refits_failed);
    } else {
        sender_detects(fault_ns);
    }
    /* A survivor that crashes while handling the failure may take a moment
     * to die (UCX prints a backtrace first): look after a settle time. */
    usleep(1500 * 1000);
    if (!agent_hit || set.fault == FAULT_PARTITION) {
        int a = alive(&cluster.agents[0].pid, how, sizeof(how));
        CHECK(a, "surviving agent still alive (%s)", how);
    }
    if (!sender_hit || set.fault == FAULT_PARTITION) {
        int a = alive(&cluster.senders[0].pid, how, sizeof(how));
        CHECK(a, "surviving sender still alive (%s)", how);
    }

    /* Recover. */
    uint64_t failed_now = st0.refits_failed;
    {
        struct wst_agent_status st;
        if (wst_cluster_agent_status(&cluster, 0, &st) == 0)
            failed_now = st.refits_failed;
    }
    switch (set.fault) {
    case FAULT_KILL:
        if (sender_hit) {
            CHECK(wst_cluster_restart_sender(&cluster, 0) == 0,
                  "sender restarted");
        } else {
            CHECK(wst_cluster_restart_agent(&cluster, 0) == 0,
                  "agent restarted");
        }
        break;
    case FAULT_STOP:
        if (sender_hit) {
            wst_cluster_signal_sender(&cluster, 0, SIGCONT);
            /* The resumed sender must notice its refit failed. */
            struct wst_sender_result r2;
            int got = wst_cluster_result(&cluster, 0,
                                         set.peer_timeout + set.timeout + 5,
                                         &r2) == 0;
            CHECK(got && r2.status != 0,
                  "resumed sender reports its v2 failed: %s: \"%s\"",
                  got ? wst_status_name((wst_status_t)r2.status) : "no result",
                  got ? r2.error : "");
            int a = alive(&cluster.senders[0].pid, how, sizeof(how));
            CHECK(a, "resumed sender alive (%s)", how);
        } else {
            uint64_t cont_ns = wst_now_ns();
            wst_cluster_signal_agent(&cluster, 0, SIGCONT);
            /* The resumed agent must notice its refit failed. */
            struct wst_agent_status st;
            uint64_t deadline = wst_deadline_ns(set.peer_timeout + 5);
            int seen = 0;
            while (wst_now_ns() < deadline) {
                if (wst_cluster_agent_status(&cluster, 0, &st) == 0 &&
                    st.refits_failed > st0.refits_failed && !st.usable) {
                    seen = 1;
                    break;
                }
                usleep(5000);
            }
            CHECK(seen,
                  "resumed agent reports its v2 failed within %.1f s "
                  "(%.3f s after SIGCONT): usable=%d failed=%llu \"%s\"",
                  set.peer_timeout + 5,
                  seen && st.time_ns > cont_ns ? (st.time_ns - cont_ns) / 1e9
                                               : -1.0,
                  st.usable, (unsigned long long)st.refits_failed, st.reason);
            int a = alive(&cluster.agents[0].pid, how, sizeof(how));
            CHECK(a, "resumed agent alive (%s)", how);
        }
        break;
    case FAULT_PARTITION:
        CHECK(link_cmd("up") == 0, "link %s up again", set.veth);
        break;
    }
    (void)failed_now;

    /* A complete refit must succeed and make the agent usable again. */
    if (refit(3, &res, "recovery refit") == 0)
        return 0;
    note("retrying once with version 4 (the first refit after the fault "
         "failed: a link that failed is re-made on the next push)");
    CHECK(0, "first refit after recovery (v3) succeeded");
    if (refit(4, &res, "second recovery refit") == 0)
        return 0;
    return -1;
}

/* Checks what the table cannot express; 0 when the settings are usable. */
static int check_settings(void)
{
    char err[512];
    wst_status_t st = WST_OK;

    if (set.fault == FAULT_PARTITION &&
        (!opt(set.agent_netns) || !opt(set.veth) || set.side != SIDE_BOTH)) {
        snprintf(err, sizeof(err),
                 "--fault partition needs --side both, --agent-netns and "
                 "--veth");
        st = WST_ERR_CONFIG;
    }
    if (st == WST_OK && (set.fault == FAULT_KILL || set.fault == FAULT_STOP) &&
        set.side == SIDE_BOTH) {
        snprintf(err, sizeof(err), "--side both is for --fault partition");
        st = WST_ERR_CONFIG;
    }
    if (st == WST_OK && (set.peer_timeout <= 0 || set.heartbeat <= 0)) {
        snprintf(err, sizeof(err),
                 "--peer-timeout and --heartbeat must be > 0");
        st = WST_ERR_CONFIG;
    }
    if (st != WST_OK)
        fprintf(stderr, "wstream-fault: %s\n", err);
    return st == WST_OK ? 0 : -1;
}

int main(int argc, char **argv)
{
    char agent_bin[PATH_MAX], err[512];
    int rc;

    memset(&set, 0, sizeof(set));
    wst_config_cli(fault_config, &set, argc, argv, "wstream-fault",
                   "wstream-fault [options]\n\n"
                   "exit codes: 0 everything held; 1 a failed check; 2 bad "
                   "usage",
                   &rc);
    if (rc >= 0)
        goto out;
    rc = 2;
    if (check_settings() != 0 ||
        wst_cluster_agent_path(agent_bin, sizeof(agent_bin)) != 0)
        goto out;
    if (wst_model_preset(set.preset, (uint32_t)set.layers, &model, err,
                         sizeof(err)) != WST_OK) {
        fprintf(stderr, "wstream-fault: %s\n", err);
        goto out;
    }
    int own_workdir;
    if (wst_cluster_workdir("wstream-fault", NULL, workdir, sizeof(workdir),
                            &own_workdir) != 0)
        goto out_model;
    signal(SIGPIPE, SIG_IGN);
    note("fault %s, side %s, transport %s, heartbeat %.2f s, peer timeout "
         "%.2f s, preset %s (%llu layers, %.1f MB)%s%s",
         fault_choices[set.fault], side_choices[set.side], lane_name(),
         set.heartbeat, set.peer_timeout, set.preset,
         (unsigned long long)model.n_layers, wst_model_bytes(&model) / 1e6,
         opt(set.agent_netns) ? ", agent in netns " : "",
         opt(set.agent_netns) ? set.agent_netns : "");
    struct wst_cluster_params cp = {
        .model = &model,
        .n_senders = 1,
        .n_receivers = 1,
        .transport = (enum wst_transport)set.transport,
        .mover = "auto",
        .seed = set.seed,
        .timeout_s = set.timeout,
        .heartbeat_s = set.heartbeat,
        .peer_timeout_s = set.peer_timeout,
        .log_level = set.log_level,
        .agent_bin = agent_bin,
        .workdir = workdir,
        .agent_host = opt(set.agent_host),
        .agent_netns = opt(set.agent_netns),
        .sender_netns = opt(set.sender_netns),
        .shm_data = set.shm_data == 1 ||
                    (set.shm_data == 0 && set.transport == WST_TRANSPORT_SHM),
    };
    rc = 1;
    if (wst_cluster_start(&cluster, &cp) != 0) {
        note("cluster did not start");
        failures++;
    } else if (scenario() != 0) {
        failures++;
    }
    if (set.fault == FAULT_PARTITION)
        link_cmd("up"); /* whatever happened, leave the link up */
    wst_cluster_stop(&cluster);
    wst_cluster_workdir_remove("wstream-fault", workdir);
    rc = failures == 0 ? 0 : 1;
    printf("wstream-fault: %s\n", rc == 0 ? "PASS" : "FAILED");
out_model:
    wst_model_release(&model);
out:
    wst_config_release(fault_config, &set);
    return rc;
}
