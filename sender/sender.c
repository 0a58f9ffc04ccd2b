/* sender.c - the sender library's public API: parameters, create, push,
 * wait, what each link reports, destroy.
 *
 * push reconnects links that are idle or failed (link.c), waits until
 * every link has a plan, posts BEGIN of the new version to each, and then
 * computes the layer digests on the application thread (digests.c) while
 * the progress thread streams (pump.c). wait waits until every link has
 * its COMMIT, or one failed. sender_internal.h lists the other files.
 */
#include <wstream/sender.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "codec.h"
#include "device.h"
#include "heartbeat_msg.h"
#include "label.h"
#include "select.h"
#include "log.h"
#include "mover.h"
#include "sender_config.h"
#include "sender_internal.h"
#include "timed_wait.h"
#include "worker.h"

/* ---- public API ---- */

static wst_status_t parse_receiver(struct link *l, const char *spec)
{
    const char *colon = spec != NULL ? strrchr(spec, ':') : NULL;
    char *end = NULL;

    if (colon == NULL || colon == spec ||
        (size_t)(colon - spec) >= sizeof(l->host))
        return WST_ERR_INVALID;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (*end != '\0' || port == 0 || port > 65535)
        return WST_ERR_INVALID;
    memcpy(l->host, spec, (size_t)(colon - spec));
    l->host[colon - spec] = '\0';
    l->port = (uint16_t)port;
    snprintf(l->name, sizeof(l->name), "%s", spec);
    return WST_OK;
}

/* Shared memory may carry data unless UCX_TLS rules it out. */
static int shm_possible(void)
{
    const char *tls = getenv("UCX_TLS");
    static const char *const shm[] = {"sm",  "shm",  "posix", "sysv",
                                      "cma", "knem", "xpmem", "all"};

    if (tls == NULL || *tls == '\0')
        return 1;
    for (size_t i = 0; i < sizeof(shm) / sizeof(shm[0]); i++)
        if (strstr(tls, shm[i]) != NULL)
            return 1;
    return 0;
}

