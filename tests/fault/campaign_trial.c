/* campaign_trial.c - one wstream-campaign trial, run in a process of its
 * own: a fresh cluster, version 1 committed and checked, version 2 pushed
 * with one fault (SIGKILL, or SIGSTOP then SIGCONT, of a sender, an agent
 * or an engine, at a layer of a sender's progress or a delay after the
 * push), then, once everything settled (or the deadline passed: a hang),
 * the group observed and classified (campaign_classify.c). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "campaign.h"
#include "clock.h"
#include "cluster.h"
#include "model.h"

#define HEARTBEAT_S 0.5
#define PEER_TIMEOUT_S 2.0
#define SETTLE_S 0.5 /* everything quiet this long: settled */

struct trial {
    const struct campaign_trial *t;
    double timeout_s;
    struct wst_model model;
    struct wst_cluster c;
    struct campaign_obs obs;
    pid_t apid[CAMPAIGN_MAX], epid[CAMPAIGN_MAX], spid[CAMPAIGN_MAX];
    int trig[2];
    /* the fault */
    int injected;
    uint64_t push_ns, fault_ns;
    pid_t stopped; /* stopped by the fault, not resumed yet; 0: none */
    uint64_t cont_ns;
};

/* Updates p from pid's state, reaping it if it ended. */
static void proc_poll(pid_t pid, struct campaign_proc *p)
{
    int ws;

    if (!p->alive || pid <= 0)
        return;
    if (waitpid(pid, &ws, WNOHANG) != pid)
        return;
    p->alive = 0;
    if (WIFSIGNALED(ws)) {
        p->exit_code = -1;
        snprintf(p->how, sizeof(p->how), "died of signal %d (%s)%s",
                 WTERMSIG(ws), strsignal(WTERMSIG(ws)),
                 WCOREDUMP(ws) ? ", core dumped" : "");
    } else {
        p->exit_code = WEXITSTATUS(ws);
        snprintf(p->how, sizeof(p->how), "exited with status %d", p->exit_code);
    }
}

static void procs_poll(struct trial *x)
{
    for (uint32_t k = 0; k < x->obs.agents; k++) {
        proc_poll(x->apid[k], &x->obs.agent[k]);
        proc_poll(x->epid[k], &x->obs.engine[k]);
    }
    for (uint32_t r = 0; r < x->obs.senders; r++)
        proc_poll(x->spid[r], &x->obs.sender[r]);
}

/* The target's pid and its liveness record. */
static pid_t target_pid(struct trial *x, struct campaign_proc **p)
{
    uint32_t i = x->t->index;

    switch (x->t->target) {
    case TARGET_SENDER:
        *p = &x->obs.sender[i];
        return x->spid[i];
    case TARGET_AGENT:
        *p = &x->obs.agent[i];
        return x->apid[i];
    default:
        *p = &x->obs.engine[i];
        return x->epid[i];
    }
}

static void inject(struct trial *x, int by_trigger)
{
    const struct campaign_trial *t = x->t;
    struct campaign_proc *p;
    pid_t pid = target_pid(x, &p);
    int sig = t->kind == KIND_KILL ? SIGKILL : SIGSTOP;

    x->injected = 1;
    x->fault_ns = wst_now_ns();
    /* A sender hit at its layer signalled itself (cluster.h, trigger). */
    if (!(by_trigger && t->target == TARGET_SENDER) && p->alive)
        kill(pid, sig);
    if (sig == SIGSTOP && p->alive) {
        x->stopped = pid;
        x->cont_ns = x->fault_ns + (uint64_t)(t->stop_s * 1e9);
    }
    printf("campaign: fault injected %.3f s after the push\n",
           (x->fault_ns - x->push_ns) / 1e9);
    fflush(stdout);
}

/* Reads the result lines that arrived. */
static void results_poll(struct trial *x)
{
    for (uint32_t r = 0; r < x->obs.senders; r++) {
        struct pollfd pfd = {.fd = x->c.senders[r].res_fd, .events = POLLIN};
        struct wst_sender_result res;
        if (x->obs.answered[r] || poll(&pfd, 1, 0) <= 0 ||
            !(pfd.revents & POLLIN))
            continue;
        /* The cluster keeps its pid until trial_stop: a sender that died
         * after answering is still read. */
        if (wst_cluster_result(&x->c, r, 1.0, &res) != 0)
            continue;
        x->obs.answered[r] = 1;
        x->obs.status[r] = res.status;
        printf("campaign: sender %u: version 2: %s%s%s\n", r,
               res.status == 0 ? "committed"
                               : wst_status_name((wst_status_t)res.status),
               res.status == 0 ? "" : ": ", res.error);
        fflush(stdout);
    }
}

