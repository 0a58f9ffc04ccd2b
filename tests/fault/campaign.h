/* campaign.h - wstream-campaign's trials: what one trial does (picked from
 * its seed), what it observed, and how its engine group is classified.
 *
 * A trial starts a fresh cluster (tools/demo/cluster.h: agents of one
 * engine group "demo-engine", a stand-in engine per agent, senders),
 * commits version 1 and checks it, then pushes version 2 with one fault
 * injected and classifies the group (campaign_classify.c says the rule).
 */
#ifndef WST_CAMPAIGN_H
#define WST_CAMPAIGN_H

#include <stddef.h>
#include <stdint.h>

#define CAMPAIGN_MAX 3 /* agents and senders per trial, at most */

enum campaign_target { TARGET_SENDER, TARGET_AGENT, TARGET_ENGINE };
enum campaign_kind { KIND_KILL, KIND_STOP };
enum campaign_when { WHEN_LAYER, WHEN_DELAY };

enum campaign_outcome {
    OUTCOME_COMMITTED, /* committed-everywhere */
    OUTCOME_REFUSED,   /* refused-everywhere-old-version-intact */
    OUTCOME_UNUSABLE,  /* unusable-everywhere */
    OUTCOME_FAILURE,   /* anything else */
    OUTCOME_COUNT
};

/* What one trial does; a pure function of its seed (campaign_pick). */
struct campaign_trial {
    uint64_t seed;
    int shm;                 /* transport: 0 tcp, 1 shm (UCX_TLS=sm,tcp) */
    uint32_t agents;         /* 1..3, one engine group */
    uint32_t senders;        /* 1..3 */
    uint32_t lanes;          /* data lanes of every process; 0: auto */
    char preset[32];         /* "tiny-moe", "tiny" or "dense:<MiB>" */
    uint32_t layers;         /* 2..4 */
    int target;              /* enum campaign_target */
    uint32_t index;          /* which sender, agent or engine */
    int kind;                /* enum campaign_kind */
    double stop_s;           /* KIND_STOP: SIGCONT after this long */
    int when;                /* enum campaign_when */
    uint32_t trigger_sender; /* WHEN_LAYER: whose progress callback */
    uint32_t layer;          /* WHEN_LAYER: at the start of this layer */
    double delay_frac;       /* WHEN_DELAY: after the push, in units of
                              * version 1's refit time (0: at once) */
};

/* The seed of trial i (from 0) of a campaign of seed 'seed'. */
uint64_t campaign_trial_seed(uint64_t seed, uint32_t i);

/* Picks every choice of a trial from 'seed'; transport_mode 0 tcp, 1 shm,
 * 2 mixed (either, from the seed). */
void campaign_pick(uint64_t seed, int transport_mode, struct campaign_trial *t);

/* "shm agents=2 senders=3 tiny-moe:3 engine1 stop(2.3s) at layer 1 of
 * sender 0" into buf. */
void campaign_describe(const struct campaign_trial *t, char *buf, size_t len);

/* One process at the end of a trial. */
struct campaign_proc {
    int alive;     /* still running (a stopped process was resumed) */
    char how[96];  /* when not alive: how it ended */
    int exit_code; /* when it exited: its code; -1 killed by a signal */
};

/* Everything the classification reads, gathered after the trial settled. */
struct campaign_obs {
    uint32_t agents, senders;
    struct campaign_proc agent[CAMPAIGN_MAX], engine[CAMPAIGN_MAX],
        sender[CAMPAIGN_MAX];
    /* agent k's status file (as it last wrote it) */
    int agent_usable[CAMPAIGN_MAX];
    uint64_t agent_version[CAMPAIGN_MAX];
    /* engine k's state file: "serving", "paused", "unusable" ("?" none) */
    char engine_state[CAMPAIGN_MAX][16];
    uint64_t engine_version[CAMPAIGN_MAX];
    /* agent k's live bytes: 2 all of version 2, 1 all of version 1, 0
     * neither (mixed or poisoned) */
    int bytes[CAMPAIGN_MAX];
    /* sender r's result of version 2: answered, and its status */
    int answered[CAMPAIGN_MAX];
    int status[CAMPAIGN_MAX];
    int hang;            /* something had not answered by the deadline */
    char hang_what[256]; /* what */
};

/* Classifies the trial 't' from 'obs' (the rule: campaign_classify.c);
 * *group_p gets the group's outcome alone (what it serves), which differs
 * only when a survivor died; 'why' a one-line reason for a failure, or the
 * members' states. */
enum campaign_outcome campaign_classify(const struct campaign_trial *t,
                                        const struct campaign_obs *obs,
                                        enum campaign_outcome *group_p,
                                        char *why, size_t len);

const char *campaign_outcome_name(enum campaign_outcome o);

/* What a trial reports back (from its own process). */
struct campaign_result {
    int outcome;     /* enum campaign_outcome */
    int group;       /* the group's alone (campaign_classify) */
    char abort[160]; /* the first UCX assertion in the trial's log, if any */
    int injected;    /* the fault happened (a layer trigger may not fire) */
    double fault_at; /* seconds after the push it happened */
    double v1_s;     /* version 1's refit time */
    double seconds;  /* the whole trial */
    char why[512];
    char workdir[256]; /* kept on a failure: logs, status and state files */
};

/* Runs trial 't' in this process (which it may change: environment,
 * stdout and stderr go to the trial's log). 'timeout_s' is the agents'
 * --timeout; 'keep' keeps the workdir even when the trial passed. */
void campaign_run(const struct campaign_trial *t, double timeout_s, int keep,
                  struct campaign_result *res);

#endif
