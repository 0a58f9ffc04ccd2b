/* state_store.c - wstream-agent's persisted state: one small JSON object,
 * read strictly at start, written whole and durably from the hooks. */
#include "state_store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "atomic_file.h"
#include "errbuf.h"
#include "label.h"

#define STATE_FILE_MAX (64u << 10)

/* Every file has these; committed_label came later and may be missing. */
static const char *const state_keys[] = {"committed_version", "usable",
                                         "reason", "open_version", NULL};
#define OPTIONAL_KEY "committed_label"

/* The whole file into buf[0..*len_p), NUL-terminated; *missing_p when it
 * does not exist. */
static wst_status_t read_text(const char *path, char *buf, size_t cap,
                              size_t *len_p, int *missing_p, char *err,
                              size_t errlen)
{
    size_t len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    *missing_p = 0;
    if (fd < 0) {
        if (errno == ENOENT) {
            *missing_p = 1;
            return WST_OK;
        }
        wst_errf(err, errlen, "state file %s: %s", path, strerror(errno));
        return WST_ERR_IO;
    }
    for (;;) {
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            wst_errf(err, errlen, "state file %s: read: %s", path,
                     strerror(errno));
            close(fd);
            return WST_ERR_IO;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len == cap) {
            wst_errf(err, errlen, "state file %s: more than %u bytes", path,
                     STATE_FILE_MAX);
            close(fd);
            return WST_ERR_CONFIG;
        }
    }
    close(fd);
    buf[len] = '\0';
    *len_p = len;
    return WST_OK;
}

/* A JSON integer >= 0. */
static int get_count(struct json_object *v, uint64_t *out)
{
    if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0)
        return -1;
    *out = json_object_get_uint64(v);
    return 0;
}

static wst_status_t bad(char *err, size_t errlen, const char *path,
                        const char *what)
{
    wst_errf(err, errlen,
             "state file %s: %s (delete it to start as a fresh agent, "
             "accepting any version)",
             path, what);
    return WST_ERR_CONFIG;
}

/* committed_label, when there: a string that passes common/label.h. */
static wst_status_t parse_label(const char *path, struct json_object *root,
                                struct wst_agent_state *s, char *err,
                                size_t errlen)
{
    struct json_object *v;
    char why[256], what[320];

    s->committed_label[0] = '\0';
    if (!json_object_object_get_ex(root, OPTIONAL_KEY, &v))
        return WST_OK;
    if (!json_object_is_type(v, json_type_string))
        return bad(err, errlen, path, "\"" OPTIONAL_KEY "\" is not a string");
    if (wst_label_check(json_object_get_string(v),
                        (size_t)json_object_get_string_len(v), why,
                        sizeof(why)) != WST_OK) {
        snprintf(what, sizeof(what), "\"" OPTIONAL_KEY "\": %s", why);
        return bad(err, errlen, path, what);
    }
    memcpy(s->committed_label, json_object_get_string(v),
           (size_t)json_object_get_string_len(v) + 1);
    return WST_OK;
}