/* Not settled yet: what is still going on, into what; 0 when settled. */
static int unsettled(struct trial *x, char *what, size_t len)
{
    const struct campaign_trial *t = x->t;
    struct wst_agent_status st;
    char state[32], reason[16];

    if (x->stopped) {
        snprintf(what, len, "the stopped target is not resumed yet");
        return 1;
    }
    if (!x->injected && t->when == WHEN_DELAY) {
        snprintf(what, len, "the fault is not injected yet");
        return 1;
    }
    for (uint32_t r = 0; r < x->obs.senders; r++)
        if (x->obs.sender[r].alive && !x->obs.answered[r]) {
            snprintf(what, len, "sender %u has not answered", r);
            return 1;
        }
    for (uint32_t k = 0; k < x->obs.agents; k++) {
        if (x->obs.agent[k].alive &&
            (wst_cluster_agent_status(&x->c, k, &st) != 0 || st.refit_open)) {
            snprintf(what, len, "agent %u has its refit open (phase %s)", k,
                     st.refit_phase);
            return 1;
        }
        if (x->obs.engine[k].alive &&
            wst_cluster_engine_state(&x->c, k, state, sizeof(state), reason,
                                     sizeof(reason)) == 0 &&
            strcmp(state, "paused") == 0) {
            snprintf(what, len, "engine %u is still paused", k);
            return 1;
        }
    }
    return 0;
}

/* Pushes version 2 with the fault and waits until everything settled or
 * the deadline passed (obs.hang). */
static void fault_run(struct trial *x, double v1_s)
{
    const struct campaign_trial *t = x->t;
    double delay = t->delay_frac * v1_s;
    uint64_t settled_since = 0;
    char what[256] = "";

    x->push_ns = wst_now_ns();
    if (wst_cluster_push(&x->c, 2) != 0) {
        x->obs.hang = 1;
        snprintf(x->obs.hang_what, sizeof(x->obs.hang_what),
                 "could not push version 2");
        return;
    }
    for (;;) {
        uint64_t now = wst_now_ns();
        char byte;
        if (!x->injected && t->when == WHEN_LAYER &&
            read(x->trig[0], &byte, 1) == 1)
            inject(x, 1);
        if (!x->injected && t->when == WHEN_DELAY &&
            now >= x->push_ns + (uint64_t)(delay * 1e9))
            inject(x, 0);
        if (x->stopped && now >= x->cont_ns) {
            kill(x->stopped, SIGCONT);
            x->stopped = 0;
        }
        results_poll(x);
        procs_poll(x);
        uint64_t base =
            x->injected ? x->fault_ns : x->push_ns + (uint64_t)(delay * 1e9);
        uint64_t deadline =
            base + (uint64_t)((t->stop_s + 3 * x->timeout_s) * 1e9);
        if (!unsettled(x, what, sizeof(what))) {
            if (settled_since == 0)
                settled_since = now;
            else if (now - settled_since >= (uint64_t)(SETTLE_S * 1e9))
                return;
        } else {
            settled_since = 0;
            if (now > deadline) {
                x->obs.hang = 1;
                /* Bounded so that it fits (gcc's Debug build checks). */
                snprintf(x->obs.hang_what, sizeof(x->obs.hang_what),
                         "%llu ms after the fault: %.200s",
                         (unsigned long long)((now - base) / 1000000), what);
                return;
            }
        }
        usleep(5000);
    }
}

/* The group as it ended, into x->obs (processes already polled). */
static void observe(struct trial *x)
{
    for (uint32_t k = 0; k < x->obs.agents; k++) {
        struct wst_agent_status st;
        char reason[8];
        if (wst_cluster_agent_status(&x->c, k, &st) == 0) {
            x->obs.agent_usable[k] = st.usable;
            x->obs.agent_version[k] = st.committed_version;
        }
        if (wst_cluster_engine_state(&x->c, k, x->obs.engine_state[k],
                                     sizeof(x->obs.engine_state[k]), reason,
                                     sizeof(reason)) != 0)
            snprintf(x->obs.engine_state[k], sizeof(x->obs.engine_state[k]),
                     "?");
        wst_cluster_engine_version(&x->c, k, &x->obs.engine_version[k]);
        x->obs.bytes[k] = wst_cluster_verify_agent(&x->c, k, 2) == 0   ? 2
                          : wst_cluster_verify_agent(&x->c, k, 1) == 0 ? 1
                                                                       : 0;
        printf("campaign: agent %u %s, %s at %llu; engine %u %s, %s at %llu; "
               "live bytes %s\n",
               k, x->obs.agent[k].alive ? "alive" : x->obs.agent[k].how,
               x->obs.agent_usable[k] ? "usable" : "unusable",
               (unsigned long long)x->obs.agent_version[k], k,
               x->obs.engine[k].alive ? "alive" : x->obs.engine[k].how,
               x->obs.engine_state[k],
               (unsigned long long)x->obs.engine_version[k],
               x->obs.bytes[k] == 2   ? "v2"
               : x->obs.bytes[k] == 1 ? "v1"
                                      : "neither");
    }
    fflush(stdout);
}

