/* refit_machine.h - the receiver's refit state machine: events in,
 * actions out. Private to receiver/.
 *
 * The machine holds every decision of a refit (DESIGN.md sections 3 and
 * 5) and nothing else: no UCX, no threads, no locks, no clock, no logging.
 * Its caller (refit.c) turns what happens into events -- a sender's BEGIN
 * or LAYER_DONE, bytes landed, a job's result, a peer lost, a deadline --
 * and runs the actions each step appends to its list: messages to send,
 * jobs to queue, receiving halves to drive, state to publish, lines to log.
 *
 *   IDLE ─BEGIN─▶ BEGINNING ─hook ok─▶ READY ─GO─▶ RECEIVING ─final─▶ PREPARED
 *    ▲              │ failure:         │ failure:    │ failure:     failure: │
 *    │              │ refused          │ refused     │ unusable     unusable │
 *    │              ▼                  ▼             ▼                COMMIT │
 *    └──────────────┴──────────────────┴─────────────┴─ hook ◀─ COMMITTING ◀─┘
 *
 * The two barriers of an engine group (DESIGN.md section 5): READY tells
 * the senders the engine paused and every sender began the version, and
 * nothing is written before a sender says GO (it heard READY from every
 * receiver of the group); PREPARED tells them every layer is final, and
 * the version is committed only when a sender says COMMIT (every receiver
 * of the group prepared). A failure
 * before GO refuses the version (the engine resumes the committed one, or
 * hears again that the receiver is unusable); after it, the receiver is
 * unusable. Once PREPARED, a lost sender fails the refit only when no
 * sender of it is left to say COMMIT.
 *
 * Per (sender, layer): NONE ─LAYER_DONE─▶ WAITING (counted bytes still
 * landing) ─▶ CHECKING (digest check queued) ─▶ VERIFIED. A MoE layer is
 * repacked once every sender's check of it is queued (all its bytes are
 * in), beside the checks: both only read its staging slot, and a mismatch
 * fails the refit either way, as it does for dense bytes, which land in
 * live memory before they are checked. A layer is finalized once every
 * sender verified it and (MoE layers) it is repacked; once every layer is
 * final the receiver is prepared, and once committed (COMMITTING) a late
 * failure loses nothing and is only logged. MoE layer k stages in slot k mod
 * S: its credit goes out once MoE layer k - S was both repacked and verified
 * (the slot's previous tenant is read by both); the first S go out with the
 * begin acknowledgement. Jobs carry the refit's generation: results of
 * an older one are ignored, except that a begin hook which answers after
 * its refit was refused lets the engine resume only if the receiver is
 * usable (else the engine hears it is unusable, with the standing reason).
 *
 * A digest check gets what was hashed as it landed (LANDED's hashed and
 * sum, added up): when that is every byte of the layer, the check need
 * not read the layer again.
 *
 * Run to completion: the caller runs every action of a step before it
 * feeds the next event (an action that fails feeds its failure afterwards).
 * Texts in actions are the machine's, valid until its next step.
 */
#ifndef WST_RECEIVER_REFIT_MACHINE_H
#define WST_RECEIVER_REFIT_MACHINE_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "refit_actions.h"

#define WST_RM_TEXT_MAX 512       /* a reason, as ERROR messages carry it */
#define WST_RM_NO_RANK UINT32_MAX /* a connection that is no known sender */
#define WST_RM_DENSE UINT32_MAX   /* moe_ordinal of a layer without experts */

enum wst_rm_state {
    WST_RM_IDLE,
    WST_RM_BEGINNING,
    WST_RM_READY, /* the engine paused; waiting for a sender's GO */
    WST_RM_RECEIVING,
    WST_RM_PREPARED,   /* every layer final; waiting for a sender's COMMIT */
    WST_RM_COMMITTING, /* committed: the version is held */
};

enum wst_rm_mark {
    WST_RM_MARK_NONE,     /* no LAYER_DONE yet */
    WST_RM_MARK_WAITING,  /* LAYER_DONE in, counted bytes still landing */
    WST_RM_MARK_CHECKING, /* digest check queued */
    WST_RM_MARK_VERIFIED,
};

