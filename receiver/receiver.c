/* receiver.c - the receiver library's public API: create, configure,
 * start, state, destroy; and the state API threads read. */
#include <wstream/receiver.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "codec.h"
#include "device.h"
#include "dtype.h"
#include "experts.h"
#include "heartbeat_msg.h"
#include "jobq.h"
#include "label.h"
#include "log.h"
#include "planner.h"
#include "receiver_config.h"
#include "receiver_internal.h"
#include "landing.h"
#include "timed_wait.h"
#include "worker.h"

void wst_recv_set_state_reason(struct wst_receiver *r, const char *reason)
{
    snprintf(r->state.reason, sizeof(r->state.reason), "%s", reason);
}

void wst_recv_publish(struct wst_receiver *r,
                      void (*fn)(struct wst_receiver *, void *), void *arg)
{
    pthread_mutex_lock(&r->lock);
    fn(r, arg);
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

/* The table's defaults (receiver_config.c), then what the caller set. */
static wst_status_t apply_params(struct wst_receiver *r,
                                 const struct wst_receiver_params *p)
{
    uint64_t f = p->field_mask;
    struct wst_recv_settings set;
    wst_status_t st;

    st = wst_recv_settings_init(&set);
    if (st != WST_OK)
        return st;
    r->rank = (f & WST_RECEIVER_PARAM_RANK) ? p->rank : 0;
    snprintf(r->listen_host, sizeof(r->listen_host), "%s",
             (f & WST_RECEIVER_PARAM_LISTEN) && p->listen_host ? p->listen_host
                                                               : "0.0.0.0");
    r->listen_port = (f & WST_RECEIVER_PARAM_LISTEN) ? p->listen_port : 0;
    if ((f & WST_RECEIVER_PARAM_TIMEOUT) && p->timeout_s > 0)
        set.timeout_s = p->timeout_s;
    r->timeout_s = set.timeout_s;
    if ((f & WST_RECEIVER_PARAM_MOVER) && p->mover != NULL &&
        wst_config_set(wst_recv_config, &set, "mover", p->mover, NULL, 0) !=
            WST_OK)
        return WST_ERR_INVALID;
    r->allow_put = strcmp(wst_recv_mover_names[set.mover], "am") != 0;
    r->put_wanted = r->allow_put;
    if (f & WST_RECEIVER_PARAM_VERIFY) {
        set.verify = p->verify != 0;
        if (p->verify_threads > WST_RECV_VERIFY_THREADS_MAX)
            return WST_ERR_INVALID;
        if (p->verify_threads != 0)
            set.verify_threads = p->verify_threads;
    }
    r->verify = set.verify;
    if (f & WST_RECEIVER_PARAM_HEARTBEAT) {
        set.heartbeat_s = p->heartbeat_s;
        set.peer_timeout_s = p->peer_timeout_s;
    }
    if (wst_heartbeat_params_set(&r->heartbeat, set.heartbeat_s,
                                 set.peer_timeout_s) != WST_OK)
        return WST_ERR_INVALID;
    if (f & WST_RECEIVER_PARAM_HOOKS)
        r->hooks = p->hooks;
    if (f & WST_RECEIVER_PARAM_STAGING_SLOTS) {
        if (p->staging_slots == 0 ||
            p->staging_slots > WST_RECV_STAGING_SLOTS_MAX)
            return WST_ERR_INVALID;
        set.staging_slots = p->staging_slots;
    }
    wst_moe_init(&r->moe, (uint32_t)set.staging_slots);
    if (f & WST_RECEIVER_PARAM_LIMITS) {
        if (p->max_manifest_entries > WST_MAX_HAVES ||
            p->max_manifest_bytes == 0 || p->max_unranked_peers == 0)
            return WST_ERR_INVALID;
        set.max_manifest_entries = p->max_manifest_entries;
        set.max_manifest_bytes = p->max_manifest_bytes;
        set.max_unranked = p->max_unranked_peers;
    }
    r->limits.entries = set.max_manifest_entries;
    r->limits.bytes = set.max_manifest_bytes;
    r->limits.unranked = set.max_unranked;
    r->group_size = 1;
    if ((f & WST_RECEIVER_PARAM_GROUP) && p->group != NULL &&
        p->group[0] != '\0') {
        if (strlen(p->group) >= sizeof(r->group) || p->group_size < 1 ||
            p->group_size > WST_GROUP_SIZE_MAX ||
            p->group_member >= p->group_size)
            return WST_ERR_INVALID;
        snprintf(r->group, sizeof(r->group), "%s", p->group);
        r->group_size = p->group_size;
        r->group_member = p->group_member;
    }
    snprintf(r->log_name, sizeof(r->log_name), "%s",
             (f & WST_RECEIVER_PARAM_LOG) && p->log_name ? p->log_name
                                                         : "receiver");
    if ((f & WST_RECEIVER_PARAM_LOG) && p->log_level >= 0 &&
        p->log_level <= WST_LOG_TRACE)
        set.log_level = p->log_level;
    wst_logger_init(&r->log, r->log_name, (enum wst_log_level)set.log_level);
    if (f & WST_RECEIVER_PARAM_LOG) {
        r->log.sink = p->log_fn;
        r->log.sink_arg = p->log_arg;
    }
    if ((f & WST_RECEIVER_PARAM_LANES) && p->lanes != 0)
        set.lanes = p->lanes;
    if (set.lanes == 0)
        set.lanes = wst_worker_lanes_auto();
    if (set.lanes > WST_WORKER_LANES_MAX) {
        WST_ERROR(&r->log, "lanes %llu: want 1 to %u (0: auto)",
                  (unsigned long long)set.lanes, WST_WORKER_LANES_MAX);
        return WST_ERR_INVALID;
    }
    r->lanes = (unsigned)set.lanes;
    if ((f & WST_RECEIVER_PARAM_DEVICE_RING) && p->device_ring_bytes != 0)
        set.device_ring = p->device_ring_bytes;
    if (set.device_ring < WST_RECV_DEVICE_RING_MIN ||
        set.device_ring > WST_RECV_DEVICE_RING_MAX ||
        set.device_ring % (1u << 20) != 0) {
        WST_ERROR(&r->log,
                  "device ring of %llu bytes: want whole MiB, 8 MiB to 64 "
                  "GiB (0: the default)",
                  (unsigned long long)set.device_ring);
        return WST_ERR_INVALID;
    }
    r->device_ring_bytes = set.device_ring;
    if ((f & WST_RECEIVER_PARAM_LANE_DEVICES) &&
        wst_worker_lane_devices_copy(p->lane_devices, r->lane_devices,
                                     sizeof(r->lane_devices),
                                     &r->log) != WST_OK)
        return WST_ERR_INVALID;
    /* After the lanes: the hashing keeps up with them (worker.h). */
    r->verify_threads = set.verify_threads != 0
                            ? (unsigned)set.verify_threads
                            : wst_worker_hash_threads_auto(r->lanes);
    if ((f & WST_RECEIVER_PARAM_AUTH) && p->auth_secret_file != NULL &&
        p->auth_secret_file[0] != '\0') {
        char err[512];
        st = wst_auth_secret_load(p->auth_secret_file, &r->secret, err,
                                  sizeof(err));
        if (st != WST_OK) {
            WST_ERROR(&r->log, "%s", err);
            return st;
        }
    }
    return WST_OK;
}

/* WST_RECEIVER_PARAM_INITIAL_STATE (and _LABEL): the refit machine and
 * the published state start where a previous run of the caller's left
 * off. WST_ERR_INVALID for a label that breaks the rule. */
static wst_status_t seed_state(struct wst_receiver *r,
                               const struct wst_receiver_params *p)
{
    const char *label = NULL;
    char why[256];

    if (p->field_mask & WST_RECEIVER_PARAM_INITIAL_LABEL) {
        label = p->initial_committed_label != NULL ? p->initial_committed_label
                                                   : "";
        if (!(p->field_mask & WST_RECEIVER_PARAM_INITIAL_STATE)) {
            WST_ERROR(&r->log, "initial_committed_label without "
                               "WST_RECEIVER_PARAM_INITIAL_STATE");
            return WST_ERR_INVALID;
        }
        if (wst_label_check(label, strlen(label), why, sizeof(why)) != WST_OK) {
            WST_ERROR(&r->log, "initial_committed_label: %s", why);
            return WST_ERR_INVALID;
        }
    }
    if (!(p->field_mask & WST_RECEIVER_PARAM_INITIAL_STATE))
        return WST_OK;
    wst_rm_seed(&r->rm, p->initial_committed_version, label,
                p->initial_unusable_reason);
    r->state.committed_version = wst_rm_committed(&r->rm);
    snprintf(r->state.committed_label, sizeof(r->state.committed_label), "%s",
             r->rm.committed_label);
    r->state.usable = wst_rm_usable(&r->rm);
    wst_recv_set_state_reason(r, r->rm.reason);
    if (r->state.usable)
        WST_INFO(&r->log, "starting at committed version %llu%s%s",
                 (unsigned long long)r->state.committed_version,
                 label != NULL && label[0] != '\0' ? " label " : "",
                 label != NULL ? label : "");
    else
        WST_WARN(&r->log, "starting unusable at committed version %llu: %s",
                 (unsigned long long)r->state.committed_version,
                 r->state.reason);
    return WST_OK;
}

wst_status_t wst_receiver_create(const struct wst_receiver_params *params,
                                 wst_receiver_t **receiver_p)
{
    struct wst_receiver *r = calloc(1, sizeof(*r));
    wst_status_t st;

    if (r == NULL)
        return WST_ERR_NO_MEMORY;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    r->state.usable = 1;
    r->device = -1;
    st = apply_params(r, params);
    if (st != WST_OK)
        goto err_free;
    r->state.lanes = r->lanes;
    st = seed_state(r, params);
    if (st != WST_OK)
        goto err_free;
    st = wst_jobq_create("wst-engine", &r->engine);
    if (st != WST_OK)
        goto err_free;
    st = wst_jobq_create("wst-repack", &r->repacker);
    if (st != WST_OK)
        goto err_destroy_engine;
    st = wst_jobq_create("wst-planner", &r->planner);
    if (st != WST_OK)
        goto err_destroy_repacker;
    if (r->verify) {
        st =
            wst_jobq_create_threads("wst-hash", r->verify_threads, &r->hashers);
        if (st != WST_OK)
            goto err_destroy_planner;
    }
    struct wst_worker_params wp = {
        .log = &r->log,
        .ops = {.arg = r,
                .accepted = wst_recv_on_accepted,
                .message = wst_recv_on_message,
                .conn_failed = wst_recv_on_conn_failed,
                .data_dest = wst_recv_on_data_dest,
                .data_done = wst_recv_on_data_done,
                .tick = wst_recv_on_tick},
        .max_control_msg = WST_MSG_MAX_DEFAULT,
        .heartbeat = r->heartbeat,
        .secret = &r->secret,
        .confine_ip = r->listen_host,
        .lanes = r->lanes,
        .lane_devices = r->lane_devices,
    };
    wp.rma = r->allow_put ? WST_WORKER_RMA_HARDWARE : WST_WORKER_RMA_NEVER;
    st = wst_worker_create(&wp, &r->worker);
    if (st != WST_OK)
        goto err_destroy_hashers;
    /* The public state's name length is the worker's, written out. */
    _Static_assert(sizeof(r->state.lane_device[0]) == WST_WORKER_DEVICE_MAX,
                   "wst_receiver_state.lane_device");
    for (unsigned i = 0; i < r->lanes && i < WST_RECEIVER_LANES_MAX; i++)
        snprintf(r->state.lane_device[i], sizeof(r->state.lane_device[i]), "%s",
                 wst_worker_lane_device(r->worker, i));
    /* No remote key leaves a worker whose puts UCX would emulate: those
     * write wherever the peer says. Senders then use am. */
    const char *why = NULL;
    if (r->allow_put && !wst_worker_has_rma(r->worker, &why)) {
        r->allow_put = 0;
        WST_INFO(&r->log, "no remote memory access (senders use am): %s", why);
    }
    *receiver_p = r;
    return WST_OK;

err_destroy_hashers:
    wst_jobq_destroy(r->hashers);
err_destroy_planner:
    wst_jobq_destroy(r->planner);
err_destroy_repacker:
    wst_jobq_destroy(r->repacker);
err_destroy_engine:
    wst_jobq_destroy(r->engine);
err_free:
    wst_auth_secret_release(&r->secret);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
    return st;
}

wst_status_t wst_receiver_add_loader(wst_receiver_t *r,
                                     const struct wst_repack_loader *loader)
{
    if (r->started)
        return WST_ERR_INVALID;
    wst_status_t st = wst_moe_add_loader(&r->moe, loader);
    if (st != WST_OK)
        WST_ERROR(&r->log, "loader %s: cannot register it (%s)",
                  loader != NULL && loader->name != NULL ? loader->name : "?",
                  wst_status_string(st));
    return st;
}

wst_status_t wst_receiver_add_expert_layer(wst_receiver_t *r,
                                           const struct wst_expert_layer *e)
{
    char err[256];

    if (r->started || e == NULL)
        return WST_ERR_INVALID;
    wst_status_t st = wst_moe_add(&r->moe, e, r->region_descs, r->n_regions,
                                  err, sizeof(err));
    if (st != WST_OK)
        WST_ERROR(&r->log, "%s", err);
    return st;
}

/* Staging lives where the live expert buffers are, and the repack writes
 * them from there: live w13/w2 split between host and GPU cannot be
 * served by one staging pool. */
static wst_status_t check_moe_memory(struct wst_receiver *r)
{
    enum wst_mem_type want = r->device >= 0 ? WST_MEM_CUDA : WST_MEM_HOST;

    for (size_t i = 0; i < r->moe.n_layers; i++) {
        const struct wst_moe_layer *ml = &r->moe.layers[i];
        if (r->regions[ml->w13_region].mem != want ||
            r->regions[ml->w2_region].mem != want) {
            WST_ERROR(&r->log,
                      "layer %u: live expert buffers in %s memory while "
                      "other regions are on GPU %d: put every MoE layer's "
                      "w13 and w2 on the GPU",
                      ml->layer,
                      wst_mem_type_name(r->regions[ml->w13_region].mem),
                      r->device);
            return WST_ERR_UNSUPPORTED;
        }
    }
    return WST_OK;
}

/* The device staging pool's remote key, where UCX can move device
 * memory and the mover setting allows put: senders with a lane that puts
 * into device memory put experts there (wst_recv_region_keyed). Without
 * it, am, as before. */
static void key_staging(struct wst_receiver *r)
{
    if (!r->put_wanted || !wst_worker_supports_cuda(r->worker))
        return;
    wst_status_t st = wst_recv_region_key_device(r, r->staging_region);
    if (st != WST_OK) {
        WST_WARN(&r->log,
                 "no remote key for the device staging pool (%s): experts "
                 "come by am",
                 wst_status_string(st));
        return;
    }
    r->device_put = 1;
    WST_INFO(&r->log,
             "device staging pool registered with a remote key (%zu bytes): "
             "senders that put into device memory put experts there",
             r->regions[r->staging_region].rkey_len);
}

/* Before listening: the engine's expert layers are checked (a refusal is
 * kept for the plan), the staging pool is allocated and registered as the
 * last region, and each MoE layer's three staged wants are added. */
static wst_status_t prepare_experts(struct wst_receiver *r)
{
    wst_status_t st = wst_moe_prepare(&r->moe, r->device);

    if (st != WST_OK) {
        WST_ERROR(&r->log, "cannot allocate %llu bytes of expert staging",
                  (unsigned long long)r->moe.staging_bytes);
        return st;
    }
    if (r->moe.refusal != WST_OK) {
        WST_WARN(&r->log, "expert layout will be refused: %s", r->moe.reason);
        return WST_OK;
    }
    if (r->moe.staging == NULL)
        return WST_OK;
    struct wst_region staging = {.name = "wstream.expert_staging",
                                 .data = r->moe.staging,
                                 .length = r->moe.staging_bytes,
                                 .mem_type = r->device >= 0 ? WST_MEM_CUDA
                                                            : WST_MEM_HOST};
    st = check_moe_memory(r);
    if (st == WST_OK)
        st = wst_receiver_add_region(r, &staging, &r->staging_region);
    if (st == WST_OK && r->device >= 0)
        key_staging(r);
    for (size_t i = 0; st == WST_OK && i < r->moe.n_layers; i++) {
        struct wst_want w[3];
        wst_moe_staging_wants(&r->moe, &r->moe.layers[i], r->staging_region, w);
        for (int p = 0; p < 3 && st == WST_OK; p++)
            st = wst_recv_add_want(r, &w[p]);
    }
    /* The repack thread finds live memory here, allocating nothing. */
    if (st == WST_OK && (r->region_data = calloc(
                             r->n_regions, sizeof(*r->region_data))) == NULL)
        st = WST_ERR_NO_MEMORY;
    for (size_t i = 0; st == WST_OK && i < r->n_regions; i++)
        r->region_data[i] = r->regions[i].data;
    if (st == WST_OK)
        WST_INFO(&r->log,
                 "%zu MoE layers: staging %u slots x %llu bytes (%.1f MiB)",
                 r->moe.n_layers, r->moe.slots,
                 (unsigned long long)r->moe.slot_bytes,
                 (double)r->moe.staging_bytes / (1 << 20));
    return st;
}

struct listen_call {
    struct wst_receiver *r;
    uint16_t port;
    wst_status_t st;
};

static void do_listen(void *arg)
{
    struct listen_call *c = arg;

    c->st = wst_worker_listen(c->r->worker, c->r->listen_host,
                              c->r->listen_port, &c->port);
}

wst_status_t wst_receiver_start(wst_receiver_t *r, uint16_t *port_p)
{
    struct listen_call c = {.r = r};
    wst_status_t st;

    if (r->started)
        return WST_ERR_STATE;
    st = wst_recv_prepare_device(r);
    if (st == WST_OK)
        st = prepare_experts(r);
    if (st == WST_OK)
        st = wst_recv_prepare_rx_regions(r);
    if (st != WST_OK)
        return st;
    st = wst_worker_call(r->worker, do_listen, &c);
    if (st == WST_OK)
        st = c.st;
    if (st != WST_OK)
        return st;
    r->started = 1;
    WST_INFO(&r->log,
             "listening on %s:%u: %zu regions, %zu wants, %u data lanes, "
             "%u hashing threads%s",
             r->listen_host, c.port, r->n_regions, r->n_wants, r->lanes,
             r->verify ? r->verify_threads : 0,
             r->verify ? "" : " (no verify)");
    if (port_p != NULL)
        *port_p = c.port;
    return WST_OK;
}

void wst_receiver_get_state(wst_receiver_t *r, struct wst_receiver_state *state)
{
    pthread_mutex_lock(&r->lock);
    *state = r->state;
    pthread_mutex_unlock(&r->lock);
    struct wst_control_counts cc = {0};
    if (r->worker != NULL)
        wst_worker_control_counts(r->worker, &cc);
    state->control_msgs_out = cc.msgs_out;
    state->control_bytes_out = cc.bytes_out;
    state->control_msgs_in = cc.msgs_in;
    state->control_bytes_in = cc.bytes_in;
}

wst_status_t wst_receiver_wait_committed(wst_receiver_t *r, uint64_t version,
                                         double timeout_s)
{
    uint64_t deadline = wst_deadline_ns(timeout_s);
    uint64_t failed_before;
    wst_status_t st = WST_ERR_TIMED_OUT;

    pthread_mutex_lock(&r->lock);
    failed_before = r->state.refits_failed;
    while (wst_now_ns() < deadline) {
        if (r->state.committed_version >= version) {
            st = WST_OK;
            break;
        }
        if (r->state.refits_failed != failed_before) {
            st = WST_ERR_UNUSABLE;
            break;
        }
        wst_cond_wait_s(&r->cond, &r->lock, 0.02);
    }
    pthread_mutex_unlock(&r->lock);
    return st;
}

uint32_t wst_receiver_get_timeline(wst_receiver_t *r,
                                   struct wst_layer_times *times, uint32_t n)
{
    uint32_t layers;

    pthread_mutex_lock(&r->lock);
    layers = r->n_times;
    if (times != NULL && layers != 0)
        memcpy(times, r->times, (n < layers ? n : layers) * sizeof(*times));
    pthread_mutex_unlock(&r->lock);
    return layers;
}

static void shutdown_peers(void *arg)
{
    struct wst_receiver *r = arg;

    r->closing = 1;
    wst_recv_refit_shutdown(r);
    for (uint32_t i = 0; i < r->world_size; i++)
        if (r->by_rank[i] != NULL)
            wst_recv_peer_drop(r, r->by_rank[i]);
}

void wst_receiver_destroy(wst_receiver_t *r)
{
    if (r == NULL)
        return;
    /* Peers first (no new work), then the engine thread (its late results
     * are posted to the worker and dropped as stale), then the worker. */
    wst_worker_call(r->worker, shutdown_peers, r);
    /* A plan still running posts its result, dropped as r->closing. */
    wst_jobq_destroy(r->planner);
    wst_jobq_destroy(r->repacker);
    wst_jobq_destroy(r->engine);
    /* Hashes still reading landed bytes end before the regions go. */
    wst_jobq_destroy(r->hashers);
    wst_landing_stop(r->landing); /* copies done, none posted after this */
    wst_landing_stop(r->device_landing);
    for (size_t i = 0; i < r->n_regions; i++) {
        free(r->regions[i].rkey);
        if (r->regions[i].memh != NULL)
            wst_worker_mem_unmap(r->worker, r->regions[i].memh);
    }
    wst_worker_destroy(r->worker);
    wst_recv_release_retired(r); /* had the plan's result not come back */
    wst_landing_destroy(r->landing);
    wst_landing_destroy(r->device_landing);
    wst_recv_device_destroy(r->dev);
    free(r->rx_regions);
    wst_plan_destroy(r->plan);
    free(r->layer_index);
    wst_recv_refit_release(r);
    free(r->layer_moe);
    free(r->times);
    free(r->region_data);
    wst_moe_release(&r->moe);
    free(r->by_rank);
    free(r->regions);
    free(r->region_descs);
    free(r->wants);
    wst_auth_secret_release(&r->secret);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
}
