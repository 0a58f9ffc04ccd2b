/* config.c - table-driven settings: defaults, WST_* environment, --flags.
 *
 * A table (config.h) describes every setting of a component. Values are
 * parsed from text into a temporary first and stored at the entry's offset
 * only when the whole value is valid, so a bad value leaves the old one in
 * place. Sources apply in order default < environment < command line; each
 * later source simply overwrites the field. Errors name the key as the user
 * wrote it ("--refits" or "WST_REFITS") and quote the bad value.
 *
 * String fields own their memory: a new value frees the previous one, and
 * wst_config_release frees the last. wst_config_defaults treats the settings
 * struct as fresh (it sets string fields to NULL without freeing them).
 *
 * A WST_CONFIG_LIKE entry is resolved where it is used (config_resolve):
 * its name and offset over the definition of the entry it is like.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <wstream/version.h>

#include "errbuf.h"

#define WST_CONFIG_ENV_MAX 128

/* The entry as it behaves: e itself, or for a WST_CONFIG_LIKE entry a copy
 * in *tmp of the entry it is like (followed to the end), with e's name,
 * offset and (if e has one) help. */
static const struct wst_config_entry *
config_resolve(const struct wst_config_entry *e, struct wst_config_entry *tmp)
{
    const struct wst_config_entry *def = e;

    if (e->type != WST_CONFIG_LIKE)
        return e;
    while (def->type == WST_CONFIG_LIKE && def->like != NULL)
        def = def->like;
    *tmp = *def;
    tmp->name = e->name;
    tmp->offset = e->offset;
    if (e->help != NULL)
        tmp->help = e->help;
    return tmp;
}

static void *config_field(void *settings, const struct wst_config_entry *e)
{
    return (char *)settings + e->offset;
}

static const void *config_cfield(const void *settings,
                                 const struct wst_config_entry *e)
{
    return (const char *)settings + e->offset;
}

/* Finds the entry whose name is the first 'len' bytes of 'name'. */
static const struct wst_config_entry *
config_find(const struct wst_config_entry *table, const char *name, size_t len)
{
    const struct wst_config_entry *e;

    for (e = table; e->name != NULL; e++) {
        if (strlen(e->name) == len && strncmp(e->name, name, len) == 0)
            return e;
    }
    return NULL;
}

/* "max-inflight" -> "WST_MAX_INFLIGHT"; 0 if it does not fit. */
static int config_env_name(const char *name, char *buf, size_t buflen)
{
    size_t i, n = strlen(name);

    if (n + 5 > buflen)
        return 0;
    memcpy(buf, "WST_", 4);
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        buf[4 + i] = c == '-' ? '_' : (char)toupper(c);
    }
    buf[4 + n] = '\0';
    return 1;
}

/* Decimal digits, then an optional k/m/g suffix (x1024^n); nothing else. */
static int config_parse_uint(const char *s, uint64_t *out, int *overflow)
{
    uint64_t v = 0;
    unsigned shift = 0;

    *overflow = 0;
    if (!isdigit((unsigned char)*s))
        return 0;
    for (; isdigit((unsigned char)*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            *overflow = 1;
        else
            v = v * 10 + d;
    }
    switch (*s) {
    case 'k':
    case 'K':
        shift = 10;
        s++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        s++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        s++;
        break;
    }
    if (*s != '\0')
        return 0;
    if (*overflow || (shift > 0 && v > (UINT64_MAX >> shift))) {
        *overflow = 1;
        return 0;
    }
    *out = v << shift;
    return 1;
}

static int config_parse_double(const char *s, double *out)
{
    char *end = NULL;
    double v;

    if (*s == '\0' || isspace((unsigned char)*s))
        return 0;
    errno = 0;
    v = strtod(s, &end);
    if (*end != '\0' || !isfinite(v))
        return 0;
    if (errno == ERANGE && (v > 1.0 || v < -1.0))
        return 0;
    *out = v;
    return 1;
}

static int config_parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"y", "yes", "true", "1", "on"};
    static const char *const no[] = {"n", "no", "false", "0", "off"};
    size_t i;

    for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return 1;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = 0;
            return 1;
        }
    }
    return 0;
}

static int config_parse_enum(const struct wst_config_entry *e, const char *s,
                             int *out)
{
    int i;

    for (i = 0; e->choices != NULL && e->choices[i] != NULL; i++) {
        if (strcmp(s, e->choices[i]) == 0) {
            *out = i;
            return 1;
        }
    }
    return 0;
}

