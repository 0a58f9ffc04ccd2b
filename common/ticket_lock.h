/* ticket_lock.h - a lock served in the order it was asked for.
 *
 * A pthread mutex promises no order: a thread that releases it and asks
 * again at once usually wins, so among several threads one can wait
 * through every turn of the others. The sender's digest threads share the
 * GPU this way, and the layer that waited held up its LAYER_DONE
 * (sender/digests.c). A ticket lock gives turns first come, first served.
 *
 * Zero is not a valid lock: wst_ticket_lock_init first, then destroy.
 */
#ifndef WST_TICKET_LOCK_H
#define WST_TICKET_LOCK_H

#include <pthread.h>
#include <stdint.h>

struct wst_ticket_lock {
    pthread_mutex_t mutex;
    pthread_cond_t turn;
    uint64_t next;    /* the ticket the next caller takes */
    uint64_t serving; /* the ticket whose turn it is */
};

void wst_ticket_lock_init(struct wst_ticket_lock *t);
void wst_ticket_lock_destroy(struct wst_ticket_lock *t);
/* Waits for this caller's turn; every caller before it has left. */
void wst_ticket_lock_enter(struct wst_ticket_lock *t);
/* Ends the turn: the next ticket holder goes. Only by the holder. */
void wst_ticket_lock_leave(struct wst_ticket_lock *t);

#endif
