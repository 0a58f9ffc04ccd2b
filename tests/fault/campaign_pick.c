/* campaign_pick.c - a campaign trial's choices, from its seed alone. */
#include <stdio.h>
#include <string.h>

#include "campaign.h"

/* splitmix64: a fixed, well-mixed sequence per seed. */
static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint32_t below(uint64_t *s, uint32_t n)
{
    return (uint32_t)(next(s) % n);
}

static double uniform(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * (double)(next(s) >> 11) / (double)(1ull << 53);
}

uint64_t campaign_trial_seed(uint64_t seed, uint32_t i)
{
    uint64_t s = seed ^ 0x6a09e667f3bcc908ull;
    uint64_t v = 0;

    for (uint32_t k = 0; k <= i; k++)
        v = next(&s);
    return v;
}

void campaign_pick(uint64_t seed, int transport_mode, struct campaign_trial *t)
{
    uint64_t s = seed;

    memset(t, 0, sizeof(*t));
    t->seed = seed;
    t->shm = (int)below(&s, 2);
    if (transport_mode != 2)
        t->shm = transport_mode;
    t->agents = 1 + below(&s, 3);
    t->senders = 1 + below(&s, 3);
    /* tiny and tiny-moe split over 1 or 2 ranks only (8 heads, 16
     * experts); "dense:<MiB>" splits over any. */
    static const char *const presets[] = {"tiny-moe", "tiny", "dense:24"};
    uint32_t p = below(&s, 3);
    snprintf(t->preset, sizeof(t->preset), "%s",
             presets[t->agents == 3 ? 2 : p]);
    t->layers = 2 + below(&s, 3);
    t->target = (int)below(&s, 3);
    t->index = below(&s, t->target == TARGET_SENDER ? t->senders : t->agents);
    t->kind = (int)below(&s, 2);
    t->stop_s = uniform(&s, 0.1, 6.0);
    if (t->kind != KIND_STOP)
        t->stop_s = 0;
    t->when = (int)below(&s, 2);
    /* A sender is hit at its own layer; others at a random sender's. */
    t->trigger_sender = below(&s, t->senders);
    if (t->target == TARGET_SENDER)
        t->trigger_sender = t->index;
    t->layer = below(&s, t->layers);
    /* One in six at once (before BEGIN reaches anyone), the rest spread
     * over twice version 1's refit time: mid-refit and after the commit. */
    t->delay_frac = below(&s, 6) == 0 ? 0 : uniform(&s, 0, 2.0);
    if (t->when != WHEN_DELAY) {
        t->delay_frac = 0;
    } else {
        t->trigger_sender = 0;
        t->layer = 0;
    }
}

void campaign_describe(const struct campaign_trial *t, char *buf, size_t len)
{
    static const char *const targets[] = {"sender", "agent", "engine"};
    char kind[32], when[64];

    if (t->kind == KIND_KILL)
        snprintf(kind, sizeof(kind), "kill");
    else
        snprintf(kind, sizeof(kind), "stop(%.1fs)", t->stop_s);
    if (t->when == WHEN_LAYER)
        snprintf(when, sizeof(when), "at layer %u of sender %u", t->layer,
                 t->trigger_sender);
    else
        snprintf(when, sizeof(when), "%.2f x v1 after the push", t->delay_frac);
    snprintf(buf, len, "%s agents=%u senders=%u %s:%u %s%u %s %s",
             t->shm ? "shm" : "tcp", t->agents, t->senders, t->preset,
             t->layers, targets[t->target], t->index, kind, when);
}