static int config_nchoices(const struct wst_config_entry *e)
{
    int n = 0;

    while (e->choices != NULL && e->choices[n] != NULL)
        n++;
    return n;
}

/* "a, b, c" into buf (truncated if it does not fit). */
static void config_choices(const struct wst_config_entry *e, char *buf,
                           size_t buflen, const char *sep)
{
    size_t used = 0;
    int i, n;

    buf[0] = '\0';
    for (i = 0; e->choices != NULL && e->choices[i] != NULL; i++) {
        n = snprintf(buf + used, buflen - used, "%s%s", i > 0 ? sep : "",
                     e->choices[i]);
        if (n < 0 || (size_t)n >= buflen - used)
            return;
        used += (size_t)n;
    }
}

/* Parses 'value' for entry 'e' and stores it; 'key' names the source in
 * errors ("--refits", "WST_REFITS"). */
static wst_status_t config_apply(const struct wst_config_entry *entry,
                                 void *settings, const char *key,
                                 const char *value, char *err, size_t errlen)
{
    struct wst_config_entry tmp;
    const struct wst_config_entry *e = config_resolve(entry, &tmp);
    void *field = config_field(settings, e);
    char choices[256];
    uint64_t u;
    double d;
    int b, overflow;
    char *s;

    if (value == NULL) {
        wst_errf(err, errlen, "%s: missing value", key);
        return WST_ERR_CONFIG;
    }
    switch (e->type) {
    case WST_CONFIG_STRING:
        s = strdup(value);
        if (s == NULL) {
            wst_errf(err, errlen, "%s: out of memory", key);
            return WST_ERR_NO_MEMORY;
        }
        free(*(char **)field);
        *(char **)field = s;
        return WST_OK;
    case WST_CONFIG_UINT:
        if (!config_parse_uint(value, &u, &overflow)) {
            wst_errf(err, errlen, "%s: bad value '%s': %s", key, value,
                     overflow ? "out of range for a 64-bit unsigned integer"
                              : "expected an unsigned integer");
            return WST_ERR_CONFIG;
        }
        *(uint64_t *)field = u;
        return WST_OK;
    case WST_CONFIG_DOUBLE:
        if (!config_parse_double(value, &d)) {
            wst_errf(err, errlen, "%s: bad value '%s': expected a number", key,
                     value);
            return WST_ERR_CONFIG;
        }
        *(double *)field = d;
        return WST_OK;
    case WST_CONFIG_BOOL:
        if (!config_parse_bool(value, &b)) {
            wst_errf(err, errlen,
                     "%s: bad value '%s': expected yes/no, y/n, "
                     "true/false, on/off or 1/0",
                     key, value);
            return WST_ERR_CONFIG;
        }
        *(int *)field = b;
        return WST_OK;
    case WST_CONFIG_ENUM:
        if (!config_parse_enum(e, value, &b)) {
            config_choices(e, choices, sizeof(choices), ", ");
            wst_errf(err, errlen, "%s: bad value '%s': expected one of %s", key,
                     value, choices);
            return WST_ERR_CONFIG;
        }
        *(int *)field = b;
        return WST_OK;
    case WST_CONFIG_LIKE: /* like NULL: nothing to be like */
        break;
    }
    wst_errf(err, errlen, "%s: bad entry type %d", key, (int)e->type);
    return WST_ERR_INVALID;
}

/* The value an entry holds before any source applies. */
static void config_zero(const struct wst_config_entry *entry, void *settings)
{
    struct wst_config_entry tmp;
    const struct wst_config_entry *e = config_resolve(entry, &tmp);
    void *field = config_field(settings, e);

    switch (e->type) {
    case WST_CONFIG_STRING:
        *(char **)field = NULL;
        break;
    case WST_CONFIG_UINT:
        *(uint64_t *)field = 0;
        break;
    case WST_CONFIG_DOUBLE:
        *(double *)field = 0.0;
        break;
    case WST_CONFIG_BOOL:
    case WST_CONFIG_ENUM:
        *(int *)field = 0;
        break;
    case WST_CONFIG_LIKE:
        break;
    }
}

wst_status_t wst_config_init(const struct wst_config_entry *table,
                             void *settings, char *err, size_t errlen)
{
    const struct wst_config_entry *e, *r;
    struct wst_config_entry tmp;
    char key[WST_CONFIG_ENV_MAX + 16];
    wst_status_t status;

    for (e = table; e->name != NULL; e++)
        config_zero(e, settings);

    for (e = table; e->name != NULL; e++) {
        r = config_resolve(e, &tmp);
        if (r->default_value == NULL)
            continue;
        snprintf(key, sizeof(key), "%s (default)", e->name);
        status = config_apply(r, settings, key, r->default_value, err, errlen);
        if (status != WST_OK)
            return status;
    }
    return WST_OK;
}

