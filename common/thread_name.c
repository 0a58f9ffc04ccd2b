/* thread_name.c - see thread_name.h. */
#include "thread_name.h"

#include <stdio.h>

void wst_thread_name(pthread_t thread, const char *name)
{
    char cut[16];

    if (name == NULL)
        return;
    snprintf(cut, sizeof(cut), "%s", name);
    (void)pthread_setname_np(thread, cut);
}
