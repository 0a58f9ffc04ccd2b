/* unwanted.c - the shards no receiver's plan names, said once per push.
 *
 * A tensor that no receiver wants is never sent, which is right when the
 * trainer registers more than the engines serve, and silent when a name or
 * a layout is wrong. One info line per pushed version, over every link's
 * plan (not one per receiver), names the first few and counts them all.
 * The scan runs only when a plan came since the last push: the plans, and
 * so the answer, stay the same from one refit to the next.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sender_internal.h"

struct unwanted_call {
    struct wst_sender *s;
    uint64_t version;
};

/* Which shards no link's plan names, into s->n_unwanted and
 * s->unwanted_names; only when a plan came since the last time. */
static void count_unwanted(struct wst_sender *s)
{
    const char *named[WST_SEND_UNWANTED_NAMED];
    size_t n_named = 0, len = 0;
    int more = 0;
    uint8_t *wanted;

    if (s->unwanted_plans == s->plans_taken && s->plans_taken != 0)
        return;
    s->n_unwanted = 0;
    s->unwanted_names[0] = '\0';
    wanted = calloc(s->n_shards, 1);
    if (wanted == NULL)
        return; /* only a log line is lost; tried again next push */
    for (size_t i = 0; i < s->n_links; i++) {
        const struct link *l = &s->links[i];
        if (!l->have_plan)
            continue;
        /* on_plan checked every item's have index against n_shards. */
        for (size_t k = 0; k < l->plan.n_items; k++)
            if (l->plan.items[k].have < s->n_shards)
                wanted[l->plan.items[k].have] = 1;
    }
    for (size_t i = 0; i < s->n_shards; i++) {
        const char *name = s->shards[i].have.tensor.name;
        size_t j = 0;
        if (wanted[i])
            continue;
        s->n_unwanted++;
        /* The slices of one tensor share its name: named once. */
        while (j < n_named && strcmp(named[j], name) != 0)
            j++;
        if (j < n_named)
            continue;
        if (n_named == WST_SEND_UNWANTED_NAMED) {
            more = 1;
            continue;
        }
        named[n_named++] = name;
        len += (size_t)snprintf(s->unwanted_names + len,
                                sizeof(s->unwanted_names) - len, "%s%s",
                                len > 0 ? ", " : "", name);
    }
    if (more)
        snprintf(s->unwanted_names + len, sizeof(s->unwanted_names) - len,
                 ", ...");
    free(wanted);
    s->unwanted_plans = s->plans_taken;
}

/* Progress thread: the links' plans are its own. */
static void log_unwanted(void *arg)
{
    struct unwanted_call *c = arg;
    struct wst_sender *s = c->s;

    if (s->n_shards == 0)
        return;
    count_unwanted(s);
    if (s->n_unwanted == 0)
        return;
    WST_INFO(&s->log,
             "version %llu: %zu of %zu registered tensors (or slices) are "
             "wanted by no receiver and not sent: %s",
             (unsigned long long)c->version, s->n_unwanted, s->n_shards,
             s->unwanted_names);
}

void wst_send_log_unwanted(struct wst_sender *s, uint64_t version)
{
    struct unwanted_call c = {.s = s, .version = version};

    /* Only a log line: a worker that cannot run it loses nothing else. */
    (void)wst_worker_call(s->worker, log_unwanted, &c);
}