wst_status_t wst_config_defaults(const struct wst_config_entry *table,
                                 void *settings, char *err, size_t errlen)
{
    const struct wst_config_entry *e;
    char env[WST_CONFIG_ENV_MAX];
    const char *value;
    wst_status_t status;

    status = wst_config_init(table, settings, err, errlen);
    if (status != WST_OK)
        return status;

    for (e = table; e->name != NULL; e++) {
        if (!config_env_name(e->name, env, sizeof(env))) {
            wst_errf(err, errlen, "%s: name too long", e->name);
            return WST_ERR_CONFIG;
        }
        value = getenv(env);
        if (value == NULL)
            continue;
        status = config_apply(e, settings, env, value, err, errlen);
        if (status != WST_OK)
            return status;
    }
    return WST_OK;
}

wst_status_t wst_config_set(const struct wst_config_entry *table,
                            void *settings, const char *name, const char *value,
                            char *err, size_t errlen)
{
    const struct wst_config_entry *e = config_find(table, name, strlen(name));
    char key[WST_CONFIG_ENV_MAX];

    snprintf(key, sizeof(key), "--%s", name);
    if (e == NULL) {
        wst_errf(err, errlen, "%s: unknown option", key);
        return WST_ERR_CONFIG;
    }
    return config_apply(e, settings, key, value, err, errlen);
}

/* Index 0 is the program name. "--" ends the flags (it is consumed); a lone
 * "-" or anything not starting with '-' is the first operand. A flag that is
 * not "--name[=value]" for a table entry is an error. Settings applied before
 * an error keep their new values. */
wst_status_t wst_config_parse_args(const struct wst_config_entry *table,
                                   void *settings, int argc, char **argv,
                                   int *next_p, char *err, size_t errlen)
{
    const struct wst_config_entry *e;
    struct wst_config_entry tmp;
    const char *arg, *name, *eq, *value;
    char key[WST_CONFIG_ENV_MAX];
    wst_status_t status;
    int i;

    for (i = 1; i < argc; i++) {
        arg = argv[i];
        if (strcmp(arg, "--") == 0) {
            i++;
            break;
        }
        if (arg[0] != '-' || arg[1] == '\0')
            break;
        if (arg[1] != '-') {
            wst_errf(err, errlen, "%s: unknown option", arg);
            return WST_ERR_CONFIG;
        }
        /* Handled by the caller (wst_config_has_flag), after parsing. */
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "--print-config") == 0)
            continue;
        name = arg + 2;
        eq = strchr(name, '=');
        e = config_find(table, name, eq ? (size_t)(eq - name) : strlen(name));
        snprintf(key, sizeof(key), "--%.*s",
                 (int)(eq ? (size_t)(eq - name) : strlen(name)), name);
        if (e == NULL) {
            wst_errf(err, errlen, "%s: unknown option", key);
            return WST_ERR_CONFIG;
        }
        if (eq != NULL) {
            value = eq + 1;
        } else if (config_resolve(e, &tmp)->type == WST_CONFIG_BOOL) {
            value = "y";
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            wst_errf(err, errlen, "%s: missing value", key);
            return WST_ERR_CONFIG;
        }
        status = config_apply(e, settings, key, value, err, errlen);
        if (status != WST_OK)
            return status;
    }
    if (next_p != NULL)
        *next_p = i;
    return WST_OK;
}

/* 'flag' may be given as "--help" or "help"; the scan stops at "--". */
int wst_config_has_flag(int argc, char **argv, const char *flag)
{
    const char *bare = strncmp(flag, "--", 2) == 0 ? flag + 2 : flag;
    int i;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return 0;
        if (strncmp(argv[i], "--", 2) == 0 && strcmp(argv[i] + 2, bare) == 0)
            return 1;
    }
    return 0;
}

static void config_print_value(const struct wst_config_entry *entry,
                               const void *settings, FILE *out)
{
    struct wst_config_entry tmp;
    const struct wst_config_entry *e = config_resolve(entry, &tmp);
    const void *field = config_cfield(settings, e);
    const char *s;
    int idx;

    switch (e->type) {
    case WST_CONFIG_STRING:
        s = *(char *const *)field;
        fputs(s != NULL ? s : "", out);
        break;
    case WST_CONFIG_UINT:
        fprintf(out, "%llu", (unsigned long long)*(const uint64_t *)field);
        break;
    case WST_CONFIG_DOUBLE:
        fprintf(out, "%g", *(const double *)field);
        break;
    case WST_CONFIG_BOOL:
        fputs(*(const int *)field ? "yes" : "no", out);
        break;
    case WST_CONFIG_ENUM:
        idx = *(const int *)field;
        fputs(idx >= 0 && idx < config_nchoices(e) ? e->choices[idx] : "?",
              out);
        break;
    case WST_CONFIG_LIKE:
        break;
    }
}

