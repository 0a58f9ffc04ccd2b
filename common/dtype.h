/* dtype.h - element sizes and names for enum wst_dtype. */
#ifndef WST_DTYPE_H
#define WST_DTYPE_H

#include <stddef.h>
#include <wstream/status.h>

/* Bytes per element; 0 for an unknown dtype (the caller must refuse it). */
size_t wst_dtype_size(enum wst_dtype dtype);

/* "bf16", ...; "invalid" for unknown values. Static string. */
const char *wst_dtype_name(enum wst_dtype dtype);

/* Parses a name produced by wst_dtype_name; WST_DTYPE_INVALID if unknown. */
enum wst_dtype wst_dtype_parse(const char *name);

/* What to tell a person who typed the unknown dtype 'name': writes
 * "did you mean \"bf16\"? " when 'name' is another spelling of one
 * (torch's "bfloat16", "torch.float32", "BF16", "half", ...), then
 * "valid: bf16, f16, ..." into 'buf' (len bytes, caller's). */
void wst_dtype_hint(const char *name, char *buf, size_t len);

/* Nonzero when 'value' is a known dtype (for values from the wire). */
int wst_dtype_is_valid(int value);

const char *wst_mem_type_name(enum wst_mem_type mem);

#endif
