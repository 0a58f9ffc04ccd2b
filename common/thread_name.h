/* thread_name.h - names our threads, so that top -H, /proc/PID/task/TID/comm
 * and wstream-bench's CPU table say which is which (the progress thread,
 * the hashing threads, ...). Names are "wst-" and what the thread does.
 */
#ifndef WST_THREAD_NAME_H
#define WST_THREAD_NAME_H

#include <pthread.h>

/* Names 'thread' (of this process) 'name', cut to the kernel's 15
 * characters. Best effort: a name that cannot be set changes nothing. */
void wst_thread_name(pthread_t thread, const char *name);

#endif
