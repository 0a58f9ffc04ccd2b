/* agent_main.c - wstream-agent: the receiver library as a standalone daemon.
 *
 * Reads a layout file (receiver/agent/layout_file.h), maps the engine's live
 * regions from the POSIX shared-memory object the layout names, or imports
 * the engine's GPU allocation by the CUDA IPC handle it names ("cuda_ipc":
 * the regions are then device memory, WST_MEM_CUDA), or allocates them
 * itself when it names neither; registers them once, and
 * serves refits until SIGTERM or SIGINT. Its state after every commit or
 * failure goes to --status-file as one JSON object, so operators and tests
 * can see the committed version and whether the agent is usable.
 *
 * Exit codes: 0 after a clean shutdown, otherwise -status of the error that
 * stopped start-up (see include/wstream/status.h).
 */
#include <wstream/receiver.h>

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "clock.h"
#include "config.h"
#include "engine_socket.h"
#include "gpu.h"
#include "gpu_probe.h"
#include "layout_file.h"
#include "log.h"
#include "metrics.h"

/* The layout parser keeps its own copy of the handle size. */
_Static_assert(WST_LAYOUT_CUDA_IPC_BYTES == WST_GPU_IPC_HANDLE_BYTES,
               "layout file and gpu.h disagree on the CUDA IPC handle size");

struct agent_settings {
    char *layout;
    char *listen;
    char *port_file;
    char *status_file;
    char *engine_socket;
    double timeout;
    double heartbeat;
    double peer_timeout;
    int mover;
    uint64_t staging_slots;
    int verify;
    int log_level;
    int log_format;
    char *metrics_listen;
    char *metrics_port_file;
};

static const char *const mover_choices[] = {"auto", "am", NULL};
static const char *const level_choices[] = {"error", "warn",  "info",
                                            "debug", "trace", NULL};
/* Indexes are enum wst_log_format values. */
static const char *const format_choices[] = {"text", "json", NULL};

static const struct wst_config_entry agent_config[] = {
    {"layout", WST_CONFIG_STRING, "", "layout file (JSON) to serve",
     offsetof(struct agent_settings, layout), NULL},
    {"listen", WST_CONFIG_STRING, "0.0.0.0:7070",
     "address to listen on, host:port (port 0: any)",
     offsetof(struct agent_settings, listen), NULL},
    {"port-file", WST_CONFIG_STRING, "",
     "write the bound port here once listening",
     offsetof(struct agent_settings, port_file), NULL},
    {"status-file", WST_CONFIG_STRING, "",
     "write the agent state (JSON) here after every refit",
     offsetof(struct agent_settings, status_file), NULL},
    {"engine-socket", WST_CONFIG_STRING, "",
     "listen here (Unix socket) for the engine process; empty: no engine, "
     "hooks only log",
     offsetof(struct agent_settings, engine_socket), NULL},
    {"timeout", WST_CONFIG_DOUBLE, "30",
     "seconds before missing manifests or a stalled refit fail",
     offsetof(struct agent_settings, timeout), NULL},
    {"heartbeat", WST_CONFIG_DOUBLE, "1",
     "seconds between heartbeats on every control connection",
     offsetof(struct agent_settings, heartbeat), NULL},
    {"peer-timeout", WST_CONFIG_DOUBLE, "5",
     "seconds of silence after which a sender has failed",
     offsetof(struct agent_settings, peer_timeout), NULL},
    {"mover", WST_CONFIG_ENUM, "auto",
     "auto: senders put where their lane does real RMA; am: never",
     offsetof(struct agent_settings, mover), mover_choices},
    {"staging-slots", WST_CONFIG_UINT, "2",
     "MoE layers staged at once (1..64): staging memory is this many "
     "layers' local experts",
     offsetof(struct agent_settings, staging_slots), NULL},
    {"verify", WST_CONFIG_BOOL, "yes", "check every layer's digest",
     offsetof(struct agent_settings, verify), NULL},
    {"log-level", WST_CONFIG_ENUM, "info", "error, warn, info, debug, trace",
     offsetof(struct agent_settings, log_level), level_choices},
    {"log-format", WST_CONFIG_ENUM, "text",
     "text, or json: one object per line (ts, level, component, msg) for "
     "log collectors",
     offsetof(struct agent_settings, log_format), format_choices},
    {"metrics-listen", WST_CONFIG_STRING, "",
     "HOST:PORT for Prometheus /metrics, /healthz and /readyz (port 0: any); "
     "empty: no HTTP server",
     offsetof(struct agent_settings, metrics_listen), NULL},
    {"metrics-port-file", WST_CONFIG_STRING, "",
     "write the bound metrics port here once serving",
     offsetof(struct agent_settings, metrics_port_file), NULL},
    WST_CONFIG_END,
};

