/* agent_state.h - wstream-agent's persisted state (state_store.h) as the
 * daemon uses it: which file, loaded at start to seed the receiver, and
 * rewritten from the engine hooks at every step that changes what a restart
 * may trust. Private to receiver/agent/.
 *
 * The file is --state-file, else the --status-file path + ".state", else
 * none (nothing persisted; the agent says so in its log). The hook
 * functions run on the receiver's engine thread, one at a time.
 */
#ifndef WST_AGENT_STATE_H
#define WST_AGENT_STATE_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/receiver.h>
#include <wstream/status.h>

#include "agent.h"

/* Picks the file, loads it into a->persisted and writes it back (so that a
 * path the agent cannot write fails now, not at the first refit). A
 * malformed or unwritable file: logged naming the file, and the error
 * (WST_ERR_CONFIG, WST_ERR_IO) stops start-up. Before the receiver. */
wst_status_t wst_agent_state_open(struct agent *a);

/* Sets rp's WST_RECEIVER_PARAM_INITIAL_STATE and _LABEL fields from
 * a->persisted; they borrow a->persisted's reason and label. */
void wst_agent_state_seed(const struct agent *a,
                          struct wst_receiver_params *rp);

/* Before the engine is asked to pause for 'version': records the refit as
 * open (unusable: a crash from here on leaves mixed versions). On a failed
 * write, WST_ERR_IO with reason[0..reason_len) naming the file: the refit
 * must be refused. *prev gets what to restore if the engine refuses. */
wst_status_t wst_agent_state_begin(struct agent *a, uint64_t version,
                                   struct wst_agent_state *prev, char *reason,
                                   size_t reason_len);

/* The engine refused to begin: nothing changed, the state before it holds. */
void wst_agent_state_restore(struct agent *a,
                             const struct wst_agent_state *prev);

/* Serving 'version' labeled 'label' ("": none; a commit, or a resume after
 * a refusal). */
void wst_agent_state_committed(struct agent *a, uint64_t version,
                               const char *label);

/* Unusable for 'reason' (NULL or "": the status's name). */
void wst_agent_state_unusable(struct agent *a, wst_status_t status,
                              const char *reason);

/* Frees what wst_agent_state_open allocated. Safe twice. */
void wst_agent_state_release(struct agent *a);

#endif
