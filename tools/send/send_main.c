/* send_main.c - wstream-send: hot-load a safetensors checkpoint from disk
 * into running agents as a new version.
 *
 *   wstream-send --receivers 10.0.0.7:7070,10.0.0.8:7070 \
 *                --weights-version 42 \
 *                [--label step-1200] \
 *                /models/qwen3-8b          (or model.safetensors, or
 *                                           model.safetensors.index.json)
 *
 * The checkpoint (tools/send/checkpoint.h: one file, or the shards of a
 * Hugging Face index) is mapped read-only and checked completely before
 * anything connects: a bad file is refused with a message naming the file
 * and the tensor, and nothing is pushed. Each tensor is then one full
 * (unsharded) host shard of sender rank 0 of a world of 1 (a per-expert
 * tensor: a slice of its grouped tensor, below), pointing into the
 * mapping; each agent plans what it wants from it, and the version is
 * pushed (with --label, labeled: common/label.h) and waited for until
 * every agent committed it. A 0-dim tensor
 * travels as shape [1] (wstream has no 0-dim tensors); a tensor with no
 * elements is not sent (it has no bytes and no agent can want it).
 *
 * Per-expert MoE tensors of Hugging Face checkpoints,
 * model.layers.{l}.mlp.experts.{e}.{gate_proj,up_proj,down_proj}.weight
 * ([I, H], [I, H], [H, I]), are sent as what agents want, the grouped
 * tensors model.layers.{l}.mlp.experts.{proj}.weight of [E, I, H],
 * [E, I, H], [E, H, I]: each expert's tensor is the slice [e:e+1, ...] of
 * its grouped tensor, still pointing into the mapping (experts.h). A gap
 * in a layer's expert ids, experts of one layer with different shapes or
 * dtypes, or a layer with both grouped and per-expert tensors is refused
 * as a malformed checkpoint (8).
 *
 * --version prints the program's version. Before 0.1.0 it named the
 * version to push: "--version N" (a decimal number after it) and
 * "--version=N" still do, with a warning, as --weights-version N.
 *
 * --dry-run stops after the checks and prints what would be sent.
 * --progress shows the refit on stderr: a bar redrawn in place on a
 * terminal, plain lines otherwise (progress.h).
 *
 * Exit status:
 *   0   every receiver committed the version (or --dry-run found the
 *       checkpoint good);
 *   2   bad usage (unknown flag, bad value, missing
 *       --receivers/--weights-version,
 *       a --label that breaks the rule);
 *   otherwise the negated wst_status_t (include/wstream/status.h) of the
 *   refusal or failure, e.g.
 *   15  a file cannot be read (WST_ERR_IO), including a missing shard;
 *   8   a malformed checkpoint (WST_ERR_INTEGRITY): truncated, bad header,
 *       offsets past the end, shape/bytes mismatch, overlap, bad index,
 *       per-expert tensors that do not make grouped ones (a missing
 *       expert, ...);
 *   23  valid safetensors wstream cannot carry (WST_ERR_UNSUPPORTED): a
 *       dtype without a wstream equivalent, > 8 dimensions, a long name;
 *   25  a header or index over its size limit (WST_ERR_TOO_LARGE);
 *   6, 5, 17  a receiver unreachable, timed out, failed;
 *   12, 13, 14  a receiver refused the plan: dtype or shape mismatch with
 *       what it wants, or a tensor it wants that the checkpoint lacks;
 *   26  the checkpoint holds no tensor with elements (WST_ERR_NOT_FOUND);
 *   28  the version is not above the one a receiver holds
 *       (WST_ERR_STALE_VERSION).
 * Errors are printed on stderr as "wstream-send: ..." (log records with
 * --log-format json), after the sender library's own error line.
 */
#include <wstream/sender.h>

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wstream/version.h>

#include "array.h"
#include "auth.h"
#include "checkpoint.h"
#include "clock.h"
#include "config.h"
#include "dtype.h"
#include "experts.h"
#include "label.h"
#include "log.h"
#include "progress.h"
#include "sender_config.h"
#include "worker.h"

#define MAX_RECEIVERS 1024
#define MAX_LAYER 65534u /* the planner refuses wants past it (planner.c) */