struct agent {
    struct agent_settings set;
    struct wst_logger log;
    struct wst_log_stream
        log_stream;              /* --log-format, for log and the receiver */
    struct wst_metrics *metrics; /* NULL without --metrics-listen */
    struct wst_layout layout;
    wst_receiver_t *receiver;
    struct wst_engine_socket *engine; /* NULL without --engine-socket */
    void *shm_base;
    uint64_t shm_bytes;
    void *ipc_base;    /* the engine's device allocation, mapped by CUDA IPC;
                          unmapped after the receiver is destroyed */
    void **owned;      /* regions the agent allocated itself */
    double register_s; /* registering every region, at start-up */
    char name[32];     /* log name, "agent[rank]" once the layout is read */
};

static int write_file_atomic(const char *path, const char *text)
{
    char tmp[4096];
    FILE *f;

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "w");
    if (f == NULL)
        return -1;
    fputs(text, f);
    if (fclose(f) != 0)
        return -1;
    return rename(tmp, path);
}

/* The state, and the last refit's per-layer timeline (seconds from the
 * engine's begin acknowledgement), as one JSON object. */
static void write_status(struct agent *a)
{
    struct wst_receiver_state st;
    struct json_object *o, *layers;
    struct wst_layer_times *times = NULL;
    uint32_t n;

    if (a->set.status_file[0] == '\0' || a->receiver == NULL)
        return;
    wst_receiver_get_state(a->receiver, &st);
    n = wst_receiver_get_timeline(a->receiver, NULL, 0);
    if (n != 0 && (times = calloc(n, sizeof(*times))) != NULL)
        n = wst_receiver_get_timeline(a->receiver, times, n);
    o = json_object_new_object();
    layers = json_object_new_array();
    json_object_object_add(o, "committed_version",
                           json_object_new_uint64(st.committed_version));
    json_object_object_add(o, "usable", json_object_new_boolean(st.usable));
    json_object_object_add(o, "refits_ok",
                           json_object_new_uint64(st.refits_ok));
    json_object_object_add(o, "refits_failed",
                           json_object_new_uint64(st.refits_failed));
    json_object_object_add(o, "last_refit_bytes",
                           json_object_new_uint64(st.last_refit_bytes));
    json_object_object_add(o, "last_refit_seconds",
                           json_object_new_double(st.last_refit_seconds));
    json_object_object_add(o, "plan_seconds",
                           json_object_new_double(st.plan_seconds));
    json_object_object_add(o, "register_seconds",
                           json_object_new_double(a->register_s));
    json_object_object_add(o, "time_ns", json_object_new_uint64(wst_now_ns()));
    json_object_object_add(o, "reason", json_object_new_string(st.reason));
    for (uint32_t i = 0; times != NULL && i < n; i++) {
        struct json_object *l = json_object_new_object();
        json_object_object_add(l, "layer", json_object_new_int64(i));
        json_object_object_add(l, "received",
                               json_object_new_double(times[i].received));
        json_object_object_add(l, "repacked",
                               json_object_new_double(times[i].repacked));
        json_object_object_add(l, "finalized",
                               json_object_new_double(times[i].finalized));
        json_object_object_add(l, "repack_seconds",
                               json_object_new_double(times[i].repack_seconds));
        json_object_object_add(
            l, "finalize_seconds",
            json_object_new_double(times[i].finalize_seconds));
        json_object_array_add(layers, l);
    }
    json_object_object_add(o, "layers", layers);
    const char *text =
        json_object_to_json_string_ext(o, JSON_C_TO_STRING_SPACED);
    if (write_file_atomic(a->set.status_file, text) != 0)
        WST_WARN(&a->log, "cannot write status file %s: %s", a->set.status_file,
                 strerror(errno));
    json_object_put(o);
    free(times);
}

