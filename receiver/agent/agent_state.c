/* agent_state.c - wstream-agent's persisted state: the file's path, the
 * load at start, and the writes from the engine hooks (agent_state.h). */
#include "agent_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "state_store.h"

/* Writes next as the persisted state; logs and returns a failure. */
static wst_status_t save(struct agent *a, const struct wst_agent_state *next,
                         char *err, size_t errlen)
{
    wst_status_t st;

    if (a->state_path == NULL) {
        a->persisted = *next;
        return WST_OK;
    }
    st = wst_state_store_save(a->state_path, next, err, errlen);
    if (st != WST_OK) {
        WST_ERROR(&a->log, "cannot write state file: %s", err);
        return st;
    }
    a->persisted = *next;
    return WST_OK;
}

static void log_loaded(struct agent *a)
{
    const struct wst_agent_state *s = &a->persisted;

    if (s->usable)
        WST_INFO(&a->log, "state file %s: committed version %llu%s%s, usable",
                 a->state_path, (unsigned long long)s->committed_version,
                 s->committed_label[0] != '\0' ? " label " : "",
                 s->committed_label);
    else
        WST_WARN(&a->log,
                 "state file %s: committed version %llu, unusable until a "
                 "refit completes: %s",
                 a->state_path, (unsigned long long)s->committed_version,
                 s->reason);
}

wst_status_t wst_agent_state_open(struct agent *a)
{
    const char *status = a->set.status_file;
    char err[768];
    int found = 0;
    wst_status_t st;

    a->persisted = (struct wst_agent_state){.usable = 1};
    if (a->set.state_file[0] != '\0') {
        a->state_path = strdup(a->set.state_file);
    } else if (status[0] != '\0') {
        size_t n = strlen(status) + sizeof(".state");
        if ((a->state_path = malloc(n)) != NULL)
            snprintf(a->state_path, n, "%s.state", status);
    } else {
        WST_WARN(&a->log,
                 "no --state-file and no --status-file: nothing persisted; "
                 "a restarted agent takes any version and forgets that it "
                 "was unusable");
        return WST_OK;
    }
    if (a->state_path == NULL)
        return WST_ERR_NO_MEMORY;
    st = wst_state_store_load(a->state_path, &a->persisted, &found, err,
                              sizeof(err));
    if (st != WST_OK) {
        WST_ERROR(&a->log, "%s", err);
        return st;
    }
    if (found)
        log_loaded(a);
    else
        WST_INFO(&a->log, "state file %s: none yet, a fresh agent",
                 a->state_path);
    return save(a, &a->persisted, err, sizeof(err));
}

void wst_agent_state_seed(const struct agent *a, struct wst_receiver_params *rp)
{
    rp->field_mask |=
        WST_RECEIVER_PARAM_INITIAL_STATE | WST_RECEIVER_PARAM_INITIAL_LABEL;
    rp->initial_committed_version = a->persisted.committed_version;
    rp->initial_committed_label = a->persisted.committed_label;
    rp->initial_unusable_reason =
        a->persisted.usable ? NULL : a->persisted.reason;
}

wst_status_t wst_agent_state_begin(struct agent *a, uint64_t version,
                                   struct wst_agent_state *prev, char *reason,
                                   size_t reason_len)
{
    struct wst_agent_state next = {
        .committed_version = a->persisted.committed_version,
        .usable = 0,
        .open_version = version,
    };
    char err[768];

    *prev = a->persisted;
    memcpy(next.committed_label, a->persisted.committed_label,
           sizeof(next.committed_label));
    snprintf(next.reason, sizeof(next.reason),
             "refit of version %llu was open when the agent stopped",
             (unsigned long long)version);
    if (save(a, &next, err, sizeof(err)) == WST_OK)
        return WST_OK;
    snprintf(reason, reason_len, "the agent cannot persist its state: %s", err);
    return WST_ERR_IO;
}

void wst_agent_state_restore(struct agent *a,
                             const struct wst_agent_state *prev)
{
    char err[768];

    save(a, prev, err, sizeof(err));
}

void wst_agent_state_committed(struct agent *a, uint64_t version,
                               const char *label)
{
    struct wst_agent_state next = {.committed_version = version, .usable = 1};
    char err[768];

    snprintf(next.committed_label, sizeof(next.committed_label), "%s", label);
    save(a, &next, err, sizeof(err));
}

void wst_agent_state_unusable(struct agent *a, wst_status_t status,
                              const char *reason)
{
    struct wst_agent_state next = {
        .committed_version = a->persisted.committed_version,
        .usable = 0,
    };
    char err[768];

    memcpy(next.committed_label, a->persisted.committed_label,
           sizeof(next.committed_label));
    snprintf(next.reason, sizeof(next.reason), "%s",
             reason != NULL && reason[0] != '\0' ? reason
                                                 : wst_status_string(status));
    save(a, &next, err, sizeof(err));
}

void wst_agent_state_release(struct agent *a)
{
    free(a->state_path);
    a->state_path = NULL;
}
