/* stages.c - a refit's time by stage, from what the libraries report
 * (see stages.h). */
#include "stages.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "median.h"

#define STATUS_WAIT_S 2.0

static const struct {
    const char *name;
    const char *source;
} stage_info[WST_STAGE_COUNT] = {
    [WST_STAGE_PUSH_RETURN] = {"push() returned", "sender: caller's thread"},
    [WST_STAGE_OUTSIDE] = {"begin handshake + commit ack",
                           "sender refit - agent window"},
    [WST_STAGE_FIRST_LAYER] = {"first layer in and verified",
                               "agent: from begin ack"},
    [WST_STAGE_LAST_LAYER] = {"last layer in and verified",
                              "agent: from begin ack"},
    [WST_STAGE_TAIL] = {"commit tail (last layer in to commit)", "agent"},
    [WST_STAGE_AGENT] = {"agent window (begin ack to commit)", "agent"},
    [WST_STAGE_REFIT] = {"refit (push to wait returned)", "sender"},
};

wst_status_t wst_bench_stages_init(struct wst_bench_stages *st, size_t repeats)
{
    memset(st, 0, sizeof(*st));
    st->repeats = repeats;
    st->have_agent = 1;
    st->s = calloc(WST_STAGE_COUNT * repeats, sizeof(*st->s));
    return st->s != NULL ? WST_OK : WST_ERR_NO_MEMORY;
}

static void put(struct wst_bench_stages *st, enum wst_bench_stage stage,
                size_t repeat, double s)
{
    st->s[stage * st->repeats + repeat] = s;
}

/* The agent's window and its first and last layer in, from agent 0's
 * status file, if it is about 'version'; -1 otherwise (or not yet). */
static int agent_times(struct wst_cluster *c, uint64_t version, double *agent_s,
                       double *first_s, double *last_s, uint32_t *layers_p)
{
    struct wst_agent_status as;
    struct wst_layer_times *t;
    int n, got;

    if (wst_cluster_agent_status(c, 0, &as) != 0 ||
        as.committed_version != version)
        return -1;
    n = wst_cluster_agent_timeline(c, 0, NULL, 0); /* how many layers */
    if (n < 0 || (t = calloc((size_t)n + 1, sizeof(*t))) == NULL)
        return -1;
    got = wst_cluster_agent_timeline(c, 0, t, (uint32_t)n);
    if (got > n)
        got = n;
    *agent_s = as.last_refit_seconds;
    *first_s = *last_s = 0;
    for (int i = 0; i < got; i++) {
        double in = t[i].received;
        if (in > 0 && (*first_s == 0 || in < *first_s))
            *first_s = in;
        if (in > *last_s)
            *last_s = in;
    }
    free(t);
    *layers_p = (uint32_t)(got > 0 ? got : 0);
    return got < 0 ? -1 : 0;
}

wst_status_t wst_bench_stages_add(struct wst_bench_stages *st, size_t repeat,
                                  struct wst_cluster *c, uint64_t version,
                                  const struct wst_sender_result *res)
{
    uint64_t deadline = wst_deadline_ns(STATUS_WAIT_S);
    double agent = 0, first = 0, last = 0;
    int found = 0;

    put(st, WST_STAGE_PUSH_RETURN, repeat, res->push_seconds);
    put(st, WST_STAGE_REFIT, repeat, res->seconds);
    /* The agent writes its status file just after it acknowledged the
     * commit, so the sender may see the commit first: poll briefly. */
    while (!found) {
        found =
            agent_times(c, version, &agent, &first, &last, &st->layers) == 0;
        if (!found && wst_now_ns() >= deadline) {
            st->have_agent = 0;
            return WST_ERR_TIMED_OUT;
        }
        if (!found)
            usleep(1000);
    }
    put(st, WST_STAGE_AGENT, repeat, agent);
    put(st, WST_STAGE_FIRST_LAYER, repeat, first);
    put(st, WST_STAGE_LAST_LAYER, repeat, last);
    put(st, WST_STAGE_TAIL, repeat, agent - last);
    put(st, WST_STAGE_OUTSIDE, repeat, res->seconds - agent);
    return WST_OK;
}

double wst_bench_stages_median(const struct wst_bench_stages *st,
                               enum wst_bench_stage stage)
{
    return wst_bench_median(&st->s[stage * st->repeats], st->repeats);
}

void wst_bench_stages_print(const struct wst_bench_stages *st)
{
    double refit = wst_bench_stages_median(st, WST_STAGE_REFIT);

    printf("| stage | source | median ms | share of refit |\n");
    printf("|---|---|---|---|\n");
    for (int k = 0; k < WST_STAGE_COUNT; k++) {
        double m = wst_bench_stages_median(st, (enum wst_bench_stage)k);
        int agent_side = k != WST_STAGE_PUSH_RETURN && k != WST_STAGE_REFIT;
        if (agent_side && !st->have_agent) {
            printf("| %s | %s | n/a | n/a |\n", stage_info[k].name,
                   stage_info[k].source);
            continue;
        }
        printf("| %s | %s | %.2f | %.1f%% |\n", stage_info[k].name,
               stage_info[k].source, m * 1e3,
               refit > 0 ? 100.0 * m / refit : 0.0);
    }
    printf("| sender hashing, posting, wire; receiver digest check alone "
           "| not timed by the libraries | - | - |\n");
}

void wst_bench_stages_release(struct wst_bench_stages *st)
{
    free(st->s);
    st->s = NULL;
}
