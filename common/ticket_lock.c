/* ticket_lock.c - a mutex, a condition and two counters. */
#include "ticket_lock.h"

void wst_ticket_lock_init(struct wst_ticket_lock *t)
{
    pthread_mutex_init(&t->mutex, NULL);
    pthread_cond_init(&t->turn, NULL);
    t->next = 0;
    t->serving = 0;
}

void wst_ticket_lock_destroy(struct wst_ticket_lock *t)
{
    pthread_cond_destroy(&t->turn);
    pthread_mutex_destroy(&t->mutex);
}

void wst_ticket_lock_enter(struct wst_ticket_lock *t)
{
    pthread_mutex_lock(&t->mutex);
    uint64_t ticket = t->next++;
    while (t->serving != ticket)
        pthread_cond_wait(&t->turn, &t->mutex);
    pthread_mutex_unlock(&t->mutex);
}

void wst_ticket_lock_leave(struct wst_ticket_lock *t)
{
    pthread_mutex_lock(&t->mutex);
    t->serving++;
    /* Every waiter wakes; the one whose ticket it is goes. Waiters are
     * the few hashing threads. */
    pthread_cond_broadcast(&t->turn);
    pthread_mutex_unlock(&t->mutex);
}
