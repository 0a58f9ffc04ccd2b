/* checkpoint.c - finding, opening and cross-checking a checkpoint's files.
 *
 * A sharded checkpoint is checked in three steps once every shard it names
 * has been parsed on its own: every tensor, sorted by name, must appear
 * once (no tensor in two shards); each must be listed in the index under
 * its own shard; and the index must list no more tensors than the shards
 * hold, so every listed tensor was found where the index says.
 */
#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "errbuf.h"

static const char index_name[] = "model.safetensors.index.json";
static const char single_name[] = "model.safetensors";

/* A tensor and the file it is in, for the cross-checks. */
struct located {
    const struct wst_st_tensor *t;
    size_t file;
};

static wst_status_t fail(char *err, size_t errlen, wst_status_t status,
                         const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static wst_status_t fail(char *err, size_t errlen, wst_status_t status,
                         const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    wst_verrf(err, errlen, fmt, ap);
    va_end(ap);
    return status;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);

    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* "dir/name", malloc'd; NULL when out of memory. */
static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *s = malloc(n);

    if (s != NULL)
        snprintf(s, n, "%s%s%s", dir,
                 dir[0] != '\0' && dir[strlen(dir) - 1] != '/' ? "/" : "",
                 name);
    return s;
}

/* The whole index file as JSON. */
static wst_status_t read_index(const char *path, struct json_object **root_p,
                               char *err, size_t errlen)
{
    struct json_tokener *tok = NULL;
    struct json_object *root = NULL;
    struct stat sb;
    char *text = NULL;
    size_t got = 0;
    wst_status_t st = WST_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return fail(err, errlen, WST_ERR_IO, "%s: cannot open: %s", path,
                    strerror(errno));
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = fail(err, errlen, WST_ERR_IO, "%s: not a readable regular file",
                  path);
        goto out_close_fd;
    }
    if ((uint64_t)sb.st_size > WST_CHECKPOINT_INDEX_MAX) {
        st = fail(err, errlen, WST_ERR_TOO_LARGE,
                  "%s: %lld bytes, over the index limit of %llu", path,
                  (long long)sb.st_size,
                  (unsigned long long)WST_CHECKPOINT_INDEX_MAX);
        goto out_close_fd;
    }
    text = malloc((size_t)sb.st_size + 1);
    if (text == NULL) {
        st = fail(err, errlen, WST_ERR_NO_MEMORY, "out of memory");
        goto out_close_fd;
    }
    while (got < (size_t)sb.st_size) {
        ssize_t n = read(fd, text + got, (size_t)sb.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            st = fail(err, errlen, WST_ERR_IO, "%s: read failed: %s", path,
                      n < 0 ? strerror(errno) : "file shrank");
            goto out_free_text;
        }
        got += (size_t)n;
    }
    tok = json_tokener_new();
    if (tok == NULL) {
        st = fail(err, errlen, WST_ERR_NO_MEMORY, "out of memory");
        goto out_free_text;
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT |
                                    JSON_TOKENER_ALLOW_TRAILING_CHARS |
                                    JSON_TOKENER_VALIDATE_UTF8);
    root = json_tokener_parse_ex(tok, text, (int)got);
    enum json_tokener_error e = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    while (e == json_tokener_success && end < got &&
           (text[end] == ' ' || text[end] == '\n' || text[end] == '\r' ||
            text[end] == '\t'))
        end++;
    if (e != json_tokener_success || end != got ||
        !json_object_is_type(root, json_type_object)) {
        st = fail(err, errlen, WST_ERR_INTEGRITY,
                  "%s: not one JSON object (byte %zu of %zu): %s", path,
                  json_tokener_get_parse_end(tok), got,
                  e == json_tokener_continue  ? "it ends early"
                  : e != json_tokener_success ? json_tokener_error_desc(e)
                  : end != got                ? "data after the object"
                                              : "not an object");
        json_object_put(root);
        goto out_free_tok;
    }
    *root_p = root;

out_free_tok:
    json_tokener_free(tok);
out_free_text:
    free(text);
out_close_fd:
    close(fd);
    return st;
}

/* A shard name must stay inside the index's directory. */
static int plain_name(const char *s, size_t len)
{
    return len > 0 && len < NAME_MAX && strlen(s) == len &&
           strchr(s, '/') == NULL && strcmp(s, ".") != 0 &&
           strcmp(s, "..") != 0;
}

/* The distinct shard names of the weight map, in order of first mention,
 * as keys of 'names' (value: the file index). */