/* Version 1 everywhere: every sender committed it, every byte is of it,
 * every agent usable at it, every engine serving it. 0, or -1 with why. */
static int version1(struct trial *x, double *v1_s, char *why, size_t len)
{
    uint64_t push = wst_now_ns(), last = push;
    struct wst_sender_result res;

    if (wst_cluster_push(&x->c, 1) != 0) {
        snprintf(why, len, "version 1: could not push");
        return -1;
    }
    for (uint32_t r = 0; r < x->obs.senders; r++) {
        if (wst_cluster_result(&x->c, r, 3 * x->timeout_s, &res) != 0 ||
            res.status != 0) {
            snprintf(why, len, "version 1: sender %u: %s: %.300s", r,
                     res.status == -1
                         ? "no result"
                         : wst_status_name((wst_status_t)res.status),
                     res.error);
            return -1;
        }
        if (res.end_ns > last)
            last = res.end_ns;
    }
    *v1_s = (last - push) / 1e9;
    if (wst_cluster_verify(&x->c, 1) != 0) {
        snprintf(why, len, "version 1: live bytes wrong (trial.log)");
        return -1;
    }
    uint64_t deadline = wst_deadline_ns(3.0);
    for (uint32_t k = 0; k < x->obs.agents; k++) {
        struct wst_agent_status st;
        char state[32] = "", reason[8];
        uint64_t ev = 0;
        for (;;) {
            int ok = wst_cluster_agent_status(&x->c, k, &st) == 0 &&
                     st.usable && st.committed_version == 1 && !st.refit_open &&
                     wst_cluster_engine_state(&x->c, k, state, sizeof(state),
                                              reason, sizeof(reason)) == 0 &&
                     strcmp(state, "serving") == 0 &&
                     wst_cluster_engine_version(&x->c, k, &ev) == 0 && ev == 1;
            if (ok)
                break;
            if (wst_now_ns() > deadline) {
                snprintf(why, len,
                         "version 1: agent %u usable=%d at %llu, engine %s "
                         "at %llu",
                         k, st.usable, (unsigned long long)st.committed_version,
                         state, (unsigned long long)ev);
                return -1;
            }
            usleep(10000);
        }
    }
    return 0;
}

