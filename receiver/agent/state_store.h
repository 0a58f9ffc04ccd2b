/* state_store.h - what wstream-agent keeps across a restart: its committed
 * version (and its label) and whether it is usable, in a small JSON file
 * (--state-file).
 *
 *     {"committed_version": 5, "usable": false,
 *      "reason": "refit of version 6 was open when the agent stopped",
 *      "open_version": 6, "committed_label": "step-5"}
 *
 * committed_label may be missing (files written before labels): "".
 * The agent writes it from its engine hooks (agent_main.c): before it asks
 * the engine to pause for version V (unusable, open_version V: a crash from
 * then on leaves the live memory a mix of versions), after a commit (usable)
 * and after a failure (unusable, with the reason). At start it seeds its
 * receiver from it (WST_RECEIVER_PARAM_INITIAL_STATE), so a restart neither
 * takes an older version again nor serves memory a crash left
 * half-written. Each write is whole and durable (wst_atomic_write: fsync of
 * the file and of its directory).
 */
#ifndef WST_AGENT_STATE_STORE_H
#define WST_AGENT_STATE_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#define WST_STATE_REASON_MAX 512 /* the receiver's reason, NUL included */

struct wst_agent_state {
    uint64_t committed_version; /* 0: none */
    int usable;
    char reason[WST_STATE_REASON_MAX];   /* "" exactly when usable */
    uint64_t open_version;               /* a refit begun, not ended; 0: none */
    char committed_label[WST_LABEL_MAX]; /* the committed version's; "" */
};

/* Reads PATH into *state. A missing file is a fresh agent: WST_OK, *found_p
 * 0 and *state usable at version 0. Otherwise *found_p 1 and WST_OK, or
 * WST_ERR_CONFIG for a file that is not exactly the object above (a wrong
 * type, a missing or unknown key, a negative number, usable with a reason
 * or an open version, unusable without a reason, a committed_label that
 * is not a label (common/label.h), more than 64 KiB) and
 * WST_ERR_IO when it cannot be read; err then names the file and what is
 * wrong. Borrows path for the call. */
wst_status_t wst_state_store_load(const char *path,
                                  struct wst_agent_state *state, int *found_p,
                                  char *err, size_t errlen);

/* Replaces PATH with *state, durably (wst_atomic_write, mode 0644).
 * WST_ERR_IO (WST_ERR_NO_MEMORY) with err naming the file and the step
 * that failed. Borrows path and state for the call. */
wst_status_t wst_state_store_save(const char *path,
                                  const struct wst_agent_state *state,
                                  char *err, size_t errlen);

#endif
