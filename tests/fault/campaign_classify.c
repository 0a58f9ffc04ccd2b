/* campaign_classify.c - how a campaign trial's engine group ended.
 *
 * The rule (also in wstream-campaign --help). Member k of the group is
 * agent k, its stand-in engine k and its live bytes. Engine k SERVES
 * version v when it is alive, its agent is alive and its state file says
 * "serving" at v. The group ended
 *   committed-everywhere  when every engine serves 2, every agent is usable
 *                         at 2 and every member's live bytes are all v2;
 *   refused-everywhere-old-version-intact
 *                         the same with version 1;
 *   unusable-everywhere   when the group does not serve: some engine is
 *                         dead, not "serving", or lost its agent -- and
 *                         nothing of it lies (the checks below hold).
 * Anything else is a FAILURE, and so is, whatever the group did:
 *   - an engine whose state says "serving" v (alive or not) while its
 *     live bytes are not all of v;
 *   - a live agent usable at v while its live bytes are not all of v;
 *   - a live engine serving while its live agent is unusable or at another
 *     version;
 *   - two engines serving different versions;
 *   - a sender that reported version 2 committed while a live agent is
 *     usable at another version;
 *   - a process that was not killed on purpose and is gone: an agent or a
 *     sender (a stopped one too, once resumed), or an engine that died of
 *     a signal or exited non-zero (an engine exits 0 when its agent hangs
 *     up: that engine does not serve, which is no failure in itself);
 *   - a hang: a sender that neither answered nor died, a live agent with a
 *     refit still open, or a live engine still paused, 3 x the agents'
 *     --timeout (plus the stop's length) after the fault.
 */
#include <stdio.h>
#include <string.h>

#include "campaign.h"

static const char *const outcome_names[] = {
    "committed-everywhere", "refused-everywhere-old-version-intact",
    "unusable-everywhere", "FAILURE"};

const char *campaign_outcome_name(enum campaign_outcome o)
{
    return (unsigned)o < OUTCOME_COUNT ? outcome_names[o] : "?";
}

static int is_target(const struct campaign_trial *t, int target, uint32_t i)
{
    return t->target == target && t->index == i;
}

/* Did a process that should have lived die? */
static int survivors_ok(const struct campaign_trial *t,
                        const struct campaign_obs *o, char *why, size_t len)
{
    for (uint32_t k = 0; k < o->agents; k++) {
        int killed = is_target(t, TARGET_AGENT, k) && t->kind == KIND_KILL;
        if (!o->agent[k].alive && !killed) {
            snprintf(why, len, "agent %u %s without being killed", k,
                     o->agent[k].how);
            return 0;
        }
        const struct campaign_proc *e = &o->engine[k];
        int hit = is_target(t, TARGET_ENGINE, k);
        if (e->alive || (hit && t->kind == KIND_KILL) || e->exit_code == 0)
            continue;
        snprintf(why, len, "engine %u %s without being killed", k, e->how);
        return 0;
    }
    for (uint32_t r = 0; r < o->senders; r++) {
        int killed = is_target(t, TARGET_SENDER, r) && t->kind == KIND_KILL;
        if (!o->sender[r].alive && !killed) {
            snprintf(why, len, "sender %u %s without being killed", r,
                     o->sender[r].how);
            return 0;
        }
    }
    return 1;
}

static int serves(const struct campaign_obs *o, uint32_t k)
{
    return o->engine[k].alive && o->agent[k].alive &&
           strcmp(o->engine_state[k], "serving") == 0;
}

static const char *bytes_name(int bytes)
{
    return bytes == 2 ? "version 2" : bytes == 1 ? "version 1" : "neither";
}

/* The checks that hold whatever the group did: nothing serves or claims
 * what it does not hold. */