/* The cluster, with the trigger wired to the trial's sender and layer. */
static int trial_start(struct trial *x, const char *workdir, char *why,
                       size_t len)
{
    const struct campaign_trial *t = x->t;
    static char agent_bin[PATH_MAX], engine_bin[PATH_MAX + 32];
    char err[512];

    if (wst_cluster_agent_path(agent_bin, sizeof(agent_bin)) != 0) {
        snprintf(why, len, "cannot find wstream-agent");
        return -1;
    }
    snprintf(engine_bin, sizeof(engine_bin), "%s", agent_bin);
    snprintf(strrchr(engine_bin, '/') + 1,
             sizeof(engine_bin) -
                 (size_t)(strrchr(engine_bin, '/') + 1 - engine_bin),
             "wstream-engine-standin");
    if (wst_model_preset(t->preset, t->layers, &x->model, err, sizeof(err)) !=
        WST_OK) {
        snprintf(why, len, "model: %.300s", err);
        return -1;
    }
    if (pipe2(x->trig, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(why, len, "pipe: %s", strerror(errno));
        return -1;
    }
    struct wst_cluster_params cp = {
        .model = &x->model,
        .n_senders = t->senders,
        .n_receivers = t->agents,
        .lanes = t->lanes,
        .transport = t->shm ? WST_TRANSPORT_SHM : WST_TRANSPORT_TCP,
        .mover = "auto",
        .seed = t->seed,
        .timeout_s = x->timeout_s,
        .heartbeat_s = HEARTBEAT_S,
        .peer_timeout_s = PEER_TIMEOUT_S,
        .log_level = 2,
        .agent_bin = agent_bin,
        .workdir = workdir,
        .engine_bin = engine_bin,
        .trigger_sender = t->trigger_sender,
        .trigger_layer = t->layer,
        .trigger_version = t->when == WHEN_LAYER ? 2 : 0,
        .trigger_fd = x->trig[1],
        .trigger_self_signal = t->target == TARGET_SENDER
                                   ? (t->kind == KIND_KILL ? SIGKILL : SIGSTOP)
                                   : 0,
    };
    if (wst_cluster_start(&x->c, &cp) != 0) {
        snprintf(why, len, "the cluster did not start (trial.log)");
        return -1;
    }
    x->obs.agents = t->agents;
    x->obs.senders = t->senders;
    for (uint32_t k = 0; k < t->agents; k++) {
        x->apid[k] = x->c.agents[k].pid;
        x->epid[k] = x->c.agents[k].engine_pid;
        x->obs.agent[k].alive = x->obs.engine[k].alive = 1;
    }
    for (uint32_t r = 0; r < t->senders; r++) {
        x->spid[r] = x->c.senders[r].pid;
        x->obs.sender[r].alive = 1;
    }
    return 0;
}

/* Forgets the pids already reaped, so that stop signals no stranger. */
static void trial_stop(struct trial *x)
{
    if (x->stopped)
        kill(x->stopped, SIGCONT);
    for (uint32_t k = 0; x->c.agents != NULL && k < x->obs.agents; k++) {
        if (!x->obs.agent[k].alive)
            x->c.agents[k].pid = 0;
        if (!x->obs.engine[k].alive)
            x->c.agents[k].engine_pid = 0;
    }
    for (uint32_t r = 0; x->c.senders != NULL && r < x->obs.senders; r++)
        if (!x->obs.sender[r].alive) {
            x->c.senders[r].pid = 0;
            close(x->c.senders[r].cmd_fd);
            close(x->c.senders[r].res_fd);
        }
    wst_cluster_stop(&x->c);
    wst_model_release(&x->model);
}

/* The first UCX assertion ("tcp_iface.c:307  Assertion `...' failed") in
 * the trial's log into buf ("" when none). */
static void find_abort(const char *log, char *buf, size_t len)
{
    FILE *f = fopen(log, "r");
    char line[1024];

    buf[0] = '\0';
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        char *a = strstr(line, "Assertion `");
        if (a == NULL)
            continue;
        /* "[host:pid:tid:n]   file.c:307  Assertion ..." */
        char *site = strchr(line, ']');
        site = site != NULL ? site + 1 : line;
        while (*site == ' ')
            site++;
        char *end = strstr(a, "' failed");
        if (end != NULL)
            end[8] = '\0';
        line[strcspn(line, "\n")] = '\0';
        snprintf(buf, len, "%.*s %s", (int)strcspn(site, " "), site, a);
        break;
    }
    if (f != NULL)
        fclose(f);
}

void campaign_run(const struct campaign_trial *t, double timeout_s, int keep,
                  struct campaign_result *res)
{
    struct trial x;
    char log[300], desc[256];
    int own = 0;
    uint64_t t0 = wst_now_ns();

    memset(&x, 0, sizeof(x));
    memset(res, 0, sizeof(*res));
    x.t = t;
    x.timeout_s = timeout_s;
    x.trig[0] = x.trig[1] = -1;
    res->outcome = res->group = OUTCOME_FAILURE;
    signal(SIGPIPE, SIG_IGN);
    if (wst_cluster_workdir("wstream-campaign", NULL, res->workdir,
                            sizeof(res->workdir), &own) != 0) {
        snprintf(res->why, sizeof(res->why), "no workdir");
        return;
    }
    /* Everything this trial's processes print goes to its log. */
    snprintf(log, sizeof(log), "%s/trial.log", res->workdir);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
    campaign_describe(t, desc, sizeof(desc));
    printf("campaign: trial seed 0x%016llx: %s\n", (unsigned long long)t->seed,
           desc);
    fflush(stdout);
    if (trial_start(&x, res->workdir, res->why, sizeof(res->why)) == 0 &&
        version1(&x, &res->v1_s, res->why, sizeof(res->why)) == 0) {
        fault_run(&x, res->v1_s);
        if (x.stopped) { /* a hang: resume it before looking */
            kill(x.stopped, SIGCONT);
            x.stopped = 0;
        }
        usleep(100000);
        procs_poll(&x);
        observe(&x);
        enum campaign_outcome group;
        res->outcome =
            campaign_classify(t, &x.obs, &group, res->why, sizeof(res->why));
        res->group = group;
    }
    res->injected = x.injected;
    res->fault_at = x.injected ? (x.fault_ns - x.push_ns) / 1e9 : -1;
    printf("campaign: %s%s%s\n", campaign_outcome_name(res->outcome),
           res->why[0] ? ": " : "", res->why);
    fflush(stdout);
    trial_stop(&x);
    if (x.trig[0] >= 0) {
        close(x.trig[0]);
        close(x.trig[1]);
    }
    res->seconds = (wst_now_ns() - t0) / 1e9;
    find_abort(log, res->abort, sizeof(res->abort));
    if (res->outcome != OUTCOME_FAILURE && !keep) {
        wst_cluster_workdir_remove("wstream-campaign", res->workdir);
        res->workdir[0] = '\0';
    }
}