enum wst_rm_event_kind {
    WST_RM_EV_PEER_JOINED,  /* rank said hello */
    WST_RM_EV_PEER_PLANNED, /* rank was sent its slice of the plan */
    WST_RM_EV_PEER_LEFT,    /* rank's connection is gone (after any LOST) */
    WST_RM_EV_PEER_LOST,    /* rank failed or left: fails a refit it is in */
    WST_RM_EV_PEER_ERROR,   /* rank reported an error of its own */
    WST_RM_EV_BEGIN,        /* rank's BEGIN(version, mover), plan checked */
    WST_RM_EV_RX_OPENED,    /* rank's receiving half is open */
    WST_RM_EV_BEGIN_RESULT, /* the begin hook answered */
    WST_RM_EV_GO,           /* rank's GO(version): the group is ready */
    WST_RM_EV_LAYER_DONE, /* rank's LAYER_DONE(version, layer, bytes, digest) */
    WST_RM_EV_LANDED,     /* bytes of rank's layer are in place */
    WST_RM_EV_VERIFY_RESULT,
    WST_RM_EV_REPACK_RESULT,
    WST_RM_EV_FINALIZE_RESULT,
    WST_RM_EV_COMMIT,       /* rank's COMMIT(version): the group prepared */
    WST_RM_EV_COMMIT_DONE,  /* the committed hook returned */
    WST_RM_EV_FAIL,         /* a mover, or an action, failed the refit */
    WST_RM_EV_DEADLINE,     /* no progress for 'seconds' (wst_rm_stalled) */
    WST_RM_EV_PLAN_REFUSED, /* the plan was refused: a standing reason */
    WST_RM_EV_SHUTDOWN,     /* the receiver goes away: no refit any more */
};

/* One event; the fields its kind names, the rest zero. Strings are
 * borrowed for the step. */
struct wst_rm_event {
    enum wst_rm_event_kind kind;
    uint64_t now_ns; /* monotonic clock when it happened */
    uint32_t rank;   /* a sender, or WST_RM_NO_RANK */
    uint32_t layer;
    uint64_t version;
    uint64_t generation; /* of the job whose result this is */
    uint64_t bytes;      /* LAYER_DONE: the sender's count; LANDED: landed */
    uint64_t hashed;     /* LANDED: of those bytes, hashed as they landed */
    uint64_t sum;        /* LANDED: their chunk hashes (wst_digest_part) */
    uint64_t digest;
    uint32_t mover;      /* BEGIN: enum wst_mover_kind */
    int counts_bytes;    /* RX_OPENED: the half reports every byte landed */
    wst_status_t status; /* results; failures */
    double seconds;      /* repack, finalize; DEADLINE: the timeout */
    const char *peer;    /* the sender's name, for messages */
    const char *reason;  /* failures, results that failed */
    const char *label;   /* BEGIN: the version's label (checked); NULL: "" */
};

/* What the machine needs of a plan; copied by wst_rm_set_plan. */
struct wst_rm_plan {
    uint32_t n_senders;
    uint32_t n_layers;
    uint64_t total_bytes;
    const uint64_t *layer_bytes; /* [n_senders * n_layers], by sender */
    const uint8_t *staged;       /* [n_senders * n_layers]: staged items */
    const uint32_t *moe_layers;  /* [n_moe]: layer of MoE ordinal k */
    uint32_t n_moe;
    uint32_t slots; /* staging slots, >= 1 */
};

struct wst_rm_sender {
    uint8_t present;    /* joined, not left */
    uint8_t planned;    /* was sent the plan on this connection */
    uint8_t opened;     /* its receiving half is open for this refit */
    uint8_t ready_sent; /* it heard READY */
    uint8_t go;         /* it said GO for this refit */
    uint8_t acked;      /* its BEGIN was acknowledged */
    uint8_t counts_bytes;
    uint32_t mover;
    uint64_t version;        /* BEGIN received for this version */
    uint64_t failed_version; /* failed before it began: refuse its BEGIN */
};

/* The plan as the machine keeps it, with the current refit's counts per
 * layer. Arrays owned. */
