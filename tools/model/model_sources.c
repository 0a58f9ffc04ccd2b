/* model_sources.c - reading wstream-model's measured inputs from files (see
 * model_sources.h). */
#include "model_sources.h"

#include <ctype.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errbuf.h"

#define LINE_MAX_LEN 8192
#define CSV_COLS_MAX 128

/* ---- key/value pairs ---------------------------------------------------- */

static void put(struct wst_rm_pairs *p, const char *key, size_t klen,
                const char *value, size_t vlen)
{
    size_t i;

    if (klen == 0 || klen >= sizeof(p->kv[0].key) ||
        vlen >= sizeof(p->kv[0].value))
        return;
    for (i = 0; i < p->n; i++)
        if (strlen(p->kv[i].key) == klen &&
            strncmp(p->kv[i].key, key, klen) == 0)
            break;
    if (i == p->n) {
        if (p->n == WST_RM_PAIRS_MAX)
            return;
        p->n++;
    }
    memcpy(p->kv[i].key, key, klen);
    p->kv[i].key[klen] = '\0';
    memcpy(p->kv[i].value, value, vlen);
    p->kv[i].value[vlen] = '\0';
}

const char *wst_rm_pairs_get(const struct wst_rm_pairs *p, const char *key)
{
    size_t i;

    for (i = 0; i < p->n; i++)
        if (strcmp(p->kv[i].key, key) == 0)
            return p->kv[i].value;
    return NULL;
}

/* "prog: k=v k=v ..." : every token holding '='. */
static void kv_line(struct wst_rm_pairs *p, const char *line)
{
    const char *s = strchr(line, ':') + 1;

    while (*s != '\0') {
        size_t n, k;
        while (*s == ' ')
            s++;
        n = strcspn(s, " \n");
        k = strcspn(s, "=");
        if (k < n)
            put(p, s, k, s + k + 1, n - k - 1);
        s += n;
        if (*s == '\n')
            break;
    }
}

/* Splits a CSV line into cols (quotes may hold commas; they are dropped).
 * Returns the column count. The pointers point into 'line', modified. */
static size_t csv_split(char *line, char **cols, size_t max)
{
    size_t n = 0;
    char *s = line, *w;

    line[strcspn(line, "\r\n")] = '\0';
    while (n < max) {
        int quoted = 0;
        cols[n++] = w = s;
        while (*s != '\0' && (quoted || *s != ',')) {
            if (*s == '"')
                quoted = !quoted;
            else
                *w++ = *s;
            s++;
        }
        if (*s == '\0') {
            *w = '\0';
            break;
        }
        *w = '\0';
        s++;
    }
    return n;
}

static int is_csv_prefixed(const char *line)
{
    return strncmp(line, "csv,", 4) == 0;
}

/* A line of key=value tokens after "name:" (wstream-bench's last line). */
static int is_kv_line(const char *line)
{
    const char *colon = strchr(line, ':');

    return strncmp(line, "wstream-", 8) == 0 && colon != NULL &&
           strchr(colon, '=') != NULL;
}

static int csv_candidate(const char *line, int prefixed_file)
{
    if (prefixed_file)
        return is_csv_prefixed(line);
    return line[0] != '#' && line[0] != '\n' && line[0] != '\r' &&
           line[0] != '\0' && strchr(line, ',') != NULL;
}