/* The table's defaults (sender_config.c), then what the caller set. */
static wst_status_t apply_params(struct wst_sender *s,
                                 const struct wst_sender_params *p)
{
    uint64_t f = p->field_mask;
    uint64_t need = WST_SENDER_PARAM_RANK | WST_SENDER_PARAM_WORLD_SIZE |
                    WST_SENDER_PARAM_RECEIVERS;
    struct wst_send_settings set;
    wst_status_t st;

    if ((f & need) != need || p->world_size == 0 || p->rank >= p->world_size ||
        p->n_receivers == 0 || p->receivers == NULL)
        return WST_ERR_INVALID;
    st = wst_send_settings_init(&set);
    if (st != WST_OK)
        return st;
    s->rank = p->rank;
    s->world_size = p->world_size;
    if ((f & WST_SENDER_PARAM_TIMEOUT) && p->timeout_s > 0)
        set.timeout_s = p->timeout_s;
    s->timeout_s = set.timeout_s;
    if ((f & WST_SENDER_PARAM_WINDOW) && p->window_bytes)
        set.window_bytes = p->window_bytes;
    if (f & WST_SENDER_PARAM_HEARTBEAT) {
        set.heartbeat_s = p->heartbeat_s;
        set.peer_timeout_s = p->peer_timeout_s;
    }
    if (wst_heartbeat_params_set(&s->heartbeat, set.heartbeat_s,
                                 set.peer_timeout_s) != WST_OK)
        return WST_ERR_INVALID;
    if ((f & WST_SENDER_PARAM_MOVER) && p->mover != NULL &&
        wst_config_set(wst_send_config, &set, "mover", p->mover, NULL, 0) !=
            WST_OK)
        return WST_ERR_INVALID;
    /* 0: auto */
    s->mover_pref = wst_mover_kind_parse(wst_send_mover_names[set.mover]);
    snprintf(s->log_name, sizeof(s->log_name), "sender[%u]", p->rank);
    if ((f & WST_SENDER_PARAM_LOG) && p->log_level >= 0 &&
        p->log_level <= WST_LOG_TRACE)
        set.log_level = p->log_level;
    wst_logger_init(&s->log, s->log_name, (enum wst_log_level)set.log_level);
    if (f & WST_SENDER_PARAM_LOG) {
        s->log.sink = p->log_fn;
        s->log.sink_arg = p->log_arg;
    }
    if (f & WST_SENDER_PARAM_PROGRESS) {
        s->progress_fn = p->progress_fn;
        s->progress_arg = p->progress_arg;
    }
    s->path_pref = (enum wst_path_pref)set.device_path;
    if ((f & WST_SENDER_PARAM_DEVICE_PATH) &&
        wst_path_pref_parse(p->device_path, &s->path_pref) != WST_OK) {
        WST_ERROR(&s->log,
                  "device_path '%s': want auto, direct, bounce or nccl",
                  p->device_path);
        return WST_ERR_INVALID;
    }
    if (f & WST_SENDER_PARAM_BOUNCE)
        set.bounce_bytes = p->bounce_bytes;
    uint64_t bounce = set.bounce_bytes;
    if (bounce / WST_BOUNCE_SLOT_BYTES < WST_BOUNCE_MIN_SLOTS ||
        bounce / WST_BOUNCE_SLOT_BYTES > WST_BOUNCE_MAX_SLOTS) {
        WST_ERROR(&s->log, "bounce_bytes %llu: want %u to %u slots of %llu MiB",
                  (unsigned long long)bounce, WST_BOUNCE_MIN_SLOTS,
                  WST_BOUNCE_MAX_SLOTS,
                  (unsigned long long)(WST_BOUNCE_SLOT_BYTES >> 20));
        return WST_ERR_INVALID;
    }
    s->bounce_slots = (uint32_t)(bounce / WST_BOUNCE_SLOT_BYTES);
    if (f & WST_SENDER_PARAM_DIGEST_THREADS)
        set.digest_threads = p->digest_threads;
    if (set.digest_threads > WST_DIGEST_THREADS_MAX) {
        WST_ERROR(&s->log, "digest_threads %llu: want 1 to %u (0: auto)",
                  (unsigned long long)set.digest_threads,
                  WST_DIGEST_THREADS_MAX);
        return WST_ERR_INVALID;
    }
    if ((f & WST_SENDER_PARAM_LANES) && p->lanes != 0)
        set.lanes = p->lanes;
    if (set.lanes == 0)
        set.lanes = wst_worker_lanes_auto();
    if (set.lanes > WST_WORKER_LANES_MAX) {
        WST_ERROR(&s->log, "lanes %llu: want 1 to %u (0: auto)",
                  (unsigned long long)set.lanes, WST_WORKER_LANES_MAX);
        return WST_ERR_INVALID;
    }
    s->lanes = (unsigned)set.lanes;
    if ((f & WST_SENDER_PARAM_LANE_DEVICES) &&
        wst_worker_lane_devices_copy(p->lane_devices, s->lane_devices,
                                     sizeof(s->lane_devices),
                                     &s->log) != WST_OK)
        return WST_ERR_INVALID;
    /* After the lanes: the window (0: auto) and the hashing keep up with
     * them (worker.h). */
    s->window = set.window_bytes != 0 ? set.window_bytes
                                      : wst_worker_window_auto(s->lanes);
    s->window_auto = set.window_bytes == 0;
    s->digest_threads = set.digest_threads != 0
                            ? (unsigned)set.digest_threads
                            : wst_worker_hash_threads_auto(s->lanes);
    if (f & WST_SENDER_PARAM_SHM_DATA)
        set.shm_data = p->shm_data != 0;
    s->data_peer_errors = !(set.shm_data && shm_possible());
    if ((f & WST_SENDER_PARAM_AUTH) && p->auth_secret_file != NULL &&
        p->auth_secret_file[0] != '\0') {
        char err[512];
        wst_status_t st = wst_auth_secret_load(p->auth_secret_file, &s->secret,
                                               err, sizeof(err));
        if (st != WST_OK) {
            WST_ERROR(&s->log, "%s", err);
            return st;
        }
    }
    return WST_OK;
}