/* The object's fields into *s, every key known and present. */
static wst_status_t parse_object(const char *path, struct json_object *root,
                                 struct wst_agent_state *s, char *err,
                                 size_t errlen)
{
    struct json_object *v;
    char what[160];

    if (!json_object_is_type(root, json_type_object))
        return bad(err, errlen, path, "not a JSON object");
    json_object_object_foreach(root, key, val)
    {
        size_t k = 0;
        (void)val;
        while (state_keys[k] != NULL && strcmp(state_keys[k], key) != 0)
            k++;
        if (state_keys[k] == NULL && strcmp(key, OPTIONAL_KEY) != 0) {
            snprintf(what, sizeof(what), "unknown key \"%.64s\"", key);
            return bad(err, errlen, path, what);
        }
    }
    for (size_t k = 0; state_keys[k] != NULL; k++)
        if (!json_object_object_get_ex(root, state_keys[k], NULL)) {
            snprintf(what, sizeof(what), "no \"%s\"", state_keys[k]);
            return bad(err, errlen, path, what);
        }
    json_object_object_get_ex(root, "committed_version", &v);
    if (get_count(v, &s->committed_version) != 0)
        return bad(err, errlen, path,
                   "\"committed_version\" is not an integer >= 0");
    json_object_object_get_ex(root, "open_version", &v);
    if (get_count(v, &s->open_version) != 0)
        return bad(err, errlen, path,
                   "\"open_version\" is not an integer >= 0");
    json_object_object_get_ex(root, "usable", &v);
    if (!json_object_is_type(v, json_type_boolean))
        return bad(err, errlen, path, "\"usable\" is not true or false");
    s->usable = json_object_get_boolean(v);
    json_object_object_get_ex(root, "reason", &v);
    if (!json_object_is_type(v, json_type_string) ||
        (size_t)json_object_get_string_len(v) >= sizeof(s->reason))
        return bad(err, errlen, path,
                   "\"reason\" is not a string of at most 511 bytes");
    snprintf(s->reason, sizeof(s->reason), "%s", json_object_get_string(v));
    if (s->usable && (s->reason[0] != '\0' || s->open_version != 0))
        return bad(err, errlen, path,
                   "usable, yet with a reason or an open version");
    if (!s->usable && s->reason[0] == '\0')
        return bad(err, errlen, path, "unusable without a reason");
    return parse_label(path, root, s, err, errlen);
}

wst_status_t wst_state_store_load(const char *path,
                                  struct wst_agent_state *state, int *found_p,
                                  char *err, size_t errlen)
{
    struct wst_agent_state s = {.usable = 1};
    struct json_tokener *tok;
    struct json_object *root;
    size_t len = 0, end;
    int missing;
    wst_status_t st;
    char *text = malloc(STATE_FILE_MAX + 1);

    if (text == NULL)
        return WST_ERR_NO_MEMORY;
    st = read_text(path, text, STATE_FILE_MAX, &len, &missing, err, errlen);
    if (st != WST_OK || missing) {
        free(text);
        if (st == WST_OK) {
            *state = s;
            *found_p = 0;
        }
        return st;
    }
    tok = json_tokener_new();
    if (tok == NULL) {
        free(text);
        return WST_ERR_NO_MEMORY;
    }
    root = json_tokener_parse_ex(tok, text, (int)len);
    end = json_tokener_get_parse_end(tok);
    while (root != NULL && end < len && strchr(" \t\r\n", text[end]) != NULL)
        end++;
    if (root == NULL || json_tokener_get_error(tok) != json_tokener_success)
        st = bad(err, errlen, path, "not valid JSON");
    else if (end != len)
        st = bad(err, errlen, path, "data after the JSON object");
    else
        st = parse_object(path, root, &s, err, errlen);
    json_object_put(root);
    json_tokener_free(tok);
    free(text);
    if (st == WST_OK) {
        *state = s;
        *found_p = 1;
    }
    return st;
}

wst_status_t wst_state_store_save(const char *path,
                                  const struct wst_agent_state *state,
                                  char *err, size_t errlen)
{
    struct json_object *o = json_object_new_object();
    const char *text;
    wst_status_t st = WST_ERR_NO_MEMORY;

    if (o == NULL)
        return st;
    json_object_object_add(o, "committed_version",
                           json_object_new_uint64(state->committed_version));
    json_object_object_add(o, "usable", json_object_new_boolean(state->usable));
    json_object_object_add(o, "reason", json_object_new_string(state->reason));
    json_object_object_add(o, "open_version",
                           json_object_new_uint64(state->open_version));
    json_object_object_add(o, OPTIONAL_KEY,
                           json_object_new_string(state->committed_label));
    text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_SPACED);
    if (text == NULL)
        wst_errf(err, errlen, "state file %s: out of memory", path);
    else
        st = wst_atomic_write(path, text, strlen(text), 0644, err, errlen);
    json_object_put(o);
    return st;
}
