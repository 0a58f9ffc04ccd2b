/* label.h - the free-form label that travels with a version ("step-1200",
 * a run or git id): the one rule every side checks it by.
 *
 * A label is at most WST_LABEL_MAX - 1 bytes (status.h) of printable ASCII
 * without spaces (0x21..0x7e): one field of the engine socket's
 * space-separated lines, shown as it is in logs, JSON and metrics. Empty
 * means no label. The sender's API checks it, and the codec again where it
 * arrives from another process.
 */
#ifndef WST_LABEL_H
#define WST_LABEL_H

#include <stddef.h>

#include <wstream/status.h>

/* WST_OK when label[0..len) (a NUL in it is a byte like any other) is a
 * label, else WST_ERR_INVALID with err naming the rule and the first byte
 * that breaks it. Borrows label for the call. */
wst_status_t wst_label_check(const char *label, size_t len, char *err,
                             size_t errlen);

/* Nonzero for a byte a label may hold. */
int wst_label_byte_ok(unsigned char c);

#endif