static int nothing_lies(const struct campaign_obs *o, char *why, size_t len)
{
    uint64_t served = 0;

    for (uint32_t k = 0; k < o->agents; k++) {
        if (strcmp(o->engine_state[k], "serving") == 0 &&
            (uint64_t)o->bytes[k] != o->engine_version[k]) {
            snprintf(why, len,
                     "engine %u says serving version %llu but its live "
                     "bytes are %s",
                     k, (unsigned long long)o->engine_version[k],
                     bytes_name(o->bytes[k]));
            return 0;
        }
        if (o->agent[k].alive && o->agent_usable[k] &&
            (uint64_t)o->bytes[k] != o->agent_version[k]) {
            snprintf(why, len,
                     "agent %u is usable at version %llu but its live bytes "
                     "are %s",
                     k, (unsigned long long)o->agent_version[k],
                     bytes_name(o->bytes[k]));
            return 0;
        }
        if (serves(o, k) && (!o->agent_usable[k] ||
                             o->agent_version[k] != o->engine_version[k])) {
            snprintf(why, len,
                     "engine %u serves version %llu but its agent is %s at "
                     "version %llu",
                     k, (unsigned long long)o->engine_version[k],
                     o->agent_usable[k] ? "usable" : "unusable",
                     (unsigned long long)o->agent_version[k]);
            return 0;
        }
        if (serves(o, k)) {
            if (served != 0 && served != o->engine_version[k]) {
                snprintf(why, len,
                         "engines serve different versions (%llu and %llu)",
                         (unsigned long long)served,
                         (unsigned long long)o->engine_version[k]);
                return 0;
            }
            served = o->engine_version[k];
        }
    }
    for (uint32_t r = 0; r < o->senders; r++) {
        if (!o->answered[r] || o->status[r] != 0)
            continue;
        for (uint32_t k = 0; k < o->agents; k++)
            if (o->agent[k].alive && o->agent_usable[k] &&
                o->agent_version[k] != 2) {
                snprintf(why, len,
                         "sender %u reported version 2 committed, but agent "
                         "%u is usable at version %llu",
                         r, k, (unsigned long long)o->agent_version[k]);
                return 0;
            }
    }
    return 1;
}

/* "members: 0 lost-agent 1 serving@1" -- what each engine does. */
static void members(const struct campaign_obs *o, char *why, size_t len)
{
    size_t n = (size_t)snprintf(why, len, "members:");

    for (uint32_t k = 0; k < o->agents && n < len; k++) {
        if (serves(o, k))
            n += (size_t)snprintf(why + n, len - n, " %u serving@%llu", k,
                                  (unsigned long long)o->engine_version[k]);
        else
            n += (size_t)snprintf(why + n, len - n, " %u %s", k,
                                  !o->agent[k].alive    ? "lost-agent"
                                  : !o->engine[k].alive ? "engine-dead"
                                                        : o->engine_state[k]);
    }
}

/* Every member serving v, usable at v, holding v. */
static int everywhere(const struct campaign_obs *o, uint64_t v)
{
    for (uint32_t k = 0; k < o->agents; k++)
        if (!serves(o, k) || o->engine_version[k] != v || !o->agent_usable[k] ||
            o->agent_version[k] != v || (uint64_t)o->bytes[k] != v)
            return 0;
    return 1;
}

/* The group alone: the outcome by the rule, the survivors aside. */
static enum campaign_outcome group_outcome(const struct campaign_obs *o,
                                           char *why, size_t len)
{
    if (!nothing_lies(o, why, len))
        return OUTCOME_FAILURE;
    if (everywhere(o, 2))
        return OUTCOME_COMMITTED;
    if (everywhere(o, 1))
        return OUTCOME_REFUSED;
    for (uint32_t k = 0; k < o->agents; k++)
        if (!serves(o, k)) {
            members(o, why, len);
            return OUTCOME_UNUSABLE;
        }
    snprintf(why, len,
             "every engine serves, but not one version everywhere with its "
             "bytes");
    return OUTCOME_FAILURE;
}

enum campaign_outcome campaign_classify(const struct campaign_trial *t,
                                        const struct campaign_obs *o,
                                        enum campaign_outcome *group_p,
                                        char *why, size_t len)
{
    char crash[256], group[300];

    why[0] = '\0';
    if (o->hang) {
        snprintf(why, len, "hang: %s", o->hang_what);
        *group_p = OUTCOME_FAILURE;
        return OUTCOME_FAILURE;
    }
    group[0] = '\0';
    *group_p = group_outcome(o, group, sizeof(group));
    if (survivors_ok(t, o, crash, sizeof(crash))) {
        snprintf(why, len, "%s", group);
        return *group_p;
    }
    snprintf(why, len, "%s; the group: %s%s%s", crash,
             campaign_outcome_name(*group_p), group[0] ? ", " : "", group);
    return OUTCOME_FAILURE;
}
