/* have_peek.c - how many entries an encoded have manifest carries, read
 * from the wire bytes without unpacking them.
 *
 * protobuf-c unpacks a whole message, every entry allocated, before the
 * codec can count anything: a 64 MiB frame of small entries costs seconds
 * and hundreds of MB. A receiver that bounds what one sender's manifest may
 * hold asks here first. The walk reads tags and lengths only: Control
 * field 2 (have, length-delimited) holds HaveManifest, whose field 2
 * (entries) is counted. Every top-level have field is counted (protobuf
 * merges repeated occurrences), so the count is never below what unpacking
 * would produce.
 */
#include "codec.h"

/* Reads a varint at *p (< end); 0 when it is cut short or too long. */
static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v_p)
{
    uint64_t v = 0;

    for (unsigned shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v_p = v;
            return 1;
        }
    }
    return 0;
}

/* Skips one field of wire type 'wt' at *p; 0 when it does not fit. */
static int skip_field(const uint8_t **p, const uint8_t *end, unsigned wt)
{
    uint64_t v;

    switch (wt) {
    case 0:
        return read_varint(p, end, &v);
    case 1:
        if (end - *p < 8)
            return 0;
        *p += 8;
        return 1;
    case 2:
        if (!read_varint(p, end, &v) || v > (uint64_t)(end - *p))
            return 0;
        *p += v;
        return 1;
    case 5:
        if (end - *p < 4)
            return 0;
        *p += 4;
        return 1;
    default:
        return 0;
    }
}

/* Walks the fields in [p, end): each length-delimited field 'field'
 * adds one to *n when 'inner' is 0, else its body is walked for field
 * 'inner' (one level: the body's own fields are counted). 0 when the
 * bytes are not a well-formed message. */
static int count_fields(const uint8_t *p, const uint8_t *end, uint64_t field,
                        uint64_t inner, size_t *n)
{
    while (p < end) {
        uint64_t key, len;
        if (!read_varint(&p, end, &key))
            return 0;
        unsigned wt = (unsigned)(key & 7);
        if (wt != 2 || key >> 3 != field) {
            if (!skip_field(&p, end, wt))
                return 0;
            continue;
        }
        if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p))
            return 0;
        if (inner == 0)
            (*n)++;
        else if (!count_fields(p, p + len, inner, 0, n))
            return 0;
        p += len;
    }
    return 1;
}

int wst_msg_peek_have(const void *buf, size_t len, size_t *n_entries_p)
{
    const uint8_t *p = buf;
    size_t n = 0;

    if (buf == NULL || len == 0)
        return 0;
    /* Control.have (2), and in it HaveManifest.entries (2). */
    if (!count_fields(p, p + len, 2, 2, &n) || n == 0)
        return 0;
    *n_entries_p = n;
    return 1;
}