struct send_settings {
    char *checkpoint;
    char *receivers;
    uint64_t version;
    char *label;
    double timeout;
    double commit_timeout;
    int mover;
    uint64_t lanes;
    char *lane_devices;
    int progress;
    int dry_run;
    int log_level;
    int log_format;
    char *auth_secret_file;
};

static const char *const progress_choices[] = {"auto", "bar", "lines", "none",
                                               NULL};
/* The mode of each choice; "auto" is decided in create_sender. */
static const enum wst_progress_mode progress_modes[] = {
    WST_PROGRESS_NONE, WST_PROGRESS_BAR, WST_PROGRESS_LINES, WST_PROGRESS_NONE};
/* Indexes are enum wst_log_format values. */
static const char *const format_choices[] = {"text", "json", NULL};

static const struct wst_config_entry send_config[] = {
    {"checkpoint", WST_CONFIG_STRING, "",
     "a .safetensors file, a directory of shards with "
     "model.safetensors.index.json (or with one model.safetensors), or the "
     "index file itself; may also be given as the operand. Per-expert MoE "
     "tensors (model.layers.L.mlp.experts.E.PROJ.weight) are sent as "
     "slices of the grouped model.layers.L.mlp.experts.PROJ.weight",
     offsetof(struct send_settings, checkpoint), NULL, NULL},
    {"receivers", WST_CONFIG_STRING, "",
     "agents to push to, host:port[,host:port...]; required but with "
     "--dry-run",
     offsetof(struct send_settings, receivers), NULL, NULL},
    {"weights-version", WST_CONFIG_UINT, "0",
     "version to push, > 0 and above what the agents hold; required but "
     "with --dry-run",
     offsetof(struct send_settings, version), NULL, NULL},
    {"label", WST_CONFIG_STRING, "",
     "a name for the version that the agents keep with it (status, "
     "metrics, engine): at most 63 bytes of printable ASCII without spaces, "
     "e.g. step-1200 or a git id; empty: none",
     offsetof(struct send_settings, label), NULL, NULL},
    WST_CONFIG_LIKE_ENTRY("timeout", NULL,
                          offsetof(struct send_settings, timeout),
                          &wst_send_config[WST_SEND_CONFIG_TIMEOUT]),
    {"commit-timeout", WST_CONFIG_DOUBLE, "600",
     "seconds allowed, once streaming, until every agent committed",
     offsetof(struct send_settings, commit_timeout), NULL, NULL},
    WST_CONFIG_LIKE_ENTRY("mover", NULL, offsetof(struct send_settings, mover),
                          &wst_send_config[WST_SEND_CONFIG_MOVER]),
    {"lane-devices", WST_CONFIG_STRING, "",
     "network devices for the data lanes, as UCX names them, "
     "comma-separated (mlx5_0:1,mlx5_1:1): lane i uses entry i mod n only; "
     "empty: UCX chooses",
     offsetof(struct send_settings, lane_devices), NULL, NULL},
    WST_CONFIG_LIKE_ENTRY("lanes", NULL, offsetof(struct send_settings, lanes),
                          &wst_send_config[WST_SEND_CONFIG_LANES]),
    {"progress", WST_CONFIG_ENUM, "auto",
     "auto (a bar on a terminal, lines otherwise), bar, lines or none",
     offsetof(struct send_settings, progress), progress_choices, NULL},
    {"dry-run", WST_CONFIG_BOOL, "no",
     "check the checkpoint and print what would be sent; connect to nothing",
     offsetof(struct send_settings, dry_run), NULL, NULL},
    {"log-level", WST_CONFIG_ENUM, "warn", "error, warn, info, debug, trace",
     offsetof(struct send_settings, log_level), wst_log_level_names, NULL},
    {"log-format", WST_CONFIG_ENUM, "text",
     "text, or json: log records and progress lines as one object per line",
     offsetof(struct send_settings, log_format), format_choices, NULL},
    WST_CONFIG_LIKE_ENTRY("auth-secret-file",
                          "the deployment's secret (the agents' "
                          "--auth-secret-file); none: only agents that run "
                          "--insecure accept this sender",
                          offsetof(struct send_settings, auth_secret_file),
                          &wst_auth_config[WST_AUTH_CONFIG_SECRET_FILE]),
    WST_CONFIG_END,
};