struct wst_rm_layers {
    uint32_t n_senders;
    uint32_t n_layers;
    uint64_t total_bytes;
    uint64_t *bytes; /* [n_senders * n_layers] by sender */
    uint8_t *staged; /* [n_senders * n_layers]: staged items */
    uint32_t n_moe;
    uint32_t slots;
    uint32_t *moe_layers;  /* [n_moe] */
    uint32_t *moe_ordinal; /* [n_layers]: ordinal, or UINT32_MAX: dense */
    uint32_t *queued;      /* [n_layers] senders whose check is queued */
    uint32_t *verified;    /* [n_layers] senders verified */
    uint8_t *repacked;     /* [n_moe] */
};

/* Per (sender, layer) of the current refit: [world * n_layers], owned. */
struct wst_rm_cells {
    uint8_t *marks; /* enum wst_rm_mark */
    uint64_t *landed;
    uint64_t *digests; /* from LAYER_DONE */
    uint64_t *hashed;  /* landed bytes hashed as they landed */
    uint64_t *sums;    /* their chunk hashes, added up */
};

/* Zero is a valid machine: idle, usable, no senders, no plan. */
struct wst_refit_machine {
    enum wst_rm_state state;
    uint64_t version;
    uint64_t generation;
    uint64_t committed_version;
    int unusable;
    char reason[WST_RM_TEXT_MAX]; /* standing: why unusable or refused */
    char text[WST_RM_TEXT_MAX];   /* this step's */
    /* The refit's label (its first BEGIN's; every sender must name the
     * same) and the committed version's; "": none. */
    char label[WST_LABEL_MAX];
    char committed_label[WST_LABEL_MAX];
    uint64_t start_ns;
    uint64_t ack_ns;
    uint64_t progress_ns;
    uint32_t layers_final;
    uint32_t credit_next; /* MoE ordinals [0, credit_next) have credit */

    uint32_t world;
    struct wst_rm_sender *senders; /* [world] */
    struct wst_rm_layers lay;
    struct wst_rm_cells cells;
};

/* Sizes the machine for 'world' sender ranks (none present): before the
 * first hello of a world, with no sender connected. WST_ERR_NO_MEMORY
 * leaves it as it was. */
wst_status_t wst_rm_set_world(struct wst_refit_machine *m, uint32_t world);

/* Takes a new plan (copied). The current refit's per-layer counts start
 * over. WST_ERR_NO_MEMORY leaves the machine as it was. */
wst_status_t wst_rm_set_plan(struct wst_refit_machine *m,
                             const struct wst_rm_plan *plan);

/* Starts an idle machine as if it had committed 'committed_version'
 * labeled 'committed_label' (NULL: none; the caller checked it) and, with
 * a non-empty 'unusable_reason' (copied, truncated to the reason's size),
 * then failed a refit for that reason: a receiver restarted from persisted
 * state. Before the first event; no actions. */
void wst_rm_seed(struct wst_refit_machine *m, uint64_t committed_version,
                 const char *committed_label, const char *unusable_reason);

/* Frees what the machine allocated; it is a zero machine again. */
void wst_rm_release(struct wst_refit_machine *m);

/* Feeds one event; appends its actions to 'out'. */
void wst_rm_step(struct wst_refit_machine *m, const struct wst_rm_event *ev,
                 struct wst_rm_actions *out);

/* What the caller may ask between steps. */
enum wst_rm_state wst_rm_state(const struct wst_refit_machine *m);
uint64_t wst_rm_version(const struct wst_refit_machine *m);
uint64_t wst_rm_committed(const struct wst_refit_machine *m);
int wst_rm_usable(const struct wst_refit_machine *m);
/* Whether rank takes part in a refit under way (it was sent the plan). */
int wst_rm_in_refit(const struct wst_refit_machine *m, uint32_t rank);
/* Whether data of 'version' from rank may land now. */
int wst_rm_takes_data(const struct wst_refit_machine *m, uint32_t rank,
                      uint64_t version);
/* Whether a refit went without progress for more than limit_ns. */
int wst_rm_stalled(const struct wst_refit_machine *m, uint64_t now_ns,
                   uint64_t limit_ns);
enum wst_rm_mark wst_rm_mark(const struct wst_refit_machine *m, uint32_t rank,
                             uint32_t layer);

#endif