wst_status_t wst_sender_create(const struct wst_sender_params *params,
                               wst_sender_t **sender_p)
{
    wst_status_t st = WST_ERR_NO_MEMORY;
    struct wst_sender *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return WST_ERR_NO_MEMORY;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    wst_ticket_lock_init(&s->dev_hash_lock);
    st = apply_params(s, params);
    if (st != WST_OK)
        goto err_free;
    st = wst_pool_create("wst-digest", s->digest_threads, &s->digest_pool);
    if (st != WST_OK)
        goto err_free;
    s->session = wst_now_ns() ^ ((uint64_t)params->rank << 48);
    s->links = calloc(params->n_receivers, sizeof(*s->links));
    if (s->links == NULL) {
        st = WST_ERR_NO_MEMORY;
        goto err_free;
    }
    s->n_links = params->n_receivers;
    for (size_t i = 0; i < s->n_links; i++) {
        s->links[i].s = s;
        st = parse_receiver(&s->links[i], params->receivers[i]);
        if (st != WST_OK) {
            WST_ERROR(&s->log, "bad receiver address '%s': want host:port",
                      params->receivers[i] ? params->receivers[i] : "");
            goto err_free_links;
        }
    }
    struct wst_worker_params wp = {
        .log = &s->log,
        .ops = {.arg = s,
                .message = wst_link_on_message,
                .conn_failed = wst_link_on_conn_failed},
        .heartbeat = s->heartbeat,
        .secret = &s->secret,
        .lanes = s->lanes,
        .lane_devices = s->lane_devices,
        /* A sender only puts: RMA also where a lane puts into the
         * receiver's device memory (worker.h). */
        .rma = WST_WORKER_RMA_INITIATOR,
    };
    st = wst_worker_create(&wp, &s->worker);
    if (st != WST_OK)
        goto err_free_links;
    /* A configured put mover needs puts in hardware (UCX 1.13 emulates
     * them elsewhere, and its emulated puts land after the fence). */
    const char *why = NULL;
    if (s->mover_pref == WST_MOVER_PUT &&
        !wst_worker_has_rma(s->worker, &why)) {
        WST_ERROR(&s->log,
                  "the put mover needs a transport that puts in hardware, "
                  "and this process has none (%s): use am or auto",
                  why);
        st = WST_ERR_UNSUPPORTED;
        wst_worker_destroy(s->worker);
        goto err_free_links;
    }
    WST_DEBUG(&s->log, "data endpoints %s peer-failure detection",
              s->data_peer_errors ? "with" : "without (shared memory)");
    *sender_p = s;
    return WST_OK;

err_free_links:
    free(s->links);
err_free:
    wst_pool_destroy(s->digest_pool);
    wst_auth_secret_release(&s->secret);
    wst_ticket_lock_destroy(&s->dev_hash_lock);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return st;
}

static void set_error(struct wst_sender *s, const struct link *l)
{
    snprintf(s->last_error, sizeof(s->last_error), "receiver %s: %s", l->name,
             l->error_msg);
}

/* Waits (lock held) until every link satisfies 'done' or one failed. */
static wst_status_t wait_links(struct wst_sender *s,
                               int (*done)(const struct link *, uint64_t),
                               uint64_t version, double timeout_s,
                               const char *what)
{
    uint64_t deadline = wst_deadline_ns(timeout_s);

    for (;;) {
        size_t n_done = 0;
        const struct link *failed = NULL;
        for (size_t i = 0; i < s->n_links; i++) {
            const struct link *l = &s->links[i];
            /* The cause, rather than a receiver of its engine group that
             * failed because of it. */
            if (l->state == LINK_FAILED &&
                (failed == NULL || (failed->aborted && !l->aborted)))
                failed = l;
            n_done += done(l, version) != 0;
        }
        if (failed != NULL) {
            set_error(s, failed);
            return failed->error != WST_OK ? failed->error
                                           : WST_ERR_PEER_FAILED;
        }
        if (n_done == s->n_links)
            return WST_OK;
        if (wst_now_ns() >= deadline) {
            for (size_t i = 0; i < s->n_links; i++)
                if (!done(&s->links[i], version)) {
                    snprintf(s->last_error, sizeof(s->last_error),
                             "receiver %s: timed out after %.1f s waiting "
                             "for %s",
                             s->links[i].name, timeout_s, what);
                    break;
                }
            WST_ERROR(&s->log, "%s", s->last_error);
            return WST_ERR_TIMED_OUT;
        }
        wst_cond_wait_s(&s->cond, &s->lock, 0.05);
    }
}

static int link_planned(const struct link *l, uint64_t version)
{
    (void)version;
    return l->state == LINK_PLANNED || l->state == LINK_COMMITTED;
}

static int link_committed(const struct link *l, uint64_t version)
{
    return l->state == LINK_COMMITTED && l->committed == version;
}

struct groups_call {
    struct wst_sender *s;
    wst_status_t status;
    char err[WST_ERROR_MSG_MAX];
};