wst_status_t wst_rm_pairs_read(const char *path, struct wst_rm_pairs *p,
                               char *err, size_t errlen)
{
    static char line[LINE_MAX_LEN], header[LINE_MAX_LEN];
    char *hcols[CSV_COLS_MAX], *rcols[CSV_COLS_MAX];
    size_t nh = 0, nr, i, before = p->n;
    int have_header = 0, prefixed = 0, bad = 0;
    FILE *f = fopen(path, "r");

    if (f == NULL) {
        wst_errf(err, errlen, "%s: cannot read it", path);
        return WST_ERR_IO;
    }
    /* A file with "csv," lines (wstream-bench's output) is read for those
     * and its key=value line only; any other is a plain CSV. */
    while (fgets(line, sizeof(line), f) != NULL)
        if (is_csv_prefixed(line))
            prefixed = 1;
    rewind(f);
    while (!bad && fgets(line, sizeof(line), f) != NULL) {
        if (is_kv_line(line)) {
            kv_line(p, line);
            continue;
        }
        if (!csv_candidate(line, prefixed))
            continue;
        if (!have_header) {
            memcpy(header, line, sizeof(header));
            nh = csv_split(header, hcols, CSV_COLS_MAX);
            have_header = 1;
            continue;
        }
        nr = csv_split(line, rcols, CSV_COLS_MAX);
        if (nr > nh) {
            bad = 1;
            break;
        }
        for (i = prefixed ? 1 : 0; i < nr; i++)
            put(p, hcols[i], strlen(hcols[i]), rcols[i], strlen(rcols[i]));
        /* wstream-bench prints a header before each row; a plain CSV has
         * one header and rows appended under it (the last one wins). */
        if (prefixed)
            have_header = 0;
    }
    fclose(f);
    if (bad) {
        wst_errf(err, errlen, "%s: a CSV row has more columns than its header",
                 path);
        return WST_ERR_INVALID;
    }
    if (p->n == before) {
        wst_errf(err, errlen,
                 "%s: no key=value line and no CSV header with a row", path);
        return WST_ERR_INVALID;
    }
    return WST_OK;
}

/* ---- the GPU benchmark table -------------------------------------------- */

/* "| name | MB | ms | GB/s | vs ceil |" -> name (trimmed), MB, ms, GB/s. */
static int table_row(const char *line, char *name, size_t nlen, double *mb,
                     double *ms, double *gbs)
{
    const char *s = line + 1, *bar;
    size_t n;

    if (line[0] != '|')
        return -1;
    bar = strchr(s, '|');
    if (bar == NULL)
        return -1;
    while (s < bar && *s == ' ')
        s++;
    n = (size_t)(bar - s);
    while (n > 0 && s[n - 1] == ' ')
        n--;
    if (n >= nlen)
        n = nlen - 1;
    memcpy(name, s, n);
    name[n] = '\0';
    return sscanf(bar + 1, " %lf | %lf | %lf |", mb, ms, gbs) == 3 ? 0 : -1;
}

static void keep_min(double *slot, double v, char *row, size_t rlen,
                     const char *name)
{
    if (v > 0 && (*slot == 0 || v < *slot)) {
        *slot = v;
        if (row != NULL)
            snprintf(row, rlen, "%s", name);
    }
}

wst_status_t wst_rm_gpu_table_read(const char *path, struct wst_rm_gpu_table *g,
                                   char *err, size_t errlen)
{
    char line[1024], name[128];
    double mb, ms, gbs;
    FILE *f = fopen(path, "r");

    memset(g, 0, sizeof(*g));
    if (f == NULL) {
        wst_errf(err, errlen, "%s: cannot read it", path);
        return WST_ERR_IO;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (table_row(line, name, sizeof(name), &mb, &ms, &gbs) != 0 || ms <= 0)
            continue;
        /* A repack reads and writes the layer: MB counts it twice. */
        if (strncmp(name, "repack trtllm-bf16,", 19) == 0)
            keep_min(&g->repack_gbps, mb / 2 / ms, g->repack_row,
                     sizeof(g->repack_row), name);
        else if (strncmp(name, "digest", 6) == 0 && strstr(name, "cpu") == NULL)
            keep_min(&g->digest_gbps, gbs, g->digest_row, sizeof(g->digest_row),
                     name);
        else if (strncmp(name, "pinned ", 7) == 0 &&
                 strstr(name, "8 MiB chunks") != NULL)
            keep_min(&g->copy_gbps, gbs, NULL, 0, name);
    }
    fclose(f);
    if (g->repack_gbps == 0 && g->digest_gbps == 0 && g->copy_gbps == 0) {
        wst_errf(err, errlen,
                 "%s: no repack, digest or pinned copy row of the GPU "
                 "benchmark table",
                 path);
        return WST_ERR_INVALID;
    }
    return WST_OK;
}

/* ---- config.json and the safetensors index ------------------------------ */

