/* refit_actions.c - the refit state machine's actions: the list its
 * steps append to, and one line describing each (see refit_actions.h). */
#include "refit_actions.h"

#include <stdio.h>
#include <stdlib.h>

void wst_rm_actions_add(struct wst_rm_actions *l, struct wst_rm_action a)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        struct wst_rm_action *v = realloc(l->v, cap * sizeof(*v));
        if (v == NULL) {
            l->lost++;
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = a;
}

void wst_rm_actions_clear(struct wst_rm_actions *l)
{
    l->n = 0;
    l->lost = 0;
}

void wst_rm_actions_free(struct wst_rm_actions *l)
{
    free(l->v);
    *l = (struct wst_rm_actions){0};
}

static const char *bound_text(uint32_t bound, char *buf, size_t len)
{
    if (bound == UINT32_MAX)
        return "all";
    snprintf(buf, len, "L%u", bound);
    return buf;
}

/* START and COMMITTED: " label L" after the version when there is one. */
static const char *label_of(const struct wst_rm_action *a)
{
    return a->text != NULL ? a->text : "";
}

static const char *label_sep(const struct wst_rm_action *a)
{
    return label_of(a)[0] != '\0' ? " label " : "";
}

void wst_rm_action_describe(const struct wst_rm_action *a, char *buf,
                            size_t len)
{
    unsigned long long v = (unsigned long long)a->version;
    unsigned long long g = (unsigned long long)a->generation;
    const char *st = wst_status_name(a->status);
    char b[16];

    st = st != NULL ? st : "?";
    switch (a->kind) {
    case WST_RM_ACT_START:
        snprintf(buf, len, "start v%llu%s%s", v, label_sep(a), label_of(a));
        break;
    case WST_RM_ACT_BEGIN_HOOK:
        snprintf(buf, len, "begin hook v%llu g%llu", v, g);
        break;
    case WST_RM_ACT_OPEN_RX:
        snprintf(buf, len, "open rx r%u v%llu mover %u", a->rank, v, a->mover);
        break;
    case WST_RM_ACT_SEND_ERROR:
        snprintf(buf, len, "error r%u %s: %s", a->rank, st, a->text);
        break;
    case WST_RM_ACT_READY:
        snprintf(buf, len, "ready v%llu", v);
        break;
    case WST_RM_ACT_SEND_READY:
        snprintf(buf, len, "send ready r%u v%llu", a->rank, v);
        break;
    case WST_RM_ACT_RECEIVING:
        snprintf(buf, len, "receiving v%llu", v);
        break;
    case WST_RM_ACT_GRANT:
        snprintf(buf, len, "grant L%u", a->layer);
        break;
    case WST_RM_ACT_ACK:
        snprintf(buf, len, "ack r%u v%llu", a->rank, v);
        break;
    case WST_RM_ACT_SEND_CREDIT:
        snprintf(buf, len, "credit r%u L%u", a->rank, a->layer);
        break;
    case WST_RM_ACT_RX_BEGIN:
        snprintf(buf, len, "rx begin r%u v%llu below %s", a->rank, v,
                 bound_text(a->bound, b, sizeof(b)));
        break;
    case WST_RM_ACT_RX_ALLOW:
        snprintf(buf, len, "rx allow r%u below %s", a->rank,
                 bound_text(a->bound, b, sizeof(b)));
        break;
    case WST_RM_ACT_VERIFY:
        snprintf(buf, len, "verify r%u L%u %016llx g%llu", a->rank, a->layer,
                 (unsigned long long)a->digest, g);
        break;
    case WST_RM_ACT_RECEIVED:
        snprintf(buf, len, "received L%u at %.3f", a->layer, a->at);
        break;
    case WST_RM_ACT_REPACK:
        snprintf(buf, len, "repack L%u g%llu", a->layer, g);
        break;
    case WST_RM_ACT_REPACKED:
        snprintf(buf, len, "repacked L%u at %.3f in %.3f", a->layer, a->at,
                 a->seconds);
        break;
    case WST_RM_ACT_FINALIZE:
        snprintf(buf, len, "finalize L%u g%llu", a->layer, g);
        break;
    case WST_RM_ACT_FINAL:
        snprintf(buf, len, "final L%u at %.3f in %.3f", a->layer, a->at,
                 a->seconds);
        break;
    case WST_RM_ACT_PREPARED:
        snprintf(buf, len, "prepared v%llu", v);
        break;
    case WST_RM_ACT_SEND_PREPARED:
        snprintf(buf, len, "send prepared r%u v%llu", a->rank, v);
        break;
    case WST_RM_ACT_COMMITTED:
        snprintf(buf, len,
                 "committed v%llu%s%s: %llu bytes (put %llu, am %llu, nccl "
                 "%llu) in %.3f",
                 v, label_sep(a), label_of(a), (unsigned long long)a->bytes,
                 (unsigned long long)a->bytes_by_mover[1],
                 (unsigned long long)a->bytes_by_mover[2],
                 (unsigned long long)a->bytes_by_mover[3], a->seconds);
        break;
    case WST_RM_ACT_COMMIT_HOOK:
        snprintf(buf, len, "commit hook v%llu g%llu", v, g);
        break;
    case WST_RM_ACT_SEND_COMMIT:
        snprintf(buf, len, "commit r%u v%llu", a->rank, v);
        break;
    case WST_RM_ACT_ABORT_RX:
        snprintf(buf, len, "abort rx r%u", a->rank);
        break;
    case WST_RM_ACT_REFUSED:
        snprintf(buf, len, "refused v%llu: %s (state: %s)", v, a->text,
                 a->reason);
        break;
    case WST_RM_ACT_UNUSABLE:
        snprintf(buf, len, "unusable v%llu: %s", v, a->text);
        break;
    case WST_RM_ACT_LATE_FAILURE:
        snprintf(buf, len, "late failure v%llu: %s", v, a->text);
        break;
    case WST_RM_ACT_TELL_UNUSABLE:
        snprintf(buf, len, "tell unusable %s: %s", st, a->text);
        break;
    case WST_RM_ACT_RESUME:
        snprintf(buf, len, "resume v%llu", v);
        break;
    case WST_RM_ACT_END:
        snprintf(buf, len, "end v%llu", v);
        break;
    case WST_RM_ACT_REASON:
        snprintf(buf, len, "reason: %s", a->text);
        break;
    }
}
