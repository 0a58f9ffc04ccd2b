/* errbuf.h - formatting a message into a caller's error buffer.
 *
 * Many calls report why they failed into a (char *err, size_t errlen) pair
 * the caller owns; err may be NULL or errlen 0 when the caller does not
 * want the text. This is the one place that formats into it.
 */
#ifndef WST_ERRBUF_H
#define WST_ERRBUF_H

#include <stdarg.h>
#include <stddef.h>

/* Writes the formatted message into err[0..errlen), NUL-terminated and
 * truncated; does nothing when err is NULL or errlen is 0. */
void wst_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The same with a va_list. */
void wst_verrf(char *err, size_t errlen, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#endif