static void check_groups(void *arg)
{
    struct groups_call *gc = arg;

    gc->status = wst_send_groups_check(gc->s, gc->err, sizeof(gc->err));
}

wst_status_t wst_sender_push(wst_sender_t *s, uint64_t version)
{
    return wst_sender_push_after(s, version, NULL);
}

/* Connects every receiver not connected yet (a failed link anew) and
 * waits for every plan and the engine groups' check: what a push does
 * before it begins. WST_ERR_BUSY while a version is in flight. */
static wst_status_t connect_links(wst_sender_t *s)
{
    wst_status_t st;

    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n_links; i++) {
        enum link_state ls = s->links[i].state;
        if (ls == LINK_BEGIN_SENT || ls == LINK_STREAMING) {
            snprintf(s->last_error, sizeof(s->last_error),
                     "receiver %s: version %llu is still in flight",
                     s->links[i].name, (unsigned long long)s->version);
            pthread_mutex_unlock(&s->lock);
            return WST_ERR_BUSY;
        }
        /* A link that failed before reconnects now: its old error must
         * not answer for this push (link_fail already closed it). */
        if (ls == LINK_FAILED) {
            s->links[i].state = LINK_IDLE;
            s->links[i].error = WST_OK;
        }
    }
    pthread_mutex_unlock(&s->lock);
    /* The previous push's digests (a failed refit's) end before any link
     * takes a new plan (digests.c). */
    wst_send_stop_digests(s, 1);
    for (size_t i = 0; i < s->n_links; i++)
        wst_worker_post(s->worker, wst_link_do_connect, &s->links[i]);
    pthread_mutex_lock(&s->lock);
    st = wait_links(s, link_planned, 0, s->timeout_s, "a plan");
    pthread_mutex_unlock(&s->lock);
    if (st != WST_OK)
        return st;
    /* The groups' numbering belongs to the progress thread, which reads it
     * whenever a link changes. */
    struct groups_call gc = {.s = s};
    st = wst_worker_call(s->worker, check_groups, &gc);
    if (st == WST_OK)
        st = gc.status;
    if (st != WST_OK) {
        snprintf(s->last_error, sizeof(s->last_error), "%s", gc.err);
        WST_ERROR(&s->log, "%s", s->last_error);
    }
    return st;
}

wst_status_t wst_sender_connect(wst_sender_t *s)
{
    s->last_error[0] = '\0';
    return connect_links(s);
}

uint64_t wst_sender_committed_version(wst_sender_t *s, size_t i)
{
    uint64_t v = 0;

    pthread_mutex_lock(&s->lock);
    if (i < s->n_links)
        v = s->links[i].held_version;
    pthread_mutex_unlock(&s->lock);
    return v;
}

wst_status_t wst_sender_committed_label(wst_sender_t *s, size_t i, char *label,
                                        size_t len)
{
    if (i >= s->n_links || label == NULL || len == 0)
        return WST_ERR_INVALID;
    pthread_mutex_lock(&s->lock);
    snprintf(label, len, "%s", s->links[i].held_label);
    pthread_mutex_unlock(&s->lock);
    return WST_OK;
}

wst_status_t wst_sender_push_after(wst_sender_t *s, uint64_t version,
                                   void *cuda_event)
{
    struct wst_push_params p = {.field_mask = WST_PUSH_CUDA_EVENT,
                                .cuda_event = cuda_event};

    return wst_sender_push_with(s, version, &p);
}

/* The label a push names: "" for none; WST_ERR_INVALID, in last_error,
 * for one that breaks the rule (label.h). */
static wst_status_t push_label(struct wst_sender *s,
                               const struct wst_push_params *p,
                               const char **label_p)
{
    char why[256];

    *label_p = "";
    if (p == NULL || !(p->field_mask & WST_PUSH_LABEL) || p->label == NULL)
        return WST_OK;
    if (wst_label_check(p->label, strlen(p->label), why, sizeof(why)) !=
        WST_OK) {
        snprintf(s->last_error, sizeof(s->last_error), "%s", why);
        WST_ERROR(&s->log, "push: %s", why);
        return WST_ERR_INVALID;
    }
    *label_p = p->label;
    return WST_OK;
}

