/* group.c - a refit's two barriers over the receivers of one engine group
 * (DESIGN.md section 5), as this sender sees them.
 *
 * The receivers of one tensor/expert-parallel engine name one group in
 * their WANT_SUMMARY. A version is committed by all of them or by none:
 *   - each says READY once its engine paused (nothing written yet); when
 *     every receiver of the group did, this sender says GO to each, and
 *     only then do they take its bytes;
 *   - each says PREPARED once every layer is in, verified and finalized;
 *     when every receiver of the group did, this sender says COMMIT to
 *     each, and they commit and tell their engines;
 *   - when a receiver of the group fails before COMMIT went out, this
 *     sender tells every other one of the group with an ERROR, so they end
 *     the refit the same way: refused if nothing was written yet (no GO),
 *     else unusable.
 * Every sender runs the same barriers on what it sees; a receiver takes the
 * first GO or COMMIT that reaches it (any sender that says so has seen the
 * whole group agree).
 */
#include <string.h>

#include "errbuf.h"
#include "sender_internal.h"

/* ---- membership, checked when push begins ---- */

static int same_group(const struct link *a, const struct link *b)
{
    return a->group[0] != '\0' && strcmp(a->group, b->group) == 0;
}

wst_status_t wst_send_groups_check(struct wst_sender *s, char *err,
                                   size_t errlen)
{
    for (size_t i = 0; i < s->n_links; i++) {
        struct link *l = &s->links[i];

        l->group_first = i;
        for (size_t j = 0; j < i; j++)
            if (same_group(&s->links[j], l)) {
                l->group_first = s->links[j].group_first;
                break;
            }
        if (l->group_first != i)
            continue;
        if (l->group[0] == '\0') {
            if (l->group_size != 1) {
                wst_errf(err, errlen,
                         "receiver %s is in an unnamed group of %u", l->name,
                         l->group_size);
                return WST_ERR_CONFIG;
            }
            continue;
        }
        /* The whole group, each member once, all agreeing on its size: a
         * sender that reaches part of an engine could commit part of it. */
        size_t n = 0;
        for (size_t j = i; j < s->n_links; j++) {
            const struct link *m = &s->links[j];
            if (!same_group(m, l))
                continue;
            n++;
            if (m->group_size != l->group_size) {
                wst_errf(err, errlen,
                         "engine group '%s': receiver %s says %u members, "
                         "receiver %s says %u",
                         l->group, l->name, l->group_size, m->name,
                         m->group_size);
                return WST_ERR_CONFIG;
            }
            for (size_t k = i; k < j; k++)
                if (same_group(&s->links[k], l) &&
                    s->links[k].group_member == m->group_member) {
                    wst_errf(err, errlen,
                             "engine group '%s': receivers %s and %s are "
                             "both member %u",
                             l->group, s->links[k].name, m->name,
                             m->group_member);
                    return WST_ERR_CONFIG;
                }
        }
        if (n != l->group_size) {
            wst_errf(err, errlen,
                     "engine group '%s' has %u members; this sender reaches "
                     "%zu of them",
                     l->group, l->group_size, n);
            return WST_ERR_CONFIG;
        }
    }
    return WST_OK;
}

/* ---- the barriers, on the progress thread ---- */

static int in_group(const struct link *l, const struct link *m)
{
    return m->group_first == l->group_first;
}

/* Between BEGIN and the receiver's COMMIT of this push's version. */
static int in_refit(const struct link *m)
{
    return m->version == m->s->version &&
           (m->state == LINK_BEGIN_SENT || m->state == LINK_STREAMING);
}

static void abort_group(struct link *failed)
{
    struct wst_sender *s = failed->s;
    char why[WST_ERROR_MSG_MAX];

    wst_errf(why, sizeof(why),
             "engine group '%s': receiver %s (member %u) failed: %s",
             failed->group, failed->name, failed->group_member,
             failed->error_msg);
    for (size_t i = 0; i < s->n_links; i++) {
        struct link *m = &s->links[i];
        if (m == failed || !in_group(failed, m) || !in_refit(m))
            continue;
        wst_link_abort(m, WST_ERR_PEER_FAILED, why);
    }
}

void wst_send_group_update(struct link *l)
{
    struct wst_sender *s = l->s;
    struct link *failed = NULL;
    int all_ready = 1, all_prepared = 1, committing = 0;

    if (l->version != s->version)
        return;
    for (size_t i = 0; i < s->n_links; i++) {
        struct link *m = &s->links[i];
        if (!in_group(l, m))
            continue;
        if (m->state == LINK_FAILED && m->version == s->version &&
            !m->aborted && failed == NULL)
            failed = m;
        all_ready &= m->ready;
        all_prepared &= m->prepared;
        committing |= m->commit_sent;
    }
    if (failed != NULL) {
        /* Once COMMIT went out the group's outcome is decided. */
        if (!committing)
            abort_group(failed);
        return;
    }
    for (size_t i = 0; i < s->n_links; i++) {
        struct link *m = &s->links[i];
        struct wst_msg msg = {.type = WST_MSG_BARRIER};
        if (!in_group(l, m) || !in_refit(m))
            continue;
        if (all_ready && !m->go_sent) {
            m->go_sent = 1;
            msg.u.barrier.version = m->version;
            msg.u.barrier.step = WST_BARRIER_GO;
            wst_link_send(m, &msg);
        } else if (all_prepared && !m->commit_sent) {
            m->commit_sent = 1;
            msg.type = WST_MSG_COMMIT;
            msg.u.commit.version = m->version;
            wst_link_send(m, &msg);
        }
    }
}