/* Daemon-mode engine hooks: with --engine-socket each event goes to the
 * engine process over the socket (engine_socket.h); without it the agent
 * only logs, and begin is acknowledged at once. */
static wst_status_t hook_begin(void *arg, uint64_t version, char *reason,
                               size_t reason_len)
{
    struct agent *a = arg;

    WST_INFO(&a->log, "engine: begin version %llu",
             (unsigned long long)version);
    if (a->engine == NULL)
        return WST_OK;
    return wst_engine_socket_begin(a->engine, version, reason, reason_len);
}

static wst_status_t hook_layer_finalized(void *arg, uint32_t layer,
                                         uint64_t version, char *reason,
                                         size_t reason_len)
{
    struct agent *a = arg;

    WST_DEBUG(&a->log, "engine: layer %u of version %llu final", layer,
              (unsigned long long)version);
    if (a->engine == NULL)
        return WST_OK;
    return wst_engine_socket_layer(a->engine, layer, version, reason,
                                   reason_len);
}

static void hook_committed(void *arg, uint64_t version)
{
    struct agent *a = arg;

    WST_INFO(&a->log, "engine: serving version %llu",
             (unsigned long long)version);
    wst_metrics_refit_committed(a->metrics);
    if (a->engine != NULL)
        wst_engine_socket_committed(a->engine, version);
    write_status(a);
}

static void hook_unusable(void *arg, wst_status_t status, const char *reason)
{
    struct agent *a = arg;

    WST_ERROR(&a->log, "engine: unusable (%s): %s", wst_status_string(status),
              reason);
    wst_metrics_refit_failed(a->metrics, status);
    if (a->engine != NULL)
        wst_engine_socket_unusable(a->engine, status, reason);
    write_status(a);
}

static wst_status_t map_shm(struct agent *a)
{
    const struct wst_layout *l = &a->layout;
    struct stat sb;
    int fd = shm_open(l->shm, O_RDWR, 0);

    if (fd < 0) {
        WST_ERROR(&a->log, "shm_open %s: %s", l->shm, strerror(errno));
        return WST_ERR_IO;
    }
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < l->shm_bytes) {
        WST_ERROR(&a->log,
                  "shared memory %s holds %lld bytes, the layout "
                  "needs %llu",
                  l->shm, (long long)sb.st_size,
                  (unsigned long long)l->shm_bytes);
        close(fd);
        return WST_ERR_INVALID;
    }
    /* Populate now: faulting 4 KiB pages in during the first refit cost
     * seconds per GB (NOTES.md); like registration, this is start-up
     * work. */
    a->shm_base = mmap(NULL, l->shm_bytes, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (a->shm_base == MAP_FAILED) {
        a->shm_base = NULL;
        WST_ERROR(&a->log, "mmap %s: %s", l->shm, strerror(errno));
        return WST_ERR_IO;
    }
    a->shm_bytes = l->shm_bytes;
    return WST_OK;
}

/* Fails at start with a message that says what is missing, rather than
 * letting the import fail with CUDA's words. */
static wst_status_t check_device(struct agent *a, int device)
{
    char why[256] = "";
    int count = 0;

    if (wst_kernels_device_count(&count, why, sizeof(why)) != WST_OK) {
        WST_ERROR(&a->log,
                  "layout %s: cuda_ipc needs a CUDA build and a GPU: %s",
                  a->set.layout, why);
        return WST_ERR_NO_DEVICE;
    }
    if (device >= count) {
        WST_ERROR(&a->log,
                  "layout %s: cuda_device %d, but %d GPU%s visible here",
                  a->set.layout, device, count, count == 1 ? " is" : "s are");
        return WST_ERR_NO_DEVICE;
    }
    return WST_OK;
}

/* Maps the engine's device allocation named by the layout's cuda_ipc. Its
 * last byte must be device memory on that GPU: a cuda_bytes larger than
 * the engine's allocation is refused here, not found during a refit. */
