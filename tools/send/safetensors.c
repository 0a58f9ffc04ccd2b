/* safetensors.c - parsing and checking one safetensors file.
 *
 * The header is parsed with json-c in strict mode, then every tensor entry
 * is checked on its own (dtype, shape, offsets, byte count) and finally all
 * of them together: sorted by their first byte, each must start at or after
 * the end of every tensor before it. Pointers into the data are computed
 * only after the offsets have been checked against the file's real size,
 * so nothing past the end of the file is ever read.
 */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "dtype.h"
#include "errbuf.h"
#include "st_scan.h"

/* Safetensors dtype names. Those with WST_DTYPE_INVALID are valid in the
 * format but have no wstream equivalent: they are refused by name, so the
 * message can say so rather than "unknown". */
static const struct {
    const char *name;
    enum wst_dtype dtype;
} st_dtypes[] = {
    {"BF16", WST_DTYPE_BF16},
    {"F16", WST_DTYPE_F16},
    {"F32", WST_DTYPE_F32},
    {"F64", WST_DTYPE_F64},
    {"F8_E4M3", WST_DTYPE_FP8_E4M3},
    {"F8_E5M2", WST_DTYPE_FP8_E5M2},
    {"I8", WST_DTYPE_I8},
    {"U8", WST_DTYPE_U8},
    {"I32", WST_DTYPE_I32},
    {"I64", WST_DTYPE_I64},
    {"BOOL", WST_DTYPE_INVALID},
    {"I16", WST_DTYPE_INVALID},
    {"U16", WST_DTYPE_INVALID},
    {"U32", WST_DTYPE_INVALID},
    {"U64", WST_DTYPE_INVALID},
    {"F8_E8M0", WST_DTYPE_INVALID},
    {"F6_E2M3", WST_DTYPE_INVALID},
    {"F6_E3M2", WST_DTYPE_INVALID},
    {"F4", WST_DTYPE_INVALID},
    {"C64", WST_DTYPE_INVALID},
};

#define N_ST_DTYPES (sizeof(st_dtypes) / sizeof(st_dtypes[0]))

/* What one parse reports into. */
struct st_parse {
    const char *path;
    char *err;
    size_t errlen;
};