static wst_status_t list_shards(const char *index, struct json_object *map,
                                struct json_object *names, size_t *n_p,
                                char *err, size_t errlen)
{
    size_t n = 0;

    json_object_object_foreach(map, tensor, v)
    {
        if (!json_object_is_type(v, json_type_string))
            return fail(err, errlen, WST_ERR_INTEGRITY,
                        "%s: weight_map entry '%s' is not a file name", index,
                        tensor);
        const char *shard = json_object_get_string(v);
        if (!plain_name(shard, (size_t)json_object_get_string_len(v)))
            return fail(err, errlen, WST_ERR_INTEGRITY,
                        "%s: tensor '%s' names shard \"%.300s\", which is not "
                        "a plain file name inside the index's directory",
                        index, tensor, shard);
        if (json_object_object_get_ex(names, shard, NULL))
            continue;
        if (n == WST_CHECKPOINT_MAX_FILES)
            return fail(err, errlen, WST_ERR_TOO_LARGE,
                        "%s: more than %zu shards", index,
                        WST_CHECKPOINT_MAX_FILES);
        if (json_object_object_add(names, shard,
                                   json_object_new_int64((int64_t)n)) != 0)
            return fail(err, errlen, WST_ERR_NO_MEMORY, "out of memory");
        n++;
    }
    *n_p = n;
    return WST_OK;
}

/* The tensors of every file, file by file, into c->tensors. */
static wst_status_t collect_tensors(struct wst_checkpoint *c, char *err,
                                    size_t errlen)
{
    size_t n = 0, k = 0;

    for (size_t f = 0; f < c->n_files; f++)
        n += c->files[f].n_tensors;
    if (n > WST_CHECKPOINT_MAX_TENSORS)
        return fail(err, errlen, WST_ERR_TOO_LARGE,
                    "%zu tensors, over the limit of %zu", n,
                    WST_CHECKPOINT_MAX_TENSORS);
    c->tensors = calloc(n ? n : 1, sizeof(*c->tensors));
    if (c->tensors == NULL)
        return fail(err, errlen, WST_ERR_NO_MEMORY, "out of memory");
    for (size_t f = 0; f < c->n_files; f++) {
        for (size_t i = 0; i < c->files[f].n_tensors; i++)
            c->tensors[k++] = &c->files[f].tensors[i];
        c->bytes += c->files[f].tensor_bytes;
    }
    c->n_tensors = n;
    return WST_OK;
}

static int compare_name(const void *a, const void *b)
{
    const struct located *x = a, *y = b;

    return strcmp(x->t->name, y->t->name);
}

/* Every tensor in one place: once, in the shard the index names. */
static wst_status_t cross_check(const struct wst_checkpoint *c,
                                struct json_object *map, char *err,
                                size_t errlen)
{
    struct located *all = calloc(c->n_tensors ? c->n_tensors : 1, sizeof(*all));
    size_t k = 0;
    wst_status_t st = WST_OK;

    if (all == NULL)
        return fail(err, errlen, WST_ERR_NO_MEMORY, "out of memory");
    for (size_t f = 0; f < c->n_files; f++)
        for (size_t i = 0; i < c->files[f].n_tensors; i++)
            all[k++] = (struct located){&c->files[f].tensors[i], f};
    qsort(all, k, sizeof(*all), compare_name);
    for (size_t i = 1; i < k; i++)
        if (strcmp(all[i - 1].t->name, all[i].t->name) == 0) {
            st = fail(err, errlen, WST_ERR_INTEGRITY,
                      "tensor '%s' is in two shards: %s and %s", all[i].t->name,
                      c->files[all[i - 1].file].path,
                      c->files[all[i].file].path);
            goto out_free;
        }
    for (size_t i = 0; i < k; i++) {
        const char *path = c->files[all[i].file].path;
        struct json_object *v = NULL;
        if (!json_object_object_get_ex(map, all[i].t->name, &v)) {
            st = fail(err, errlen, WST_ERR_INTEGRITY,
                      "%s holds tensor '%s', which the index %s does not list",
                      path, all[i].t->name, c->index);
            goto out_free;
        }
        const char *shard = json_object_get_string(v),
                   *base = strrchr(path, '/');
        if (strcmp(base != NULL ? base + 1 : path, shard) != 0) {
            st = fail(err, errlen, WST_ERR_INTEGRITY,
                      "%s holds tensor '%s', but the index %s puts it in %s",
                      path, all[i].t->name, c->index, shard);
            goto out_free;
        }
    }
    /* Each shard tensor matched a distinct entry: equal counts mean every
     * entry was matched. Otherwise name one that was not. */
    json_object_object_foreach(map, tensor, v)
    {
        struct wst_st_tensor probe = {.name = tensor};
        struct located key = {&probe, 0};
        if (bsearch(&key, all, k, sizeof(*all), compare_name) == NULL) {
            st = fail(err, errlen, WST_ERR_INTEGRITY,
                      "the index %s puts tensor '%s' in %s, which does not "
                      "hold it",
                      c->index, tensor, json_object_get_string(v));
            goto out_free;
        }
    }

out_free:
    free(all);
    return st;
}