static wst_status_t import_cuda_ipc(struct agent *a)
{
    const struct wst_layout *l = &a->layout;
    int device = (int)l->cuda_device, found = -1;
    wst_status_t st;

    st = check_device(a, device);
    if (st != WST_OK)
        return st;
    st = wst_gpu_ipc_import(&a->log, device, l->cuda_ipc, &a->ipc_base);
    if (st != WST_OK) {
        a->ipc_base = NULL;
        WST_ERROR(&a->log,
                  "layout %s: cannot import the cuda_ipc handle on GPU %d "
                  "(is the engine that exported it alive, on this host?)",
                  a->set.layout, device);
        return st;
    }
    if (wst_gpu_mem_type((char *)a->ipc_base + l->cuda_bytes - 1, &found) !=
            WST_MEM_CUDA ||
        found != device) {
        WST_ERROR(&a->log,
                  "layout %s: cuda_bytes %llu runs past the engine's device "
                  "allocation on GPU %d",
                  a->set.layout, (unsigned long long)l->cuda_bytes, device);
        return WST_ERR_INVALID;
    }
    WST_INFO(&a->log,
             "imported %.1f MiB of device memory on GPU %d by CUDA IPC",
             (double)l->cuda_bytes / (1 << 20), device);
    return WST_OK;
}

static void *region_memory(struct agent *a, size_t i)
{
    const struct wst_layout_region *reg = &a->layout.regions[i];
    void *p = NULL;

    if (a->shm_base != NULL)
        return (char *)a->shm_base + reg->offset;
    if (a->ipc_base != NULL)
        return (char *)a->ipc_base + reg->offset;
    if (posix_memalign(&p, 4096, reg->bytes) != 0)
        return NULL;
    memset(p, 0, reg->bytes);
    a->owned[i] = p;
    return p;
}

static wst_status_t add_layout(struct agent *a)
{
    const struct wst_layout *l = &a->layout;
    wst_status_t st;

    a->owned = calloc(l->n_regions ? l->n_regions : 1, sizeof(*a->owned));
    if (a->owned == NULL)
        return WST_ERR_NO_MEMORY;
    for (size_t i = 0; i < l->n_regions; i++) {
        struct wst_region reg = {
            .name = l->regions[i].name,
            .data = region_memory(a, i),
            .length = l->regions[i].bytes,
            .mem_type = a->ipc_base != NULL ? WST_MEM_CUDA : WST_MEM_HOST,
        };
        if (reg.data == NULL)
            return WST_ERR_NO_MEMORY;
        st = wst_receiver_add_region(a->receiver, &reg, NULL);
        if (st != WST_OK)
            return st;
    }
    for (size_t i = 0; i < l->n_wants; i++) {
        const struct wst_want *w = &l->wants[i];
        struct wst_want_entry e = {
            .name = w->tensor.name,
            .dtype = w->tensor.dtype,
            .ndim = w->tensor.ndim,
            .shape = w->tensor.shape,
            .box_start = w->box.start,
            .box_stop = w->box.stop,
            .region = w->region,
            .offset = w->offset,
            .row_pitch = w->row_pitch,
            .expert_grouped = w->expert.grouped,
            .ep_rank = w->expert.ep_rank,
            .ep_size = w->expert.ep_size,
        };
        st = wst_receiver_add_want(a->receiver, &e);
        if (st != WST_OK)
            return st;
    }
    for (size_t i = 0; i < l->n_experts; i++) {
        const struct wst_layout_experts *x = &l->experts[i];
        struct wst_expert_layer e = {
            .layer = x->layer,
            .loader = x->loader,
            .dtype = x->dtype,
            .n_experts = x->n_experts,
            .ep_rank = x->ep_rank,
            .ep_size = x->ep_size,
            .hidden = x->hidden,
            .inter = x->inter,
            .expert_ids = x->expert_ids,
            .n_expert_ids = x->n_expert_ids,
            .inter_tp_rank = x->inter_tp_rank,
            .inter_tp_size = x->inter_tp_size,
            .w13_region = x->w13_region,
            .w13_offset = x->w13_offset,
            .w2_region = x->w2_region,
            .w2_offset = x->w2_offset,
        };
        st = wst_receiver_add_expert_layer(a->receiver, &e);
        if (st != WST_OK)
            return st;
    }
    return WST_OK;
}

