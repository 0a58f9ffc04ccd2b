/* st_scan.h - the top level of a safetensors header, one entry at a time.
 *
 * A header is one JSON object whose entries are small (a tensor's dtype,
 * shape and offsets, or "__metadata__"), but there may be very many of
 * them. Parsing the whole object at once with json-c costs about 1.6 KB of
 * memory an entry before anything can be counted; walking its top level
 * here costs nothing, so the entries can be counted and refused before
 * anything is allocated for them, and each is then handed to json-c on its
 * own.
 *
 * The walk checks only the top level's structure: '{', then entries of a
 * string key, ':' and one value, separated by ',', then '}', with JSON
 * whitespace between tokens. A value's extent is found by balancing
 * brackets outside strings (or, for a scalar, by the next delimiter); its
 * content and the key's escapes are json-c's to check.
 */
#ifndef WST_SEND_ST_SCAN_H
#define WST_SEND_ST_SCAN_H

#include <stddef.h>

/* A walk over 'len' bytes at 's' (borrowed for the walk's life). */
struct wst_st_scan {
    const char *s;
    size_t len;
    size_t at; /* the next byte to look at */
    int state; /* private */
};

/* One entry: the key with its quotes, and the value, as byte ranges of
 * the text. */
struct wst_st_entry {
    size_t key_at, key_len;
    size_t val_at, val_len;
};

void wst_st_scan_init(struct wst_st_scan *c, const char *s, size_t len);

/* The next entry into *e: 1. The end of the object, followed by nothing
 * but whitespace: 0. Malformed text: -1, with c->at the offset of the
 * first byte that does not fit and *why (static) saying what was
 * expected. */
int wst_st_scan_next(struct wst_st_scan *c, struct wst_st_entry *e,
                     const char **why);

#endif
