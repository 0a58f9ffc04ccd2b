/* campaign_main.c - wstream-campaign: N randomized fault trials over real
 * processes and real UCX, each classified; any failure fails the run.
 *
 *   wstream-campaign --trials N --seed S [--transport tcp|shm|mixed]
 *                    [--jobs J] [--out FILE] [--replay SEED]
 *
 * Each trial (campaign_trial.c) runs in a child process of its own, in its
 * own workdir (its agents bind ephemeral ports), so --jobs J runs J at once.
 * Its choices are a pure function of its seed (campaign_pick.c); --replay
 * runs the one trial of that seed. How a trial is classified:
 * campaign_classify.c, and --help.
 *
 * Exit 0 when no trial failed (but for --tolerate-abort's); 1 when one
 * did; 2 on bad usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "campaign.h"
#include "clock.h"
#include "config.h"

struct settings {
    uint64_t trials;
    uint64_t seed;
    int transport;
    uint64_t jobs;
    char *out;
    char *replay;
    double timeout;
    int keep;
    char *tolerate_abort;
    uint64_t lanes;
};

static const char *const transport_choices[] = {"tcp", "shm", "mixed", NULL};

static const struct wst_config_entry campaign_config[] = {
    {"trials", WST_CONFIG_UINT, "10", "number of trials",
     offsetof(struct settings, trials), NULL, NULL},
    {"seed", WST_CONFIG_UINT, "1",
     "campaign seed: every trial's seed comes "
     "from it",
     offsetof(struct settings, seed), NULL, NULL},
    {"transport", WST_CONFIG_ENUM, "mixed",
     "tcp (UCX_TLS=tcp), shm (UCX_TLS=sm,tcp) or mixed (per trial, from its "
     "seed)",
     offsetof(struct settings, transport), transport_choices, NULL},
    {"jobs", WST_CONFIG_UINT, "1", "trials run at once, each its own cluster",
     offsetof(struct settings, jobs), NULL, NULL},
    {"out", WST_CONFIG_STRING, "", "write a JSON summary here",
     offsetof(struct settings, out), NULL, NULL},
    {"replay", WST_CONFIG_STRING, "",
     "run only the trial of this seed (as printed, 0x...), with the same "
     "--transport",
     offsetof(struct settings, replay), NULL, NULL},
    {"lanes", WST_CONFIG_UINT, "0",
     "data lanes of every agent and sender (0: theirs, one per two CPUs)",
     offsetof(struct settings, lanes), NULL, NULL},
    {"timeout", WST_CONFIG_DOUBLE, "5",
     "agents' --timeout and senders' wait (s); a trial hangs when something "
     "has not answered 3x this (plus a stop's length) after the fault",
     offsetof(struct settings, timeout), NULL, NULL},
    {"keep", WST_CONFIG_BOOL, "no",
     "keep every trial's workdir (a failed trial's is always kept)",
     offsetof(struct settings, keep), NULL, NULL},
    {"tolerate-abort", WST_CONFIG_STRING, "",
     "a known UCX assertion site (e.g. tcp_iface.c:307): a trial whose only "
     "failure is a survivor that aborted on it, its group classified "
     "correctly, is reported but does not fail the run",
     offsetof(struct settings, tolerate_abort), NULL, NULL},
    WST_CONFIG_END,
};

static const char rule_help[] =
    "Each trial: a fresh cluster of 1-3 agents (one engine group, a stand-in\n"
    "engine each) and 1-3 senders, tcp or shm, model tiny-moe, tiny or\n"
    "dense:24 (3 agents: dense) of 2-4 layers; version 1 committed and\n"
    "checked; version 2 pushed with one fault: SIGKILL, or SIGSTOP for\n"
    "0.1-6 s then SIGCONT, of one sender, agent or engine, at the start of a\n"
    "layer of a sender's progress or a delay after the push (0 to 2x version\n"
    "1's refit time: before BEGIN, mid-refit, after the commit).\n"
    "\n"
    "Outcome of the group (member k: agent k, its engine, its live bytes;\n"
    "engine k SERVES v when it and its agent are alive and it says serving\n"
    "v):\n"
    "  committed-everywhere: every engine serves 2, every agent is usable at\n"
    "    2, every byte is of version 2;\n"
    "  refused-everywhere-old-version-intact: the same with version 1;\n"
    "  unusable-everywhere: some engine does not serve (dead, not serving,\n"
    "    or lost its agent), and nothing lies (below);\n"
    "  FAILURE: anything else, and always: an engine saying serving v whose\n"
    "    bytes are not all v; a live agent usable at v whose bytes are not\n"
    "    all v; a live engine serving while its agent is unusable or at\n"
    "    another version; engines serving different versions; a sender\n"
    "    reporting version 2 committed while a live agent is usable at\n"
    "    another; a process gone that was not killed on purpose (an engine\n"
    "    may exit 0 when its agent hangs up); a hang: something has not\n"
    "    answered or settled 3x --timeout (plus a stop) after the fault.\n"
    "Failures print their seed: replay one with --replay SEED.\n\n";

struct run {
    struct campaign_trial t;
    struct campaign_result r;
    uint32_t i;
    pid_t pid;
    int fd;
    uint64_t start_ns;
};

static struct settings set;

/* Starts trial 'run' in a child process (its own process group). */
static int run_start(struct run *run)
{
    int fds[2];

    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    fflush(stdout);
    fflush(stderr);
    run->pid = fork();
    if (run->pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (run->pid == 0) {
        close(fds[0]);
        setpgid(0, 0);
        campaign_run(&run->t, set.timeout, set.keep, &run->r);
        ssize_t n = write(fds[1], &run->r, sizeof(run->r));
        _exit(n == (ssize_t)sizeof(run->r) ? 0 : 1);
    }
    setpgid(run->pid, run->pid);
    close(fds[1]);
    run->fd = fds[0];
    run->start_ns = wst_now_ns();
    return 0;
}

/* Collects trial 'run''s result (blocking); a dead or stuck trial process
 * is a failure. */
static void run_finish(struct run *run)
{
    ssize_t n = read(run->fd, &run->r, sizeof(run->r));

    if (n != (ssize_t)sizeof(run->r)) {
        memset(&run->r, 0, sizeof(run->r));
        run->r.outcome = OUTCOME_FAILURE;
        snprintf(run->r.why, sizeof(run->r.why),
                 "the trial's own process died or hung (no result)");
        run->r.seconds = (wst_now_ns() - run->start_ns) / 1e9;
    }
    close(run->fd);
    waitpid(run->pid, NULL, 0);
    /* Whatever of the trial is left (nothing, when it went well). */
    kill(-run->pid, SIGKILL);
}

static const char *const targets[] = {"sender", "agent", "engine"};
static const char *const kinds[] = {"kill", "stop"};

static void line(const struct run *run, uint32_t n)
{
    char desc[256];

    campaign_describe(&run->t, desc, sizeof(desc));
    printf("[%4u/%u] seed 0x%016llx %s -> %s (%.1f s", run->i + 1, n,
           (unsigned long long)run->t.seed, desc,
           campaign_outcome_name((enum campaign_outcome)run->r.outcome),
           run->r.seconds);
    if (run->r.injected)
        printf(", fault at %.2f s", run->r.fault_at);
    else if (run->r.outcome != OUTCOME_FAILURE)
        printf(", fault never injected");
    printf(")%s%s\n", run->r.why[0] ? " " : "", run->r.why);
    if (run->r.abort[0])
        printf("         UCX abort: %s\n", run->r.abort);
    if (run->r.outcome == OUTCOME_FAILURE)
        printf("         replay: wstream-campaign --replay 0x%016llx "
               "--transport %s; logs: %s\n",
               (unsigned long long)run->t.seed,
               transport_choices[set.transport],
               run->r.workdir[0] ? run->r.workdir : "(none)");
    fflush(stdout);
}

/* A failure --tolerate-abort lets pass: a survivor's abort on the named
 * UCX assertion, the group itself committed, refused or unusable. */
static int tolerated(const struct run *run)
{
    return run->r.outcome == OUTCOME_FAILURE &&
           run->r.group != OUTCOME_FAILURE && set.tolerate_abort[0] != '\0' &&
           strstr(run->r.abort, set.tolerate_abort) != NULL &&
           strstr(run->r.why, "died of signal 6") != NULL;
}

static void summary(const struct run *runs, uint32_t n, double seconds)
{
    unsigned counts[OUTCOME_COUNT] = {0}, by[3][2][OUTCOME_COUNT];
    unsigned groups[OUTCOME_COUNT] = {0};
    unsigned not_injected = 0, aborts = 0, hangs = 0, failed = 0;

    memset(by, 0, sizeof(by));
    for (uint32_t i = 0; i < n; i++) {
        const struct run *r = &runs[i];
        counts[r->r.outcome]++;
        by[r->t.target][r->t.kind][r->r.outcome]++;
        groups[r->r.group]++;
        not_injected += !r->r.injected && r->r.outcome != OUTCOME_FAILURE;
        aborts += r->r.abort[0] != '\0';
        hangs += strncmp(r->r.why, "hang:", 5) == 0;
        failed += r->r.outcome == OUTCOME_FAILURE && !tolerated(r);
    }
    printf("\nwstream-campaign: %u trials in %.0f s (seed %llu, transport "
           "%s)\n",
           n, seconds, (unsigned long long)set.seed,
           transport_choices[set.transport]);
    printf("%-14s %10s %10s %10s %10s\n", "fault", "committed", "refused",
           "unusable", "FAILURE");
    for (int g = 0; g < 3; g++)
        for (int k = 0; k < 2; k++) {
            char name[32];
            snprintf(name, sizeof(name), "%s/%s", targets[g], kinds[k]);
            printf("%-14s %10u %10u %10u %10u\n", name,
                   by[g][k][OUTCOME_COMMITTED], by[g][k][OUTCOME_REFUSED],
                   by[g][k][OUTCOME_UNUSABLE], by[g][k][OUTCOME_FAILURE]);
        }
    printf("%-14s %10u %10u %10u %10u\n", "all", counts[OUTCOME_COMMITTED],
           counts[OUTCOME_REFUSED], counts[OUTCOME_UNUSABLE],
           counts[OUTCOME_FAILURE]);
    printf("%-14s %10u %10u %10u %10u   (the group alone: what it "
           "serves, a dead survivor aside)\n",
           "group", groups[OUTCOME_COMMITTED], groups[OUTCOME_REFUSED],
           groups[OUTCOME_UNUSABLE], groups[OUTCOME_FAILURE]);
    printf("hangs: %u; trials with a UCX assertion abort in their log: %u\n",
           hangs, aborts);
    if (not_injected)
        printf("(%u trials ended before their layer trigger fired)\n",
               not_injected);
    for (uint32_t i = 0; i < n; i++)
        if (runs[i].r.outcome == OUTCOME_FAILURE)
            printf("FAILURE%s seed 0x%016llx: %s%s%s (replay: --replay "
                   "0x%016llx --transport %s)\n",
                   tolerated(&runs[i]) ? " (tolerated: --tolerate-abort)" : "",
                   (unsigned long long)runs[i].t.seed, runs[i].r.why,
                   runs[i].r.abort[0] ? "; UCX abort: " : "", runs[i].r.abort,
                   (unsigned long long)runs[i].t.seed,
                   transport_choices[set.transport]);
    printf("wstream-campaign: %s\n", failed ? "FAILED" : "PASS");
    fflush(stdout);
}

/* {"<outcome>": count, ...} of the trials' outcomes, or with 'group' of
 * their groups' alone. */
static struct json_object *json_counts(const struct run *runs, uint32_t n,
                                       int group)
{
    struct json_object *o = json_object_new_object();

    for (int c = 0; c < OUTCOME_COUNT; c++) {
        unsigned k = 0;
        for (uint32_t i = 0; i < n; i++)
            k += (group ? runs[i].r.group : runs[i].r.outcome) == c;
        json_object_object_add(o,
                               campaign_outcome_name((enum campaign_outcome)c),
                               json_object_new_uint64(k));
    }
    return o;
}

static int write_json(const struct run *runs, uint32_t n, double seconds)
{
    struct json_object *o = json_object_new_object();
    struct json_object *list = json_object_new_array();
    char hex[32], desc[256];

    json_object_object_add(o, "seed", json_object_new_uint64(set.seed));
    json_object_object_add(
        o, "transport",
        json_object_new_string(transport_choices[set.transport]));
    json_object_object_add(o, "timeout_s", json_object_new_double(set.timeout));
    json_object_object_add(o, "trials", json_object_new_uint64(n));
    json_object_object_add(o, "seconds", json_object_new_double(seconds));
    json_object_object_add(o, "counts", json_counts(runs, n, 0));
    json_object_object_add(o, "group_counts", json_counts(runs, n, 1));
    for (uint32_t i = 0; i < n; i++) {
        const struct run *r = &runs[i];
        struct json_object *t = json_object_new_object();
        snprintf(hex, sizeof(hex), "0x%016llx", (unsigned long long)r->t.seed);
        campaign_describe(&r->t, desc, sizeof(desc));
        json_object_object_add(t, "seed", json_object_new_string(hex));
        json_object_object_add(t, "trial", json_object_new_string(desc));
        json_object_object_add(t, "target",
                               json_object_new_string(targets[r->t.target]));
        json_object_object_add(t, "kind",
                               json_object_new_string(kinds[r->t.kind]));
        json_object_object_add(t, "outcome",
                               json_object_new_string(campaign_outcome_name(
                                   (enum campaign_outcome)r->r.outcome)));
        json_object_object_add(t, "why", json_object_new_string(r->r.why));
        json_object_object_add(t, "tolerated",
                               json_object_new_boolean(tolerated(r)));
        json_object_object_add(t, "group",
                               json_object_new_string(campaign_outcome_name(
                                   (enum campaign_outcome)r->r.group)));
        if (r->r.abort[0])
            json_object_object_add(t, "ucx_abort",
                                   json_object_new_string(r->r.abort));
        json_object_object_add(t, "injected",
                               json_object_new_boolean(r->r.injected));
        json_object_object_add(t, "fault_at_s",
                               json_object_new_double(r->r.fault_at));
        json_object_object_add(t, "v1_s", json_object_new_double(r->r.v1_s));
        json_object_object_add(t, "seconds",
                               json_object_new_double(r->r.seconds));
        if (r->r.workdir[0])
            json_object_object_add(t, "workdir",
                                   json_object_new_string(r->r.workdir));
        json_object_array_add(list, t);
    }
    json_object_object_add(o, "results", list);
    int rc = json_object_to_file_ext(set.out, o, JSON_C_TO_STRING_PRETTY);
    json_object_put(o);
    if (rc != 0)
        fprintf(stderr, "wstream-campaign: cannot write %s: %s\n", set.out,
                strerror(errno));
    return rc == 0 ? 0 : -1;
}

/* Runs every trial, at most set.jobs at once. */
static void campaign(struct run *runs, uint32_t n)
{
    uint32_t jobs = set.jobs ? (uint32_t)set.jobs : 1;
    uint32_t next = 0, done = 0, running = 0;
    struct run **live = calloc(jobs, sizeof(*live));

    while (done < n) {
        while (running < jobs && next < n) {
            struct run *r = &runs[next++];
            if (run_start(r) != 0) {
                r->pid = -1;
                r->r.outcome = OUTCOME_FAILURE;
                snprintf(r->r.why, sizeof(r->r.why), "fork: %s",
                         strerror(errno));
                line(r, n);
                done++;
                continue;
            }
            for (uint32_t j = 0; j < jobs; j++)
                if (live[j] == NULL) {
                    live[j] = r;
                    break;
                }
            running++;
        }
        struct pollfd pfd[64];
        uint32_t idx[64], m = 0;
        for (uint32_t j = 0; j < jobs && m < 64; j++)
            if (live[j] != NULL) {
                pfd[m] = (struct pollfd){.fd = live[j]->fd, .events = POLLIN};
                idx[m++] = j;
            }
        if (m == 0)
            continue;
        poll(pfd, m, 1000);
        for (uint32_t q = 0; q < m; q++) {
            struct run *r = live[idx[q]];
            /* A trial process stuck past any deadline of its own. */
            double age = (wst_now_ns() - r->start_ns) / 1e9;
            int stuck = age > 6.0 + 6 * set.timeout + 240;
            if (!(pfd[q].revents & (POLLIN | POLLHUP | POLLERR)) && !stuck)
                continue;
            if (stuck)
                kill(-r->pid, SIGKILL);
            run_finish(r);
            line(r, n);
            live[idx[q]] = NULL;
            running--;
            done++;
        }
    }
    free(live);
}

int main(int argc, char **argv)
{
    int rc;

    memset(&set, 0, sizeof(set));
    if (wst_config_has_flag(argc, argv, "--help"))
        fputs(rule_help, stdout);
    wst_config_cli(campaign_config, &set, argc, argv, "wstream-campaign",
                   "wstream-campaign --trials N --seed S "
                   "[--transport tcp|shm|mixed] [--jobs J] [--out FILE] "
                   "[--replay SEED]\n\n"
                   "exit codes: 0 no trial failed (but for "
                   "--tolerate-abort's); 1 one did; 2 bad usage",
                   &rc);
    if (rc >= 0)
        goto out;
    rc = 2;
    uint64_t replay = 0;
    if (set.replay[0] != '\0') {
        char *end = NULL;
        errno = 0;
        replay = strtoull(set.replay, &end, 0);
        if (errno != 0 || end == set.replay || *end != '\0') {
            fprintf(stderr,
                    "wstream-campaign: --replay: \"%s\" is not a seed "
                    "(a number, 0x... as printed)\n",
                    set.replay);
            goto out;
        }
        set.trials = 1;
    }
    if (set.trials == 0 || set.trials > 1000000 || set.jobs == 0 ||
        set.jobs > 64 || set.timeout <= 0) {
        fprintf(stderr, "wstream-campaign: --trials must be 1..1000000, "
                        "--jobs 1..64 and --timeout > 0\n");
        goto out;
    }
    uint32_t n = (uint32_t)set.trials;
    struct run *runs = calloc(n, sizeof(*runs));
    if (runs == NULL)
        goto out;
    for (uint32_t i = 0; i < n; i++) {
        runs[i].i = i;
        campaign_pick(set.replay[0] ? replay : campaign_trial_seed(set.seed, i),
                      set.transport, &runs[i].t);
        runs[i].t.lanes = (uint32_t)set.lanes;
    }
    signal(SIGPIPE, SIG_IGN);
    uint64_t t0 = wst_now_ns();
    campaign(runs, n);
    double seconds = (wst_now_ns() - t0) / 1e9;
    summary(runs, n, seconds);
    rc = 0;
    for (uint32_t i = 0; i < n; i++)
        if (runs[i].r.outcome == OUTCOME_FAILURE && !tolerated(&runs[i]))
            rc = 1;
    if (set.out[0] != '\0' && write_json(runs, n, seconds) != 0)
        rc = rc ? rc : 1;
    free(runs);
out:
    wst_config_release(campaign_config, &set);
    return rc;
}