void wst_config_print(const struct wst_config_entry *table,
                      const void *settings, FILE *out)
{
    const struct wst_config_entry *e;

    for (e = table; e->name != NULL; e++) {
        fprintf(out, "%s = ", e->name);
        config_print_value(e, settings, out);
        fputc('\n', out);
    }
}

/* "--name VALUE" as shown in --help; enums list their choices. */
static void config_flag_text(const struct wst_config_entry *entry, char *buf,
                             size_t buflen)
{
    struct wst_config_entry tmp;
    const struct wst_config_entry *e = config_resolve(entry, &tmp);
    char choices[200];

    switch (e->type) {
    case WST_CONFIG_BOOL:
        snprintf(buf, buflen, "--%s[=yes|no]", e->name);
        break;
    case WST_CONFIG_ENUM:
        config_choices(e, choices, sizeof(choices), "|");
        snprintf(buf, buflen, "--%s %s", e->name, choices);
        break;
    case WST_CONFIG_UINT:
        snprintf(buf, buflen, "--%s N", e->name);
        break;
    case WST_CONFIG_DOUBLE:
        snprintf(buf, buflen, "--%s X", e->name);
        break;
    case WST_CONFIG_STRING:
    case WST_CONFIG_LIKE:
        snprintf(buf, buflen, "--%s VALUE", e->name);
        break;
    }
}

void wst_config_print_help(const struct wst_config_entry *table, FILE *out)
{
    const struct wst_config_entry *e, *r;
    struct wst_config_entry tmp;
    char flag[256], env[WST_CONFIG_ENV_MAX];
    int width = 0, n;

    for (e = table; e->name != NULL; e++) {
        config_flag_text(e, flag, sizeof(flag));
        n = (int)strlen(flag);
        width = n > width ? n : width;
    }
    for (e = table; e->name != NULL; e++) {
        r = config_resolve(e, &tmp);
        config_flag_text(e, flag, sizeof(flag));
        if (!config_env_name(e->name, env, sizeof(env)))
            env[0] = '\0';
        fprintf(out, "  %-*s   %s (default: %s, env %s)\n", width, flag,
                r->help != NULL ? r->help : "",
                r->default_value != NULL && r->default_value[0] != '\0'
                    ? r->default_value
                    : "none",
                env);
    }
}

void wst_config_release(const struct wst_config_entry *table, void *settings)
{
    const struct wst_config_entry *e;
    struct wst_config_entry tmp;
    char **field;

    for (e = table; e->name != NULL; e++) {
        if (config_resolve(e, &tmp)->type != WST_CONFIG_STRING)
            continue;
        field = config_field(settings, e);
        free(*field);
        *field = NULL;
    }
}

void wst_config_cli(const struct wst_config_entry *table, void *settings,
                    int argc, char **argv, const char *prog, const char *usage,
                    int *exit_p)
{
    char err[512];
    int next = argc;
    wst_status_t st;

    *exit_p = -1;
    if (wst_config_has_flag(argc, argv, "--help")) {
        printf("usage: %s\n\n", usage);
        wst_config_print_help(table, stdout);
        *exit_p = 0;
        return;
    }
    /* A table with a "version" setting of its own keeps the flag for it. */
    if (config_find(table, "version", 7) == NULL &&
        wst_config_has_flag(argc, argv, "--version")) {
        printf("%s %s\n", prog, WST_VERSION_STRING);
        *exit_p = 0;
        return;
    }
    st = wst_config_defaults(table, settings, err, sizeof(err));
    if (st == WST_OK)
        st = wst_config_parse_args(table, settings, argc, argv, &next, err,
                                   sizeof(err));
    if (st == WST_OK && next < argc) {
        snprintf(err, sizeof(err), "unexpected argument '%s'", argv[next]);
        st = WST_ERR_CONFIG;
    }
    if (st != WST_OK) {
        fprintf(stderr, "%s: %s\n", prog, err);
        *exit_p = 2;
        return;
    }
    if (wst_config_has_flag(argc, argv, "--print-config")) {
        wst_config_print(table, settings, stdout);
        *exit_p = 0;
    }
}
