/* refit_actions.h - what the refit state machine (refit_machine.h) asks
 * its caller to do: one action each, in a list the steps append to, and a
 * line describing each (for traces and tests). Private to receiver/.
 *
 * Texts an action points at belong to the machine that made it, and stay
 * valid until its next step.
 */
#ifndef WST_RECEIVER_REFIT_ACTIONS_H
#define WST_RECEIVER_REFIT_ACTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#define WST_RM_MOVER_KINDS 4 /* mover kinds a BEGIN names: 1..3 */

enum wst_rm_action_kind {
    WST_RM_ACT_START,         /* refit of version (label: text) starts */
    WST_RM_ACT_BEGIN_HOOK,    /* queue the begin hook (version, generation) */
    WST_RM_ACT_OPEN_RX,       /* open rank's half for mover; then RX_OPENED */
    WST_RM_ACT_SEND_ERROR,    /* ERROR(status, text) to rank */
    WST_RM_ACT_READY,         /* the engine paused (log, publish) */
    WST_RM_ACT_SEND_READY,    /* BARRIER(version, ready) to rank */
    WST_RM_ACT_RECEIVING,     /* the group is ready: receiving (log) */
    WST_RM_ACT_GRANT,         /* credit for layer granted (log) */
    WST_RM_ACT_ACK,           /* BEGIN(version, ack) to rank */
    WST_RM_ACT_SEND_CREDIT,   /* CREDIT(version, layer) to rank */
    WST_RM_ACT_RX_BEGIN,      /* rank's half: begin(version), allow(bound) */
    WST_RM_ACT_RX_ALLOW,      /* rank's half: allow(bound) */
    WST_RM_ACT_VERIFY,        /* queue the check of (rank, layer) vs digest */
    WST_RM_ACT_RECEIVED,      /* layer verified from every sender, at */
    WST_RM_ACT_REPACK,        /* queue the repack of layer */
    WST_RM_ACT_REPACKED,      /* layer repacked at, in seconds */
    WST_RM_ACT_FINALIZE,      /* queue the finalize hook of layer */
    WST_RM_ACT_FINAL,         /* layer finalized at, in seconds */
    WST_RM_ACT_PREPARED,      /* every layer final (log, publish) */
    WST_RM_ACT_SEND_PREPARED, /* BARRIER(version, prepared) to rank */
    WST_RM_ACT_COMMITTED,     /* publish version (label: text) committed */
    WST_RM_ACT_COMMIT_HOOK,   /* queue the committed hook */
    WST_RM_ACT_SEND_COMMIT,   /* COMMIT(version) to rank */
    WST_RM_ACT_ABORT_RX,      /* rank's halves write nothing more */
    WST_RM_ACT_REFUSED,       /* publish refused (text; state says reason) */
    WST_RM_ACT_UNUSABLE,      /* publish unusable (text) */
    WST_RM_ACT_LATE_FAILURE,  /* after the version was complete (log) */
    WST_RM_ACT_TELL_UNUSABLE, /* the engine's unusable hook (status, text) */
    WST_RM_ACT_RESUME,        /* the engine serves version again */
    WST_RM_ACT_END,           /* the refit is over: stop polling */
    WST_RM_ACT_REASON,        /* publish reason as the state's reason */
};

/* One action; the fields its kind names. */
struct wst_rm_action {
    enum wst_rm_action_kind kind;
    uint32_t rank;
    uint32_t layer;
    uint32_t bound; /* staged layers below it have their credit */
    uint32_t mover;
    uint64_t version;
    uint64_t generation; /* jobs carry it back in their result */
    uint64_t digest;
    /* VERIFY: of the layer's 'bytes', 'hashed' were hashed as they
     * landed, their chunk hashes adding up to 'sum' */
    uint64_t hashed;
    uint64_t sum;
    wst_status_t status;
    const char *text;   /* why (machine's; valid until the next step) */
    const char *reason; /* REFUSED: what the state says afterwards */
    double at;          /* seconds from the begin acknowledgement */
    double seconds;     /* repack, finalize; COMMITTED: the whole refit */
    /* COMMITTED: every byte of the plan, and by the mover that brought
     * it ([enum wst_mover_kind]); VERIFY: the layer's */
    uint64_t bytes;
    uint64_t bytes_by_mover[WST_RM_MOVER_KINDS];
};

/* The caller's list; steps append to it. */
struct wst_rm_actions {
    struct wst_rm_action *v; /* owned */
    size_t n;
    size_t cap;
    size_t lost; /* actions that found no memory (the step is incomplete) */
};

/* Appends 'a'; without memory it counts it in l->lost instead. */
void wst_rm_actions_add(struct wst_rm_actions *l, struct wst_rm_action a);
/* The list: emptied (storage kept), freed. */
void wst_rm_actions_clear(struct wst_rm_actions *l);
void wst_rm_actions_free(struct wst_rm_actions *l);

/* One line for an action ("ack r0 v7"), for traces and tests. */
void wst_rm_action_describe(const struct wst_rm_action *a, char *buf,
                            size_t len);

#endif
