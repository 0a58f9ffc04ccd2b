/* st_scan.c - the top level of a safetensors header, one entry at a time
 * (st_scan.h). */
#include "st_scan.h"

enum { SCAN_START, SCAN_FIRST, SCAN_NEXT, SCAN_DONE };

static int is_ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

static void skip_ws(struct wst_st_scan *c)
{
    while (c->at < c->len && is_ws(c->s[c->at]))
        c->at++;
}

/* At a '"': moves past the closing quote. A backslash escapes the byte
 * after it (json-c checks which escapes are valid). */
static int skip_string(struct wst_st_scan *c)
{
    for (c->at++; c->at < c->len; c->at++) {
        if (c->s[c->at] == '\\')
            c->at++;
        else if (c->s[c->at] == '"') {
            c->at++;
            return 0;
        }
    }
    c->at = c->len;
    return -1;
}

/* One value: a string, an object or array (brackets balanced outside
 * strings), or a scalar up to the next delimiter. */
static int skip_value(struct wst_st_scan *c)
{
    size_t depth = 0;

    if (c->at >= c->len)
        return -1;
    if (c->s[c->at] == '"')
        return skip_string(c);
    if (c->s[c->at] != '{' && c->s[c->at] != '[') {
        size_t from = c->at;
        while (c->at < c->len && !is_ws(c->s[c->at]) && c->s[c->at] != ',' &&
               c->s[c->at] != '}' && c->s[c->at] != ']')
            c->at++;
        return c->at > from ? 0 : -1;
    }
    while (c->at < c->len) {
        char ch = c->s[c->at];
        if (ch == '"') {
            if (skip_string(c) != 0)
                return -1;
            continue;
        }
        if (ch == '{' || ch == '[')
            depth++;
        else if (ch == '}' || ch == ']')
            depth--;
        c->at++;
        if (depth == 0)
            return 0;
    }
    return -1;
}

void wst_st_scan_init(struct wst_st_scan *c, const char *s, size_t len)
{
    c->s = s;
    c->len = len;
    c->at = 0;
    c->state = SCAN_START;
}

/* After the closing '}': only whitespace may follow. */
static int finish(struct wst_st_scan *c, const char **why)
{
    c->at++;
    skip_ws(c);
    c->state = SCAN_DONE;
    if (c->at != c->len) {
        *why = "data after its JSON object";
        return -1;
    }
    return 0;
}

int wst_st_scan_next(struct wst_st_scan *c, struct wst_st_entry *e,
                     const char **why)
{
    *why = "";
    if (c->state == SCAN_DONE)
        return 0;
    skip_ws(c);
    if (c->state == SCAN_START) {
        if (c->at >= c->len || c->s[c->at] != '{') {
            *why = "expected '{'";
            return -1;
        }
        c->at++;
        c->state = SCAN_FIRST;
        skip_ws(c);
    }
    if (c->at < c->len && c->s[c->at] == '}' && c->state == SCAN_FIRST)
        return finish(c, why);
    if (c->state == SCAN_NEXT) {
        if (c->at < c->len && c->s[c->at] == '}')
            return finish(c, why);
        if (c->at >= c->len || c->s[c->at] != ',') {
            *why = c->at >= c->len ? "it ends early" : "expected ',' or '}'";
            return -1;
        }
        c->at++;
        skip_ws(c);
    }
    if (c->at >= c->len || c->s[c->at] != '"') {
        *why = c->at >= c->len ? "it ends early" : "expected a string key";
        return -1;
    }
    e->key_at = c->at;
    if (skip_string(c) != 0) {
        *why = "it ends early";
        return -1;
    }
    e->key_len = c->at - e->key_at;
    skip_ws(c);
    if (c->at >= c->len || c->s[c->at] != ':') {
        *why = c->at >= c->len ? "it ends early" : "expected ':'";
        return -1;
    }
    c->at++;
    skip_ws(c);
    e->val_at = c->at;
    if (skip_value(c) != 0) {
        *why = c->at >= c->len ? "it ends early" : "expected a value";
        return -1;
    }
    e->val_len = c->at - e->val_at;
    c->state = SCAN_NEXT;
    return 1;
}