/* "path: message" into the caller's buffer; returns 'status'. */
static wst_status_t fail(const struct st_parse *p, wst_status_t status,
                         const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static wst_status_t fail(const struct st_parse *p, wst_status_t status,
                         const char *fmt, ...)
{
    char msg[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    wst_errf(p->err, p->errlen, "%s: %s", p->path, msg);
    return status;
}

const char *wst_safetensors_dtype_name(enum wst_dtype dtype)
{
    for (size_t i = 0; i < N_ST_DTYPES; i++)
        if (st_dtypes[i].dtype == dtype && dtype != WST_DTYPE_INVALID)
            return st_dtypes[i].name;
    return NULL;
}

static uint64_t read_le64(const unsigned char *b)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

/* json-c keeps object keys as C strings, so a key spelled with "\u0000"
 * would be cut short silently (and could then collide with another). The
 * escape is looked for in the raw text: a backslash preceded by an even
 * number of backslashes starts an escape. Returns its offset, or -1. */
static long find_escaped_nul(const char *s, size_t len)
{
    for (size_t i = 0; i + 6 <= len; i++) {
        if (s[i] != '\\')
            continue;
        size_t run = 1;
        while (i + run < len && s[i + run] == '\\')
            run++;
        /* Pairs of backslashes are literal; an odd run escapes s[i+run]. */
        size_t esc = i + run - 1;
        if (run % 2 == 1 && esc + 6 <= len && s[esc + 1] == 'u' &&
            s[esc + 2] == '0' && s[esc + 3] == '0' && s[esc + 4] == '0' &&
            s[esc + 5] == '0')
            return (long)esc;
        i += run - 1;
    }
    return -1;
}

/* The raw checks json-c cannot make for us: the header starts with an
 * object and spells no NUL. */
static wst_status_t check_text(const struct st_parse *p, const char *text,
                               size_t len)
{
    long nul;

    if (len == 0 || text[0] != '{')
        return fail(p, WST_ERR_INTEGRITY,
                    "the header (%zu bytes after the length) does not start "
                    "with a JSON object",
                    len);
    if (memchr(text, '\0', len) != NULL)
        return fail(p, WST_ERR_INTEGRITY, "the header holds a NUL byte");
    nul = find_escaped_nul(text, len);
    if (nul >= 0)
        return fail(p, WST_ERR_INTEGRITY,
                    "the header spells a NUL character (\\u0000) at byte %ld",
                    nul);
    return WST_OK;
}

static wst_status_t scan_failed(const struct st_parse *p,
                                const struct wst_st_scan *c, const char *why)
{
    return fail(p, WST_ERR_INTEGRITY,
                "the header is not valid JSON (byte %zu of %zu): %s", c->at,
                c->len, why);
}

/* The raw spelling of the one key that is not a tensor. (Spelled with
 * escapes, it counts as a tensor here and is refused as one later.) */
static int is_metadata_key(const char *text, const struct wst_st_entry *e)
{
    static const char key[] = "\"__metadata__\"";

    return e->key_len == sizeof(key) - 1 &&
           memcmp(text + e->key_at, key, sizeof(key) - 1) == 0;
}

/* Walks the top level once, allocating nothing: the number of tensors,
 * refused past WST_ST_MAX_TENSORS as soon as it gets there. */
static wst_status_t count_tensors(const struct st_parse *p, const char *text,
                                  size_t len, size_t *n_p)
{
    struct wst_st_scan c;
    struct wst_st_entry e;
    const char *why;
    size_t n = 0;
    int r;

    wst_st_scan_init(&c, text, len);
    while ((r = wst_st_scan_next(&c, &e, &why)) == 1) {
        if (is_metadata_key(text, &e))
            continue;
        if (++n > WST_ST_MAX_TENSORS)
            return fail(p, WST_ERR_TOO_LARGE,
                        "the header lists more than %zu tensors (the limit; "
                        "stopped counting at byte %zu of %zu)",
                        (size_t)WST_ST_MAX_TENSORS, c.at, len);
    }
    if (r < 0)
        return scan_failed(p, &c, why);
    *n_p = n;
    return WST_OK;
}

/* One key or value of the header, 'len' bytes at 'at', parsed by json-c
 * on its own (strict, UTF-8 checked); the caller puts the object. */
static wst_status_t parse_part(const struct st_parse *p,
                               struct json_tokener *tok, const char *text,
                               size_t at, size_t len, size_t header_len,
                               struct json_object **out)
{
    struct json_object *o;
    enum json_tokener_error e;
    size_t end;

    json_tokener_reset(tok);
    o = json_tokener_parse_ex(tok, text + at, (int)len);
    e = json_tokener_get_error(tok);
    end = json_tokener_get_parse_end(tok);
    if (e != json_tokener_success || end != len) {
        json_object_put(o);
        return fail(p, WST_ERR_INTEGRITY,
                    "the header is not valid JSON (byte %zu of %zu): %s",
                    at + end, header_len,
                    e == json_tokener_success    ? "unexpected characters"
                    : e == json_tokener_continue ? "it ends early"
                                                 : json_tokener_error_desc(e));
    }
    *out = o;
    return WST_OK;
}

/* "__metadata__": an object of strings, nothing else. */
static wst_status_t check_metadata(const struct st_parse *p,
                                   struct json_object *meta)
{
    if (!json_object_is_type(meta, json_type_object))
        return fail(p, WST_ERR_INTEGRITY,
                    "\"__metadata__\" is not an object of strings");
    json_object_object_foreach(meta, key, val)
    {
        if (!json_object_is_type(val, json_type_string))
            return fail(p, WST_ERR_INTEGRITY,
                        "\"__metadata__\" entry \"%s\" is not a string", key);
    }
    return WST_OK;
}

/* A JSON integer in [0, INT64_MAX) (json-c clamps larger values to
 * INT64_MAX, so that value itself is refused too). */
static wst_status_t read_count(const struct st_parse *p, const char *tensor,
                               const char *field, struct json_object *v,
                               uint64_t *out)
{
    int64_t x;

    if (!json_object_is_type(v, json_type_int))
        return fail(p, WST_ERR_INTEGRITY,
                    "tensor '%s': \"%s\" holds a value that is not an integer",
                    tensor, field);
    x = json_object_get_int64(v);
    if (x < 0)
        return fail(p, WST_ERR_INTEGRITY,
                    "tensor '%s': \"%s\" holds a negative value (%lld)", tensor,
                    field, (long long)x);
    if (x == INT64_MAX)
        return fail(p, WST_ERR_INTEGRITY,
                    "tensor '%s': \"%s\" holds a value that is too large",
                    tensor, field);
    *out = (uint64_t)x;
    return WST_OK;
}

static struct json_object *field(struct json_object *entry, const char *key)
{
    struct json_object *v = NULL;

    return json_object_object_get_ex(entry, key, &v) ? v : NULL;
}

static wst_status_t parse_dtype(const struct st_parse *p, const char *name,
                                struct json_object *v, struct wst_st_tensor *t)
{
    const char *s;

    if (v == NULL || !json_object_is_type(v, json_type_string))
        return fail(p, WST_ERR_INTEGRITY,
                    "tensor '%s': \"dtype\" is missing or not a string", name);
    s = json_object_get_string(v);
    for (size_t i = 0; i < N_ST_DTYPES; i++) {
        if (strcmp(s, st_dtypes[i].name) != 0)
            continue;
        if (st_dtypes[i].dtype == WST_DTYPE_INVALID)
            return fail(p, WST_ERR_UNSUPPORTED,
                        "tensor '%s': dtype %s has no wstream equivalent "
                        "(wstream carries BF16, F16, F32, F64, F8_E4M3, "
                        "F8_E5M2, I8, U8, I32, I64)",
                        name, s);
        t->file_dtype = st_dtypes[i].name;
        t->dtype = st_dtypes[i].dtype;
        return WST_OK;
    }
    return fail(p, WST_ERR_UNSUPPORTED, "tensor '%s': unknown dtype \"%.64s\"",
                name, s);
}

/* Shape, and the byte count it implies (0 if any dimension is 0). */
static wst_status_t parse_shape(const struct st_parse *p, const char *name,
                                struct json_object *v, struct wst_st_tensor *t,
                                uint64_t *bytes_p)
{
    uint64_t elems = 1, bytes;
    int zero = 0;
    size_t n;

    if (v == NULL || !json_object_is_type(v, json_type_array))
        return fail(p, WST_ERR_INTEGRITY,
                    "tensor '%s': \"shape\" is missing or not an array", name);
    n = json_object_array_length(v);
    if (n > WST_MAX_DIMS)
        return fail(p, WST_ERR_UNSUPPORTED,
                    "tensor '%s': %zu dimensions; wstream carries at most %d",
                    name, n, WST_MAX_DIMS);
    t->ndim = (uint32_t)n;
    for (size_t d = 0; d < n; d++) {
        wst_status_t st = read_count(
            p, name, "shape", json_object_array_get_idx(v, d), &t->shape[d]);
        if (st != WST_OK)
            return st;
        zero |= t->shape[d] == 0;
    }
    for (size_t d = 0; !zero && d < n; d++)
        if (__builtin_mul_overflow(elems, t->shape[d], &elems))
            return fail(p, WST_ERR_INTEGRITY,
                        "tensor '%s': the shape's element count overflows",
                        name);
    if (zero)
        elems = 0;
    if (__builtin_mul_overflow(elems, (uint64_t)wst_dtype_size(t->dtype),
                               &bytes))
        return fail(p, WST_ERR_INTEGRITY,
                    "tensor '%s': the shape's byte count overflows", name);
    *bytes_p = bytes;
    return WST_OK;
}

static wst_status_t parse_offsets(const struct st_parse *p, const char *name,
                                  struct json_object *v, uint64_t data_len,
                                  struct wst_st_tensor *t)
{
    wst_status_t st;

    if (v == NULL || !json_object_is_type(v, json_type_array) ||
        json_object_array_length(v) != 2)
        return fail(p, WST_ERR_INTEGRITY,
                    "tensor '%s': \"data_offsets\" is missing or not an array "
                    "of two integers",
                    name);
    st = read_count(p, name, "data_offsets", json_object_array_get_idx(v, 0),
                    &t->begin);
    if (st == WST_OK)
        st = read_count(p, name, "data_offsets",
                        json_object_array_get_idx(v, 1), &t->end);
    if (st != WST_OK)
        return st;
    if (t->begin > t->end)
        return fail(p, WST_ERR_INTEGRITY,
                    "tensor '%s': data_offsets [%llu, %llu] end before they "
                    "begin",
                    name, (unsigned long long)t->begin,
                    (unsigned long long)t->end);
    if (t->end > data_len)
        return fail(p, WST_ERR_INTEGRITY,
                    "tensor '%s': data_offsets [%llu, %llu] run past the end "
                    "of the file (its data region holds %llu bytes)",
                    name, (unsigned long long)t->begin,
                    (unsigned long long)t->end, (unsigned long long)data_len);
    return WST_OK;
}

static wst_status_t parse_tensor(const struct st_parse *p, const char *name,
                                 struct json_object *entry, uint64_t data_len,
                                 struct wst_st_tensor *t)
{
    uint64_t bytes = 0;
    size_t len = strlen(name);
    wst_status_t st;

    if (len == 0)
        return fail(p, WST_ERR_UNSUPPORTED,
                    "a tensor has an empty name, which wstream cannot carry");
    if (len >= WST_NAME_MAX)
        return fail(p, WST_ERR_UNSUPPORTED,
                    "tensor '%.64s...': its name has %zu bytes; wstream "
                    "carries at most %d",
                    name, len, WST_NAME_MAX - 1);
    if (!json_object_is_type(entry, json_type_object))
        return fail(p, WST_ERR_INTEGRITY, "tensor '%s': entry is not an object",
                    name);
    st = parse_dtype(p, name, field(entry, "dtype"), t);
    if (st == WST_OK)
        st = parse_shape(p, name, field(entry, "shape"), t, &bytes);
    if (st == WST_OK)
        st = parse_offsets(p, name, field(entry, "data_offsets"), data_len, t);
    if (st != WST_OK)
        return st;
    if (bytes != t->end - t->begin)
        return fail(p, WST_ERR_INTEGRITY,
                    "tensor '%s': shape and dtype %s make %llu bytes, but "
                    "data_offsets [%llu, %llu] hold %llu",
                    name, t->file_dtype, (unsigned long long)bytes,
                    (unsigned long long)t->begin, (unsigned long long)t->end,
                    (unsigned long long)(t->end - t->begin));
    t->name = strdup(name);
    if (t->name == NULL)
        return fail(p, WST_ERR_NO_MEMORY, "out of memory");
    return WST_OK;
}

static int compare_begin(const void *a, const void *b)
{
    const struct wst_st_tensor *x = a, *y = b;

    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* Sorted by begin: a tensor overlaps an earlier one exactly when it starts
 * before the furthest end seen so far. Empty tensors hold no bytes. */
static wst_status_t check_overlaps(const struct st_parse *p,
                                   const struct wst_safetensors *f)
{
    const struct wst_st_tensor *reach = NULL;

    for (size_t i = 0; i < f->n_tensors; i++) {
        const struct wst_st_tensor *t = &f->tensors[i];
        if (t->begin == t->end)
            continue;
        if (reach != NULL && t->begin < reach->end)
            return fail(p, WST_ERR_INTEGRITY,
                        "tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] "
                        "overlap",
                        reach->name, (unsigned long long)reach->begin,
                        (unsigned long long)reach->end, t->name,
                        (unsigned long long)t->begin,
                        (unsigned long long)t->end);
        if (reach == NULL || t->end > reach->end)
            reach = t;
    }
    return WST_OK;
}

static int compare_name(const void *a, const void *b)
{
    const struct wst_st_tensor *x = a, *y = b;

    return strcmp(x->name, y->name);
}

/* json-c keeps one of two equal keys silently; here neither is kept. */
static wst_status_t check_duplicates(const struct st_parse *p,
                                     struct wst_safetensors *f)
{
    qsort(f->tensors, f->n_tensors, sizeof(*f->tensors), compare_name);
    for (size_t i = 1; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0)
            return fail(p, WST_ERR_INTEGRITY,
                        "tensor '%s' is listed twice in the header",
                        f->tensors[i].name);
    return WST_OK;
}

/* One entry of the top-level object: "__metadata__" or a tensor. */
static wst_status_t parse_entry(const struct st_parse *p,
                                struct json_tokener *tok, const char *text,
                                const struct wst_st_entry *e, size_t cap,
                                int *seen_meta, struct wst_safetensors *f)
{
    uint64_t data_len = f->size - 8 - f->header_len;
    struct json_object *key = NULL, *val = NULL;
    const char *name;
    wst_status_t st;

    st = parse_part(p, tok, text, e->key_at, e->key_len, f->header_len, &key);
    if (st != WST_OK)
        return st;
    name = json_object_get_string(key);
    if (text[e->val_at] != '{') {
        /* A scalar, string or array where an object belongs. */
        st = strcmp(name, "__metadata__") == 0
                 ? fail(p, WST_ERR_INTEGRITY,
                        "\"__metadata__\" is not an object of strings")
                 : fail(p, WST_ERR_INTEGRITY,
                        "tensor '%.*s': entry is not an object", WST_NAME_MAX,
                        name);
        goto out_put_key;
    }
    st = parse_part(p, tok, text, e->val_at, e->val_len, f->header_len, &val);
    if (st != WST_OK)
        goto out_put_key;
    if (strcmp(name, "__metadata__") == 0) {
        st = *seen_meta ? fail(p, WST_ERR_INTEGRITY,
                               "\"__metadata__\" is listed twice")
                        : check_metadata(p, val);
        *seen_meta = 1;
    } else if (f->n_tensors >= cap) {
        /* The count took every key but a plain "__metadata__": not
         * reached. */
        st = fail(p, WST_ERR_INTEGRITY, "more tensors than counted");
    } else {
        struct wst_st_tensor *t = &f->tensors[f->n_tensors];
        st = parse_tensor(p, name, val, data_len, t);
        if (st == WST_OK) {
            f->n_tensors++;
            f->tensor_bytes += t->end - t->begin;
        }
    }
    json_object_put(val);
out_put_key:
    json_object_put(key);
    return st;
}

/* Counts the tensors (refusing too many before allocating anything for
 * them), then parses each entry on its own. */
static wst_status_t parse_entries(const struct st_parse *p, const char *text,
                                  struct wst_safetensors *f)
{
    size_t len = (size_t)f->header_len, n = 0;
    struct wst_st_scan c;
    struct wst_st_entry e;
    struct json_tokener *tok;
    const char *why;
    int seen_meta = 0, r = 0;
    wst_status_t st;

    st = check_text(p, text, len);
    if (st == WST_OK)
        st = count_tensors(p, text, len, &n);
    if (st != WST_OK)
        return st;
    f->tensors = calloc(n ? n : 1, sizeof(*f->tensors));
    tok = json_tokener_new();
    if (f->tensors == NULL || tok == NULL) {
        st = fail(p, WST_ERR_NO_MEMORY, "out of memory");
        goto out_free_tok;
    }
    json_tokener_set_flags(tok,
                           JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    wst_st_scan_init(&c, text, len);
    while (st == WST_OK && (r = wst_st_scan_next(&c, &e, &why)) == 1)
        st = parse_entry(p, tok, text, &e, n, &seen_meta, f);
    if (st != WST_OK)
        goto out_free_tok;
    if (r < 0) { /* the count's walk saw the same text: not reached */
        st = scan_failed(p, &c, why);
        goto out_free_tok;
    }
    st = check_duplicates(p, f);
    if (st != WST_OK)
        goto out_free_tok;
    qsort(f->tensors, f->n_tensors, sizeof(*f->tensors), compare_begin);
    st = check_overlaps(p, f);
    if (st != WST_OK)
        goto out_free_tok;
    for (size_t i = 0; i < f->n_tensors; i++)
        f->tensors[i].data = f->bytes + 8 + f->header_len + f->tensors[i].begin;

out_free_tok:
    if (tok != NULL)
        json_tokener_free(tok);
    return st;
}

/* The header length field, before anything of the header is read. */
static wst_status_t check_header_len(const struct st_parse *p,
                                     uint64_t header_len, uint64_t size)
{
    if (header_len > size - 8)
        return fail(p, WST_ERR_INTEGRITY,
                    "header length %llu runs past the end of the file (%llu "
                    "bytes): truncated or not a safetensors file",
                    (unsigned long long)header_len, (unsigned long long)size);
    if (header_len > WST_ST_HEADER_MAX)
        return fail(p, WST_ERR_TOO_LARGE,
                    "header length %llu is over the limit of %llu bytes",
                    (unsigned long long)header_len,
                    (unsigned long long)WST_ST_HEADER_MAX);
    return WST_OK;
}

wst_status_t wst_safetensors_parse(const char *path, const void *bytes,
                                   uint64_t size, struct wst_safetensors *out,
                                   char *err, size_t errlen)
{
    struct st_parse p = {path != NULL ? path : "(safetensors)", err, errlen};
    struct wst_safetensors f = {0};
    wst_status_t st;

    if (out == NULL || (bytes == NULL && size > 0))
        return fail(&p, WST_ERR_INVALID, "NULL argument");
    memset(out, 0, sizeof(*out));
    if (size < 8)
        return fail(&p, WST_ERR_INTEGRITY,
                    "truncated: %llu bytes, too short for the 8-byte header "
                    "length",
                    (unsigned long long)size);
    f.bytes = bytes;
    f.size = size;
    f.header_len = read_le64(f.bytes);
    st = check_header_len(&p, f.header_len, size);
    if (st != WST_OK)
        return st;
    f.path = strdup(p.path);
    if (f.path == NULL)
        return fail(&p, WST_ERR_NO_MEMORY, "out of memory");
    st = parse_entries(&p, (const char *)f.bytes + 8, &f);
    if (st != WST_OK)
        goto err_free;
    *out = f;
    return WST_OK;

err_free:
    wst_safetensors_close(&f);
    return st;
}

wst_status_t wst_safetensors_open(int dirfd, const char *path,
                                  const char *label,
                                  struct wst_safetensors *out, char *err,
                                  size_t errlen)
{
    struct st_parse p = {label != NULL ? label : path, err, errlen};
    unsigned char len8[8];
    struct stat sb;
    void *map;
    wst_status_t st;
    int fd;

    fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(&p, WST_ERR_IO, "cannot open: %s", strerror(errno));
    if (fstat(fd, &sb) != 0) {
        st = fail(&p, WST_ERR_IO, "cannot stat: %s", strerror(errno));
        goto out_close_fd;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = fail(&p, WST_ERR_IO, "not a regular file");
        goto out_close_fd;
    }
    if (sb.st_size < 8) {
        st = wst_safetensors_parse(p.path, "", (uint64_t)sb.st_size, out, err,
                                   errlen);
        goto out_close_fd;
    }
    /* The length field first: a header over the limit is refused before
     * the file is mapped. */
    if (pread(fd, len8, sizeof(len8), 0) != (ssize_t)sizeof(len8)) {
        st = fail(&p, WST_ERR_IO, "cannot read the header length: %s",
                  strerror(errno));
        goto out_close_fd;
    }
    st = check_header_len(&p, read_le64(len8), (uint64_t)sb.st_size);
    if (st != WST_OK)
        goto out_close_fd;
    /* Read-only and private: the tool never writes the checkpoint. The
     * file must not change while it is sent (a writer truncating it would
     * fault this process; one rewriting it would send mixed bytes, which
     * the layer digests cannot notice: they are computed here). */
    map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        st = fail(&p, WST_ERR_IO, "cannot map %lld bytes: %s",
                  (long long)sb.st_size, strerror(errno));
        goto out_close_fd;
    }
    st = wst_safetensors_parse(p.path, map, (uint64_t)sb.st_size, out, err,
                               errlen);
    if (st != WST_OK) {
        munmap(map, (size_t)sb.st_size);
        goto out_close_fd;
    }
    out->mapped = 1;

out_close_fd:
    close(fd);
    return st;
}

void wst_safetensors_close(struct wst_safetensors *f)
{
    if (f == NULL)
        return;
    for (size_t i = 0; f->tensors != NULL && i < f->n_tensors; i++)
        free(f->tensors[i].name);
    free(f->tensors);
    free(f->path);
    if (f->mapped)
        munmap((void *)f->bytes, (size_t)f->size);
    memset(f, 0, sizeof(*f));
}