/* Opens every shard the index names, then cross-checks them. */
static wst_status_t open_index(struct wst_checkpoint *c, const char *index,
                               char *err, size_t errlen)
{
    struct json_object *root = NULL, *map = NULL, *meta = NULL, *names = NULL;
    char *dir = NULL, *slash;
    size_t n = 0, held = 0;
    int dirfd = -1;
    wst_status_t st;

    c->index = strdup(index);
    dir = strdup(index);
    if (c->index == NULL || dir == NULL) {
        st = fail(err, errlen, WST_ERR_NO_MEMORY, "out of memory");
        goto out_free_dir;
    }
    slash = strrchr(dir, '/');
    if (slash == NULL)
        strcpy(dir, ".");
    else
        slash[slash == dir ? 1 : 0] = '\0';
    st = read_index(index, &root, err, errlen);
    if (st != WST_OK)
        goto out_free_dir;
    if (json_object_object_get_ex(root, "metadata", &meta) &&
        !json_object_is_type(meta, json_type_object)) {
        st = fail(err, errlen, WST_ERR_INTEGRITY,
                  "%s: \"metadata\" is not an object", index);
        goto out_put_root;
    }
    if (!json_object_object_get_ex(root, "weight_map", &map) ||
        !json_object_is_type(map, json_type_object) ||
        json_object_object_length(map) == 0) {
        st = fail(err, errlen, WST_ERR_INTEGRITY,
                  "%s: no \"weight_map\" object listing tensors", index);
        goto out_put_root;
    }
    names = json_object_new_object();
    if (names == NULL) {
        st = fail(err, errlen, WST_ERR_NO_MEMORY, "out of memory");
        goto out_put_root;
    }
    st = list_shards(index, map, names, &n, err, errlen);
    if (st != WST_OK)
        goto out_put_names;
    c->files = calloc(n, sizeof(*c->files));
    if (c->files == NULL) {
        st = fail(err, errlen, WST_ERR_NO_MEMORY, "out of memory");
        goto out_put_names;
    }
    dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        st = fail(err, errlen, WST_ERR_IO, "%s: cannot open directory: %s", dir,
                  strerror(errno));
        goto out_put_names;
    }
    json_object_object_foreach(names, shard, unused)
    {
        (void)unused;
        char *label = join(dir, shard);
        if (label == NULL) {
            st = fail(err, errlen, WST_ERR_NO_MEMORY, "out of memory");
            goto out_close_dir;
        }
        st = wst_safetensors_open(dirfd, shard, label, &c->files[c->n_files],
                                  err, errlen);
        if (st == WST_ERR_IO) {
            /* Say which index asked for the file. */
            char why[600];
            snprintf(why, sizeof(why), "%s", err != NULL ? err : "");
            fail(err, errlen, st, "%s (named by the index %s)", why, index);
        }
        free(label);
        if (st != WST_OK)
            goto out_close_dir;
        held += c->files[c->n_files++].n_tensors;
        /* Counted as the shards open: many shards at the per-file limit
         * are refused before they are all parsed. */
        if (held > WST_CHECKPOINT_MAX_TENSORS) {
            st = fail(err, errlen, WST_ERR_TOO_LARGE,
                      "%s: its shards hold more than %zu tensors, the limit "
                      "(counted up to %s)",
                      index, WST_CHECKPOINT_MAX_TENSORS, shard);
            goto out_close_dir;
        }
    }
    st = collect_tensors(c, err, errlen);
    if (st == WST_OK)
        st = cross_check(c, map, err, errlen);

out_close_dir:
    close(dirfd);
out_put_names:
    json_object_put(names);
out_put_root:
    json_object_put(root);
out_free_dir:
    free(dir);
    return st;
}

wst_status_t wst_checkpoint_open(const char *path, struct wst_checkpoint *out,
                                 char *err, size_t errlen)
{
    struct wst_checkpoint c = {0};
    struct stat sb;
    char *found = NULL;
    wst_status_t st;

    if (path == NULL || out == NULL)
        return fail(err, errlen, WST_ERR_INVALID, "NULL argument");
    memset(out, 0, sizeof(*out));
    if (stat(path, &sb) != 0)
        return fail(err, errlen, WST_ERR_IO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        found = join(path, index_name);
        if (found != NULL && access(found, F_OK) != 0) {
            free(found);
            found = join(path, single_name);
            if (found != NULL && access(found, F_OK) != 0) {
                free(found);
                return fail(err, errlen, WST_ERR_IO,
                            "%s: a directory with neither %s nor %s", path,
                            index_name, single_name);
            }
        }
        if (found == NULL)
            return fail(err, errlen, WST_ERR_NO_MEMORY, "out of memory");
        path = found;
    }
    if (ends_with(path, ".json")) {
        st = open_index(&c, path, err, errlen);
    } else {
        c.files = calloc(1, sizeof(*c.files));
        st = c.files == NULL
                 ? fail(err, errlen, WST_ERR_NO_MEMORY, "out of memory")
                 : wst_safetensors_open(AT_FDCWD, path, NULL, &c.files[0], err,
                                        errlen);
        if (st == WST_OK) {
            c.n_files = 1;
            st = collect_tensors(&c, err, errlen);
        }
    }
    free(found);
    if (st != WST_OK) {
        wst_checkpoint_close(&c);
        return st;
    }
    *out = c;
    return WST_OK;
}

void wst_checkpoint_close(struct wst_checkpoint *c)
{
    if (c == NULL)
        return;
    for (size_t f = 0; c->files != NULL && f < c->n_files; f++)
        wst_safetensors_close(&c->files[f]);
    free(c->files);
    free(c->tensors);
    free(c->index);
    memset(c, 0, sizeof(*c));
}
