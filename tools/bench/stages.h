/* stages.h - where a refit's time goes, as far as the libraries say.
 *
 * The sender side comes from the sender process's result line (push()
 * returned; push to wait() returned), the agent side from its status file
 * (begin acknowledged to commit; each layer's "received", which is every
 * byte of the layer in and its digest checked, counted from the begin
 * acknowledgement). From those, per refit:
 *
 *   sender push ............................................ wait returns
 *   |-- outside --|-- agent: begin ack ........ commit --|-- outside --|
 *                 |-- first layer in --|...|-- last in --|-- tail --|
 *
 * The libraries do not time the sender's hashing, posting or the wire, nor
 * the receiver's digest check on its own (NOTES.md): those are not here.
 */
#ifndef WST_BENCH_STAGES_H
#define WST_BENCH_STAGES_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "cluster.h"

enum wst_bench_stage {
    WST_STAGE_PUSH_RETURN, /* sender: push() returned */
    WST_STAGE_OUTSIDE,     /* sender's refit minus the agent's window */
    WST_STAGE_FIRST_LAYER, /* agent: begin ack to the first layer in */
    WST_STAGE_LAST_LAYER,  /* agent: begin ack to the last layer in */
    WST_STAGE_TAIL,        /* agent: the last layer in to commit */
    WST_STAGE_AGENT,       /* agent: begin ack to commit */
    WST_STAGE_REFIT,       /* sender: push to wait() returned */
    WST_STAGE_COUNT
};

struct wst_bench_stages {
    size_t repeats;
    double *s;       /* [WST_STAGE_COUNT][repeats] seconds */
    int have_agent;  /* every refit's agent status was read */
    uint32_t layers; /* layers in the agent's timeline */
};

/* Prepares empty stages for 'repeats' refits. */
wst_status_t wst_bench_stages_init(struct wst_bench_stages *st, size_t repeats);

/* Records refit 'repeat' (0-based) of 'version': the sender's result and
 * agent 0's status, read once it shows 'version' committed (the agent
 * writes it just after it acknowledges the commit; waited for up to
 * 2 s). WST_ERR_TIMED_OUT when the status never showed it; the sender's
 * side is kept either way. */
wst_status_t wst_bench_stages_add(struct wst_bench_stages *st, size_t repeat,
                                  struct wst_cluster *c, uint64_t version,
                                  const struct wst_sender_result *res);

/* Median seconds of one stage over the refits. */
double wst_bench_stages_median(const struct wst_bench_stages *st,
                               enum wst_bench_stage stage);

/* Prints the stages as a Markdown table: median ms, share of the refit. */
void wst_bench_stages_print(const struct wst_bench_stages *st);

/* Frees the arrays. */
void wst_bench_stages_release(struct wst_bench_stages *st);

#endif