static const char usage[] =
    "wstream-send [options] [--checkpoint] CHECKPOINT --receivers "
    "HOST:PORT[,...] --weights-version N\n\n"
    "exit codes: 0 every receiver committed (or --dry-run found the\n"
    "  checkpoint good); 2 bad usage; otherwise the negated wst_status_t\n"
    "  of the refusal or failure, e.g. 15 a file cannot be read, 8 a\n"
    "  malformed checkpoint, 23 a dtype or shape wstream cannot carry,\n"
    "  6/5/17 a receiver unreachable/timed out/failed, 12/13/14 a receiver\n"
    "  refused the plan (dtype, shape, a tensor missing), 28 a stale version";

struct send {
    struct send_settings set;
    struct wst_log_stream log_stream;
    char **receivers; /* owned, from --receivers */
    size_t n_receivers, receivers_cap;
    struct wst_checkpoint ckpt;
    struct wst_send_tensor *tensors; /* owned: the ones sent */
    size_t n_tensors;
    size_t n_empty;                  /* not sent: no elements */
    size_t n_scalar;                 /* sent as shape [1] */
    struct wst_send_experts experts; /* per-expert tensors, grouped */
    uint32_t n_layers;
    uint64_t *layer_bytes; /* owned [n_layers] */
    wst_sender_t *sender;
    wst_progress_t *progress;
};

/* "4.24 MB": decimal units, as the rates are in GB/s. */
static const char *human(uint64_t bytes, char *buf, size_t len)
{
    if (bytes >= 1000000000ull)
        snprintf(buf, len, "%.2f GB", bytes / 1e9);
    else if (bytes >= 1000000ull)
        snprintf(buf, len, "%.2f MB", bytes / 1e6);
    else if (bytes >= 1000ull)
        snprintf(buf, len, "%.2f kB", bytes / 1e3);
    else
        snprintf(buf, len, "%llu bytes", (unsigned long long)bytes);
    return buf;
}