static wst_status_t split_listen(const char *spec, char *host, size_t hostlen,
                                 uint16_t *port)
{
    const char *colon = strrchr(spec, ':');
    char *end = NULL;

    if (colon == NULL || (size_t)(colon - spec) >= hostlen)
        return WST_ERR_CONFIG;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || p > 65535)
        return WST_ERR_CONFIG;
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    *port = (uint16_t)p;
    return WST_OK;
}

/* A bound port, for whoever started us ("" path: not asked for). */
static wst_status_t write_port(struct agent *a, const char *path, uint16_t port,
                               const char *what)
{
    char text[16];

    if (path[0] == '\0')
        return WST_OK;
    snprintf(text, sizeof(text), "%u\n", port);
    if (write_file_atomic(path, text) != 0) {
        WST_ERROR(&a->log, "cannot write %s file %s: %s", what, path,
                  strerror(errno));
        return WST_ERR_IO;
    }
    return WST_OK;
}

/* --metrics-listen: the HTTP endpoints, once the receiver is serving. */
static wst_status_t start_metrics(struct agent *a)
{
    char host[256];
    uint16_t port;
    wst_status_t st;

    if (split_listen(a->set.metrics_listen, host, sizeof(host), &port) !=
        WST_OK) {
        WST_ERROR(&a->log,
                  "--metrics-listen: bad value '%s': expected host:port",
                  a->set.metrics_listen);
        return WST_ERR_CONFIG;
    }
    st =
        wst_metrics_start(&a->log, a->receiver, host, port, &port, &a->metrics);
    if (st != WST_OK)
        return st;
    return write_port(a, a->set.metrics_port_file, port, "metrics port");
}

static wst_status_t agent_start(struct agent *a)
{
    char host[256], err[512];
    uint16_t port;
    wst_status_t st;

    if (split_listen(a->set.listen, host, sizeof(host), &port) != WST_OK) {
        WST_ERROR(&a->log, "--listen: bad value '%s': expected host:port",
                  a->set.listen);
        return WST_ERR_CONFIG;
    }
    if (a->set.staging_slots < 1 || a->set.staging_slots > 64) {
        WST_ERROR(&a->log, "--staging-slots: %llu is not in 1..64",
                  (unsigned long long)a->set.staging_slots);
        return WST_ERR_CONFIG;
    }
    st = wst_layout_load(a->set.layout, &a->layout, err, sizeof(err));
    if (st != WST_OK) {
        WST_ERROR(&a->log, "layout %s: %s", a->set.layout, err);
        return st;
    }
    snprintf(a->name, sizeof(a->name), "agent[%u]", a->layout.rank);
    if (a->layout.shm[0] != '\0' && (st = map_shm(a)) != WST_OK)
        return st;
    if (a->layout.has_cuda_ipc && (st = import_cuda_ipc(a)) != WST_OK)
        return st;
    if (a->set.engine_socket[0] != '\0') {
        st = wst_engine_socket_create(a->set.engine_socket, a->set.timeout,
                                      &a->log, &a->engine);
        if (st != WST_OK)
            return st;
    }
    struct wst_receiver_params rp = {
        .field_mask = WST_RECEIVER_PARAM_RANK | WST_RECEIVER_PARAM_LISTEN |
                      WST_RECEIVER_PARAM_TIMEOUT | WST_RECEIVER_PARAM_MOVER |
                      WST_RECEIVER_PARAM_VERIFY | WST_RECEIVER_PARAM_LOG |
                      WST_RECEIVER_PARAM_HOOKS | WST_RECEIVER_PARAM_HEARTBEAT |
                      WST_RECEIVER_PARAM_STAGING_SLOTS,
        .rank = a->layout.rank,
        .listen_host = host,
        .listen_port = port,
        .timeout_s = a->set.timeout,
        .mover = mover_choices[a->set.mover],
        .verify = a->set.verify,
        .heartbeat_s = a->set.heartbeat,
        .peer_timeout_s = a->set.peer_timeout,
        .staging_slots = (uint32_t)a->set.staging_slots,
        .log_level = a->set.log_level,
        .log_name = a->log.name,
        .log_fn = wst_log_stream_sink,
        .log_arg = &a->log_stream,
        .hooks = {.arg = a,
                  .begin = hook_begin,
                  .layer_finalized = hook_layer_finalized,
                  .committed = hook_committed,
                  .unusable = hook_unusable},
    };
    st = wst_receiver_create(&rp, &a->receiver);
    if (st != WST_OK)
        return st;
    double t0 = wst_now_s();
    st = add_layout(a);
    a->register_s = wst_now_s() - t0;
    if (st != WST_OK)
        return st;
    st = wst_receiver_start(a->receiver, &port);
    if (st != WST_OK)
        return st;
    write_status(a);
    if (a->set.metrics_listen[0] != '\0' && (st = start_metrics(a)) != WST_OK)
        return st;
    return write_port(a, a->set.port_file, port, "port");
}

