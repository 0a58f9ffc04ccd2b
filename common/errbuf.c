/* errbuf.c - formatting a message into a caller's error buffer. */
#include "errbuf.h"

#include <stdio.h>

void wst_verrf(char *err, size_t errlen, const char *fmt, va_list ap)
{
    if (err == NULL || errlen == 0)
        return;
    vsnprintf(err, errlen, fmt, ap);
}

void wst_errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    wst_verrf(err, errlen, fmt, ap);
    va_end(ap);
}