wst_status_t wst_sender_push_with(wst_sender_t *s, uint64_t version,
                                  const struct wst_push_params *params)
{
    void *cuda_event =
        params != NULL && (params->field_mask & WST_PUSH_CUDA_EVENT)
            ? params->cuda_event
            : NULL;
    const char *label;
    wst_status_t st;

    s->last_error[0] = '\0';
    if (version == 0 || version <= s->version) {
        snprintf(s->last_error, sizeof(s->last_error),
                 "version %llu is not above the last pushed (%llu)",
                 (unsigned long long)version, (unsigned long long)s->version);
        return WST_ERR_INVALID;
    }
    st = push_label(s, params, &label);
    if (st != WST_OK)
        return st;
    st = connect_links(s);
    if (st != WST_OK)
        return st;
    /* Before the first copy or digest of this push is enqueued. */
    if (cuda_event != NULL && s->dev != NULL) {
        st = wst_send_device_after(s->dev, cuda_event);
        if (st != WST_OK) {
            snprintf(s->last_error, sizeof(s->last_error),
                     "cannot wait for the shards' ready event (%s)",
                     wst_status_string(st));
            return st;
        }
    }
    s->version = version;
    snprintf(s->label, sizeof(s->label), "%s", label);
    wst_send_log_unwanted(s, version);
    for (size_t i = 0; i < s->n_links; i++)
        wst_worker_post(s->worker, wst_link_do_begin, &s->links[i]);
    /* After the begins: a link resets its digests when it begins. */
    st = wst_send_start_digests(s, version);
    if (st != WST_OK) {
        snprintf(s->last_error, sizeof(s->last_error),
                 "cannot queue the layer digests (%s)", wst_status_string(st));
        return st;
    }
    return WST_OK;
}

/* Progress thread: one line per refit on what the bounce ring did. */
static void log_bounce(void *arg)
{
    struct wst_sender *s = arg;

    wst_send_device_log_bounce(s->dev, &s->log);
}

wst_status_t wst_sender_wait(wst_sender_t *s, double timeout_s)
{
    wst_status_t st;

    pthread_mutex_lock(&s->lock);
    st = wait_links(s, link_committed, s->version, timeout_s, "the commit");
    pthread_mutex_unlock(&s->lock);
    /* Committed, every digest was used. A receiver failed: the others may
     * still commit, so their layers are hashed (bounded: one pass over the
     * shards). Either way the caller may change its shards once this
     * returns. A timed-out wait leaves the refit running, and its hashing. */
    if (st != WST_ERR_TIMED_OUT)
        wst_send_stop_digests(s, 0);
    if (s->dev != NULL)
        wst_worker_call(s->worker, log_bounce, s);
    return st;
}

const char *wst_sender_last_error(wst_sender_t *s)
{
    return s->last_error;
}

uint64_t wst_sender_bytes_moved(const wst_sender_t *s)
{
    uint64_t total = 0;

    for (size_t i = 0; i < s->n_links; i++)
        total += s->links[i].bytes_moved;
    return total;
}

const char *wst_sender_lanes(const wst_sender_t *s, size_t i)
{
    return i < s->n_links && s->links[i].lanes[0] ? s->links[i].lanes : NULL;
}

const char *wst_sender_mover(const wst_sender_t *s, size_t i)
{
    if (i >= s->n_links || s->links[i].mover_kind == 0)
        return NULL;
    return wst_mover_kind_name(s->links[i].mover_kind);
}

static void close_links(void *arg)
{
    struct wst_sender *s = arg;

    for (size_t i = 0; i < s->n_links; i++) {
        struct link *l = &s->links[i];
        wst_link_close_mover(l);
        if (l->conn != NULL)
            wst_conn_close(l->conn);
        l->conn = NULL;
        wst_link_drop_plan(l);
        wst_link_drop_addresses(l);
    }
}

void wst_sender_destroy(wst_sender_t *s)
{
    if (s == NULL)
        return;
    wst_send_stop_digests(s, 1);
    wst_worker_call(s->worker, close_links, s);
    for (size_t i = 0; i < s->n_shards; i++)
        wst_worker_mem_unmap(s->worker, s->shards[i].memh);
    wst_send_device_stop(s->dev);  /* no copy completes into a link after it */
    wst_worker_destroy(s->worker); /* after it, no move calls back */
    wst_send_device_destroy(s->dev);
    wst_pool_destroy(s->digest_pool);
    free(s->digest_jobs);
    free(s->shards);
    wst_send_slices_free(s);
    free(s->links);
    wst_auth_secret_release(&s->secret);
    wst_ticket_lock_destroy(&s->dev_hash_lock);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