static void agent_stop(struct agent *a)
{
    /* Scrapes read the receiver: the server goes first. */
    wst_metrics_destroy(a->metrics);
    wst_receiver_destroy(a->receiver);
    /* After the receiver: its engine thread may be inside a hook. */
    wst_engine_socket_destroy(a->engine);
    for (size_t i = 0; a->owned != NULL && i < a->layout.n_regions; i++)
        free(a->owned[i]);
    free(a->owned);
    if (a->shm_base != NULL)
        munmap(a->shm_base, a->shm_bytes);
    /* After the receiver: its threads copy into the mapping until then. */
    if (a->ipc_base != NULL)
        wst_gpu_ipc_close(a->ipc_base);
    wst_layout_release(&a->layout);
    wst_config_release(agent_config, &a->set);
}

int main(int argc, char **argv)
{
    struct agent a;
    sigset_t sigs;
    int sig, code;
    wst_status_t st;

    memset(&a, 0, sizeof(a));
    wst_config_cli(agent_config, &a.set, argc, argv, "wstream-agent",
                   "wstream-agent --layout FILE [options]", &code);
    if (code < 0 && a.set.layout[0] == '\0') {
        fprintf(stderr, "wstream-agent: --layout is required\n");
        code = -WST_ERR_CONFIG;
    } else if (code == 2) {
        code = -WST_ERR_CONFIG;
    }
    if (code >= 0) {
        wst_config_release(agent_config, &a.set);
        return code;
    }
    /* Signals are taken synchronously below; block them before any thread
     * starts so no library thread receives them. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    /* A restarted agent must rebind its port at once (UCX_NOTES.md). */
    setenv("UCX_TCP_CM_REUSEADDR", "y", 0);

    snprintf(a.name, sizeof(a.name), "agent");
    wst_logger_init(&a.log, a.name, (enum wst_log_level)a.set.log_level);
    a.log_stream = (struct wst_log_stream){
        .out = stderr,
        .format = (enum wst_log_format)a.set.log_format,
        .name = a.name,
    };
    a.log.sink = wst_log_stream_sink;
    a.log.sink_arg = &a.log_stream;
    st = agent_start(&a);
    if (st == WST_OK) {
        /* Hooks write the status file at commits and failures; a plan
         * refusal has no hook, so look for state changes meanwhile. */
        struct wst_receiver_state seen, now;
        struct timespec tick = {.tv_sec = 0, .tv_nsec = 100 * 1000000L};
        wst_receiver_get_state(a.receiver, &seen);
        while ((sig = sigtimedwait(&sigs, NULL, &tick)) < 0) {
            wst_receiver_get_state(a.receiver, &now);
            if (now.usable != seen.usable ||
                now.committed_version != seen.committed_version ||
                now.refit_in_progress != seen.refit_in_progress ||
                strcmp(now.reason, seen.reason) != 0) {
                write_status(&a);
                seen = now;
            }
        }
        WST_INFO(&a.log, "signal %d: shutting down", sig);
    } else {
        WST_ERROR(&a.log, "start-up failed: %s", wst_status_string(st));
    }
    agent_stop(&a);
    return st == WST_OK ? 0 : -st;
}