/* Our own messages: "wstream-send: ..." in text, log records in json. */
static void say(const struct send *s, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void say(const struct send *s, int level, const char *fmt, ...)
{
    char line[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (s->set.log_format == WST_LOG_FORMAT_JSON)
        wst_log_emit(stderr, WST_LOG_FORMAT_JSON, "send", level, line);
    else
        fprintf(stderr, "wstream-send: %s\n", line);
}

/* A decimal number, as the old "--version N" took. */
static int is_number(const char *v)
{
    return v[0] != '\0' && strspn(v, "0123456789") == strlen(v);
}

/* --version alone asks for the program's version (returns 1). Its old
 * meaning, the version to push, stays for "--version N" with a decimal
 * number after it and for "--version=VALUE": copied into 'args' (2 * argc
 * + 1 entries, the strings borrowed from argv; *n_p of them used) as
 * --weights-version, with a warning. After "--" nothing is a flag. */
static int version_flag(int argc, char **argv, char **args, int *n_p)
{
    int asked = 0, flags = 1, n = 0;

    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (i > 0 && flags && strcmp(a, "--") == 0) {
            flags = 0;
        } else if (i > 0 && flags && strcmp(a, "--version") == 0 &&
                   i + 1 < argc && is_number(argv[i + 1])) {
            fprintf(stderr, "wstream-send: warning: --version N is "
                            "deprecated, use --weights-version N\n");
            args[n++] = "--weights-version";
            continue;
        } else if (i > 0 && flags && strncmp(a, "--version=", 10) == 0) {
            fprintf(stderr, "wstream-send: warning: --version=N is "
                            "deprecated, use --weights-version=N\n");
            args[n++] = "--weights-version";
            args[n++] = argv[i] + 10;
            continue;
        } else if (i > 0 && flags && strcmp(a, "--version") == 0) {
            asked = 1;
        }
        args[n++] = argv[i];
    }
    args[n] = NULL;
    *n_p = n;
    return asked;
}

/* parse_cli's work, on argv as version_flag rewrote it. */
static void parse_args(struct send *s, int argc, char **argv, int version_asked,
                       int *exit_p)
{
    char err[512];
    int next = argc, more = 0;
    wst_status_t st;

    *exit_p = 0;
    if (wst_config_has_flag(argc, argv, "--help")) {
        printf("usage: %s\n\n", usage);
        wst_config_print_help(send_config, stdout);
        return;
    }
    if (version_asked) {
        printf("wstream-send %s\n", WST_VERSION_STRING);
        return;
    }
    st = wst_config_defaults(send_config, &s->set, err, sizeof(err));
    if (st == WST_OK)
        st = wst_config_parse_args(send_config, &s->set, argc, argv, &next, err,
                                   sizeof(err));
    if (st == WST_OK && next < argc) {
        st = wst_config_set(send_config, &s->set, "checkpoint", argv[next], err,
                            sizeof(err));
        /* Flags may follow the operand: argv[next] plays argv[0]. */
        if (st == WST_OK)
            st = wst_config_parse_args(send_config, &s->set, argc - next,
                                       argv + next, &more, err, sizeof(err));
        if (st == WST_OK && more < argc - next) {
            snprintf(err, sizeof(err), "unexpected argument '%s'",
                     argv[next + more]);
            st = WST_ERR_CONFIG;
        }
    }
    if (st != WST_OK) {
        fprintf(stderr, "wstream-send: %s\n", err);
        *exit_p = 2;
        return;
    }
    if (wst_config_has_flag(argc, argv, "--print-config")) {
        wst_config_print(send_config, &s->set, stdout);
        return;
    }
    *exit_p = -1;
}

/* The shared command-line front (wst_config_cli), plus one operand: the
 * checkpoint, and --version (version_flag). *exit_p is -1 to go on, else
 * the code to exit with. */
static void parse_cli(struct send *s, int argc, char **argv, int *exit_p)
{
    char **args = calloc(2 * (size_t)argc + 1, sizeof(*args));
    int n = 0, asked;

    if (args == NULL) {
        fprintf(stderr, "wstream-send: out of memory\n");
        *exit_p = 2;
        return;
    }
    asked = version_flag(argc, argv, args, &n);
    parse_args(s, n, args, asked, exit_p);
    free(args);
}

/* "host:port": a non-empty host and a port in 1..65535. */
static int valid_receiver(const char *r)
{
    const char *colon = strrchr(r, ':');
    char *end = NULL;

    if (colon == NULL || colon == r || colon[1] < '0' || colon[1] > '9')
        return 0;
    errno = 0;
    unsigned long port = strtoul(colon + 1, &end, 10);
    return errno == 0 && *end == '\0' && port >= 1 && port <= 65535;
}

static wst_status_t split_receivers(struct send *s)
{
    const char *at = s->set.receivers;

    for (;;) {
        size_t len = strcspn(at, ",");
        char *r = strndup(at, len);
        if (r == NULL || !valid_receiver(r) ||
            s->n_receivers == MAX_RECEIVERS ||
            wst_array_grow(&s->receivers, &s->receivers_cap, s->n_receivers + 1,
                           sizeof(*s->receivers)) != WST_OK) {
            fprintf(stderr,
                    "wstream-send: --receivers: bad value '%s': expected "
                    "host:port[,host:port...] (at most %d)\n",
                    s->set.receivers, MAX_RECEIVERS);
            free(r);
            return WST_ERR_CONFIG;
        }
        s->receivers[s->n_receivers++] = r;
        if (at[len] == '\0')
            return WST_OK;
        at += len + 1;
    }
}

/* What the table cannot express; says what is wrong on stderr. */
static wst_status_t check_settings(struct send *s)
{
    if (s->set.checkpoint[0] == '\0') {
        fprintf(stderr,
                "wstream-send: no checkpoint given (the operand, or "
                "--checkpoint)\nusage: %s\n",
                usage);
        return WST_ERR_CONFIG;
    }
    if (s->set.timeout <= 0 || s->set.commit_timeout <= 0) {
        fprintf(stderr, "wstream-send: --timeout and --commit-timeout must "
                        "be positive\n");
        return WST_ERR_CONFIG;
    }
    if (s->set.lanes > WST_WORKER_LANES_MAX) {
        fprintf(stderr,
                "wstream-send: --lanes: %llu is not in 0..%d (0: auto)\n",
                (unsigned long long)s->set.lanes, WST_WORKER_LANES_MAX);
        return WST_ERR_CONFIG;
    }
    char why[256];
    if (wst_label_check(s->set.label, strlen(s->set.label), why, sizeof(why)) !=
        WST_OK) {
        fprintf(stderr, "wstream-send: --label: %s\n", why);
        return WST_ERR_CONFIG;
    }
    if (s->set.dry_run)
        return WST_OK;
    if (s->set.receivers[0] == '\0' || s->set.version == 0) {
        fprintf(stderr,
                "wstream-send: --receivers and --weights-version (> 0) are "
                "required\nusage: %s\n",
                usage);
        return WST_ERR_CONFIG;
    }
    return split_receivers(s);
}

/* The tensors to send, their progress layers and each layer's bytes
 * (layers as the planner counts them: planner.h). */
static wst_status_t prepare_tensors(struct send *s)
{
    const struct wst_checkpoint *c = &s->ckpt;
    uint32_t top = 0;
    int has_layers = 0;

    s->tensors = calloc(c->n_tensors ? c->n_tensors : 1, sizeof(*s->tensors));
    if (s->tensors == NULL)
        return WST_ERR_NO_MEMORY;
    for (size_t i = 0; i < c->n_tensors; i++) {
        const struct wst_st_tensor *t = c->tensors[i];
        struct wst_send_tensor *x = &s->tensors[s->n_tensors];
        if (t->begin == t->end) {
            s->n_empty++;
            continue;
        }
        x->t = t;
        x->ndim = t->ndim;
        memcpy(x->shape, t->shape, sizeof(x->shape));
        if (t->ndim == 0) {
            x->ndim = 1;
            x->shape[0] = 1;
            s->n_scalar++;
        }
        memcpy(x->stop, x->shape, sizeof(x->stop)); /* the whole tensor */
        x->layer = wst_tensor_layer(t->name);
        if (x->layer != UINT32_MAX) {
            has_layers = 1;
            top = x->layer > top ? x->layer : top;
        }
        s->n_tensors++;
    }
    /* No receiver could want such a tensor (the planner refuses it), and
     * the progress table is sized by the highest layer: refuse it here,
     * before connecting. */
    if (has_layers && top > MAX_LAYER) {
        say(s, WST_LOG_ERROR,
            "%s: a tensor of layer %u: wstream plans layers 0..%u only; "
            "nothing was sent",
            s->set.checkpoint, top, MAX_LAYER);
        return WST_ERR_UNSUPPORTED;
    }
    char err[1024];
    wst_status_t st = wst_send_group_experts(s->tensors, s->n_tensors,
                                             &s->experts, err, sizeof(err));
    if (st != WST_OK) {
        say(s, WST_LOG_ERROR, "%s: %s; nothing was sent", s->set.checkpoint,
            err);
        return st;
    }
    s->n_layers = has_layers ? top + 2 : 1;
    s->layer_bytes = calloc(s->n_layers, sizeof(*s->layer_bytes));
    if (s->layer_bytes == NULL)
        return WST_ERR_NO_MEMORY;
    for (size_t i = 0; i < s->n_tensors; i++) {
        struct wst_send_tensor *x = &s->tensors[i];
        if (x->layer == UINT32_MAX)
            x->layer = s->n_layers - 1;
        s->layer_bytes[x->layer] += x->t->end - x->t->begin;
    }
    return WST_OK;
}

/* --dry-run: what was checked and what would be sent. */
static void print_summary(const struct send *s)
{
    const struct wst_checkpoint *c = &s->ckpt;
    char size[32];

    printf("wstream-send: checkpoint %s: %zu file%s%s%s\n", s->set.checkpoint,
           c->n_files, c->n_files == 1 ? "" : "s",
           c->index != NULL ? ", index " : "",
           c->index != NULL ? c->index : "");
    printf("  tensors: %zu to send", s->n_tensors);
    if (s->n_empty > 0)
        printf(", %zu with no elements (not sent)", s->n_empty);
    if (s->n_scalar > 0)
        printf(", %zu 0-dim (sent as shape [1])", s->n_scalar);
    printf("\n  bytes: %llu (%s)\n", (unsigned long long)c->bytes,
           human(c->bytes, size, sizeof(size)));
    if (s->n_layers > 1)
        printf("  layers: %u, and the global tensors\n", s->n_layers - 1);
    else
        printf("  layers: none, only global tensors\n");
    if (s->experts.n_slices > 0)
        printf("  experts: %zu per-expert tensors of %zu layer%s, sent as "
               "slices of %zu grouped tensors\n",
               s->experts.n_slices, s->experts.n_layers,
               s->experts.n_layers == 1 ? "" : "s", s->experts.n_grouped);
    for (int d = 1; wst_dtype_is_valid(d); d++) {
        size_t n = 0;
        uint64_t bytes = 0;
        for (size_t i = 0; i < s->n_tensors; i++)
            if ((int)s->tensors[i].t->dtype == d) {
                n++;
                bytes += s->tensors[i].t->end - s->tensors[i].t->begin;
            }
        if (n > 0)
            printf("  dtype %s (%s): %zu tensor%s, %llu bytes\n",
                   wst_dtype_name((enum wst_dtype)d),
                   wst_safetensors_dtype_name((enum wst_dtype)d), n,
                   n == 1 ? "" : "s", (unsigned long long)bytes);
    }
    printf("wstream-send: dry run: the checkpoint is good; nothing was "
           "sent\n");
}

static wst_status_t create_sender(struct send *s)
{
    /* A bar redrawn in place only makes sense on a terminal. */
    enum wst_progress_mode mode = s->set.progress != 0
                                      ? progress_modes[s->set.progress]
                                  : isatty(STDERR_FILENO) ? WST_PROGRESS_BAR
                                                          : WST_PROGRESS_LINES;
    struct wst_progress_params pp = {
        .mode = mode,
        .out = stderr,
        .format = (enum wst_log_format)s->set.log_format,
        .receivers = (const char *const *)s->receivers,
        .n_receivers = s->n_receivers,
        .n_layers = s->n_layers,
        .layer_bytes = s->layer_bytes,
        .version = s->set.version,
    };
    wst_status_t st = wst_progress_create(&pp, &s->progress);
    if (st != WST_OK)
        return st;
    struct wst_sender_params sp = {
        .field_mask = WST_SENDER_PARAM_RANK | WST_SENDER_PARAM_WORLD_SIZE |
                      WST_SENDER_PARAM_RECEIVERS | WST_SENDER_PARAM_TIMEOUT |
                      WST_SENDER_PARAM_MOVER | WST_SENDER_PARAM_LOG |
                      WST_SENDER_PARAM_PROGRESS | WST_SENDER_PARAM_AUTH |
                      WST_SENDER_PARAM_LANES | WST_SENDER_PARAM_LANE_DEVICES,
        .rank = 0,
        .world_size = 1,
        .receivers = (const char *const *)s->receivers,
        .n_receivers = s->n_receivers,
        .timeout_s = s->set.timeout,
        .mover = wst_send_mover_names[s->set.mover],
        .lanes = (unsigned)s->set.lanes,
        .lane_devices = s->set.lane_devices,
        .log_level = s->set.log_level,
        .log_fn = wst_log_stream_sink,
        .log_arg = &s->log_stream,
        .progress_fn = wst_progress_layer,
        .progress_arg = s->progress,
        .auth_secret_file = s->set.auth_secret_file,
    };
    st = wst_sender_create(&sp, &s->sender);
    if (st != WST_OK) {
        say(s, WST_LOG_ERROR, "cannot create the sender: %s",
            wst_status_string(st));
        return st;
    }
    return WST_OK;
}

/* Every tensor as a host shard pointing into the mapping: the whole of
 * its tensor, or its slice of a grouped expert tensor. */
static wst_status_t register_tensors(struct send *s)
{
    for (size_t i = 0; i < s->n_tensors; i++) {
        const struct wst_send_tensor *x = &s->tensors[i];
        struct wst_shard sh = {
            .name = wst_send_tensor_name(x),
            .data = x->t->data,
            .mem_type = WST_MEM_HOST,
            .dtype = x->t->dtype,
            .ndim = x->ndim,
            .shape = x->shape,
            .box_start = x->start,
            .box_stop = x->stop,
            .flat = 0,
        };
        wst_status_t st = wst_sender_register(s->sender, &sh);
        if (st != WST_OK) {
            say(s, WST_LOG_ERROR, "tensor '%s': cannot register it: %s",
                x->t->name, wst_status_string(st));
            return st;
        }
    }
    return WST_OK;
}

/* Pushes the version and waits for every receiver to commit it. */
static wst_status_t push(struct send *s)
{
    uint64_t v = s->set.version;
    wst_status_t st;
    double t0, secs;

    st = wst_progress_start(s->progress);
    if (st != WST_OK)
        return st;
    t0 = wst_now_s();
    struct wst_push_params pp = {.field_mask = WST_PUSH_LABEL,
                                 .label = s->set.label};
    st = wst_sender_push_with(s->sender, v, &pp);
    if (st == WST_OK)
        st = wst_sender_wait(s->sender, s->set.commit_timeout);
    secs = wst_now_s() - t0;
    wst_progress_stop(s->progress, st == WST_OK);
    if (st != WST_OK) {
        const char *why = wst_sender_last_error(s->sender);
        say(s, WST_LOG_ERROR, "version %llu not committed: %s%s%s",
            (unsigned long long)v, wst_status_string(st),
            why[0] != '\0' ? ": " : "", why);
        return st;
    }
    uint64_t moved = wst_sender_bytes_moved(s->sender);
    char size[32], sent[32];
    printf("wstream-send: version %llu%s%s%s committed by %zu receiver%s: %zu "
           "tensors, %s in %.3f s; %s moved, %.2f GB/s\n",
           (unsigned long long)v, s->set.label[0] != '\0' ? " (" : "",
           s->set.label, s->set.label[0] != '\0' ? ")" : "", s->n_receivers,
           s->n_receivers == 1 ? "" : "s", s->n_tensors,
           human(s->ckpt.bytes, size, sizeof(size)), secs,
           human(moved, sent, sizeof(sent)),
           secs > 0 ? moved / secs / 1e9 : 0.0);
    fflush(stdout);
    return WST_OK;
}

static void teardown(struct send *s)
{
    /* The sender calls into the progress display until it is gone. */
    wst_sender_destroy(s->sender);
    wst_progress_destroy(s->progress);
    free(s->layer_bytes);
    wst_send_tensors_release(s->tensors, s->n_tensors);
    free(s->tensors);
    wst_checkpoint_close(&s->ckpt);
    for (size_t i = 0; i < s->n_receivers; i++)
        free(s->receivers[i]);
    free(s->receivers);
    wst_config_release(send_config, &s->set);
}

int main(int argc, char **argv)
{
    struct send s;
    char err[1024];
    wst_status_t st;
    int rc;

    memset(&s, 0, sizeof(s));
    parse_cli(&s, argc, argv, &rc);
    if (rc < 0 && check_settings(&s) != WST_OK)
        rc = 2;
    if (rc >= 0)
        goto out_teardown;
    signal(SIGPIPE, SIG_IGN);
    s.log_stream = (struct wst_log_stream){
        .out = stderr,
        .format = (enum wst_log_format)s.set.log_format,
        .name = "send",
    };
    st = wst_checkpoint_open(s.set.checkpoint, &s.ckpt, err, sizeof(err));
    if (st != WST_OK) {
        say(&s, WST_LOG_ERROR, "%s; nothing was sent", err);
        goto out_status;
    }
    st = prepare_tensors(&s);
    if (st != WST_OK)
        goto out_status;
    if (s.set.dry_run) {
        print_summary(&s);
        rc = 0;
        goto out_teardown;
    }
    if (s.n_tensors == 0) {
        say(&s, WST_LOG_ERROR, "%s: no tensor with elements; nothing to send",
            s.set.checkpoint);
        st = WST_ERR_NOT_FOUND;
        goto out_status;
    }
    st = create_sender(&s);
    if (st == WST_OK)
        st = register_tensors(&s);
    if (st == WST_OK)
        st = push(&s);

out_status:
    rc = st == WST_OK ? 0 : -(int)st;
out_teardown:
    teardown(&s);
    return rc;
}