static uint64_t jint(struct json_object *o, const char *key, uint64_t dflt)
{
    struct json_object *v;

    if (!json_object_object_get_ex(o, key, &v) ||
        (!json_object_is_type(v, json_type_int)))
        return dflt;
    return json_object_get_int64(v) > 0 ? (uint64_t)json_object_get_int64(v)
                                        : dflt;
}

static const char *jstr(struct json_object *o, const char *key)
{
    struct json_object *v;

    if (!json_object_object_get_ex(o, key, &v) ||
        !json_object_is_type(v, json_type_string))
        return "";
    return json_object_get_string(v);
}

wst_status_t wst_rm_config_read(const char *path, struct wst_rm_arch *a,
                                char *err, size_t errlen)
{
    struct json_object *root = json_object_from_file(path), *o = root, *tc;
    const char *type;

    if (root == NULL) {
        wst_errf(err, errlen, "%s: cannot read it as JSON", path);
        return WST_ERR_IO;
    }
    /* Multimodal configs keep the language model's dims in text_config. */
    if (json_object_object_get_ex(o, "text_config", &tc) &&
        json_object_is_type(tc, json_type_object))
        o = tc;
    memset(a, 0, sizeof(*a));
    type = jstr(o, "model_type");
    snprintf(a->name, sizeof(a->name), "%s", type[0] ? type : "config.json");
    a->hidden = jint(o, "hidden_size", 0);
    a->n_layers = jint(o, "num_hidden_layers", 0);
    a->vocab = jint(o, "vocab_size", 0);
    a->heads = jint(o, "num_attention_heads", 0);
    a->kv_heads = jint(o, "num_key_value_heads", a->heads);
    a->head_dim = jint(o, "head_dim", a->heads ? a->hidden / a->heads : 0);
    a->q_lora_rank = jint(o, "q_lora_rank", 0);
    a->kv_lora_rank = jint(o, "kv_lora_rank", 0);
    a->qk_nope_dim = jint(o, "qk_nope_head_dim", 0);
    a->qk_rope_dim = jint(o, "qk_rope_head_dim", 0);
    a->v_head_dim = jint(o, "v_head_dim", 0);
    a->dense_inter = jint(o, "intermediate_size", 0);
    a->first_dense = jint(o, "first_k_dense_replace", 0);
    a->n_experts = jint(o, "n_routed_experts", jint(o, "num_experts", 0));
    a->moe_inter = jint(o, "moe_intermediate_size", 0);
    a->shared_experts = jint(o, "n_shared_experts", 0);
    a->qk_norm = strncmp(type, "qwen3", 5) == 0;
    a->router_bias = strcmp(jstr(o, "topk_method"), "noaux_tc") == 0;
    json_object_put(root); /* o (root or a child of it) is not used after */
    if (a->hidden == 0 || a->n_layers == 0 || a->vocab == 0 || a->heads == 0) {
        wst_errf(err, errlen,
                 "%s: needs hidden_size, num_hidden_layers, vocab_size and "
                 "num_attention_heads",
                 path);
        return WST_ERR_INVALID;
    }
    return WST_OK;
}

wst_status_t wst_rm_index_read(const char *path, uint64_t *tensors,
                               uint64_t *total_size, char *err, size_t errlen)
{
    struct json_object *o = json_object_from_file(path), *map, *meta, *ts;

    *tensors = *total_size = 0;
    if (o == NULL) {
        wst_errf(err, errlen, "%s: cannot read it as JSON", path);
        return WST_ERR_IO;
    }
    if (!json_object_object_get_ex(o, "weight_map", &map) ||
        !json_object_is_type(map, json_type_object)) {
        json_object_put(o);
        wst_errf(err, errlen, "%s: no weight_map", path);
        return WST_ERR_INVALID;
    }
    *tensors = (uint64_t)json_object_object_length(map);
    if (json_object_object_get_ex(o, "metadata", &meta) &&
        json_object_object_get_ex(meta, "total_size", &ts) &&
        json_object_get_int64(ts) > 0)
        *total_size = (uint64_t)json_object_get_int64(ts);
    json_object_put(o);
    return WST_OK;
}
